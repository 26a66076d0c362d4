#!/usr/bin/env bash
# Fuzzes the GGUF reader with libFuzzer for a bounded time.
#
# Usage: scripts/fuzz.sh [SECONDS]      (default 60)
# Env:   JOBS (build parallelism, default 2), FUZZ_FLAGS (extra libFuzzer flags),
#        KVSERVE_FUZZ_BUILD (build dir, default build-fuzz), KVSERVE_FUZZ_SOURCE (source tree).
# Configures build-fuzz with clang and -DKVSERVE_FUZZ=ON, builds gguf_fuzz, and runs it over a
# temporary copy of the seed corpus (tests/data/gguf/corpus plus the .gguf fixtures), so the
# committed corpus is never modified. Crash inputs land in $KVSERVE_FUZZ_BUILD/fuzz-artifacts/.
# Exits non-zero if the fuzzer finds a crash, leak, timeout or sanitizer report.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
src="${KVSERVE_FUZZ_SOURCE:-$root}"
build="${KVSERVE_FUZZ_BUILD:-$root/build-fuzz}"
seconds="${1:-60}"

CC=clang CXX=clang++ cmake -S "$src" -B "$build" -G Ninja -DKVSERVE_FUZZ=ON \
  -DKVSERVE_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"${JOBS:-2}" --target gguf_fuzz

corpus="$(mktemp -d)"
trap 'rm -rf "$corpus"' EXIT
cp "$root"/tests/data/gguf/corpus/* "$root"/tests/data/gguf/*.gguf "$corpus"/
artifacts="$build/fuzz-artifacts"
mkdir -p "$artifacts"

# shellcheck disable=SC2086  # FUZZ_FLAGS is a list of flags
"$build/tests/gguf/gguf_fuzz" -max_total_time="$seconds" -max_len=4096 -timeout=10 \
  -rss_limit_mb=2048 -dict="$root/tests/data/gguf/gguf.dict" -print_final_stats=1 \
  -artifact_prefix="$artifacts/" ${FUZZ_FLAGS:-} "$corpus"
echo "fuzz.sh: no crash in ${seconds}s"
