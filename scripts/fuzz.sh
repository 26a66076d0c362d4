#!/usr/bin/env bash
# Fuzzes the GGUF reader, the HTTP request parser and the OpenAI request codec with libFuzzer,
# each for a bounded time.
#
# Usage: scripts/fuzz.sh [SECONDS]      (per target; default 60)
# Env:   JOBS (build parallelism, default 2), FUZZ_JOBS (targets fuzzed at a time, default one per
#        core), FUZZ_FLAGS (extra libFuzzer flags, for every target),
#        KVSERVE_FUZZ_BUILD (build dir, default build-fuzz), KVSERVE_FUZZ_SOURCE (source tree).
# Configures build-fuzz with clang and -DKVSERVE_FUZZ=ON (a build configured so already, such as
# scripts/test.sh's build-asan, keeps its other settings and is only brought up to date), builds
# gguf_fuzz, http_request_fuzz and openai_codec_fuzz, and runs each over a temporary copy of its
# seed corpus (tests/data/gguf/corpus plus the .gguf fixtures, tests/data/http/corpus,
# tests/data/openai/corpus) with its dictionary where it has one, so the committed corpora are
# never modified. Crash inputs land in $KVSERVE_FUZZ_BUILD/fuzz-artifacts/<target>-.... Every
# target runs even when an earlier one fails; exits non-zero if any finds a crash, leak, timeout,
# sanitizer report or broken invariant.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
src="${KVSERVE_FUZZ_SOURCE:-$root}"
build="${KVSERVE_FUZZ_BUILD:-$root/build-fuzz}"
seconds="${1:-60}"

CC=clang CXX=clang++ cmake -S "$src" -B "$build" -G Ninja -DKVSERVE_FUZZ=ON \
  -DKVSERVE_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"${JOBS:-2}" --target gguf_fuzz http_request_fuzz openai_codec_fuzz

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
artifacts="$build/fuzz-artifacts"
mkdir -p "$artifacts"

# fuzz TARGET BINARY MAX_LEN SEED... [-- LIBFUZZER_FLAG...]: copies the seeds (files, or the
# files in directories) into a fresh corpus and fuzzes it for $seconds, in the background once a
# slot is free: FUZZ_JOBS targets (default: one per core) run at a time, each single-threaded,
# so every target gets its whole $seconds of one core. Its output goes to $work/TARGET.log and
# its exit status to $work/TARGET.rc.
slots="${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 1)}"
targets=()
fuzz() {
  local target="$1" binary="$2" max_len="$3"
  shift 3
  local corpus="$work/$target"
  mkdir -p "$corpus"
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    if [ -d "$1" ]; then cp "$1"/* "$corpus"/; else cp "$1" "$corpus"/; fi
    shift
  done
  [ $# -gt 0 ] && shift
  while [ "$(jobs -rp | wc -l)" -ge "$slots" ]; do wait -n || true; done
  echo "fuzz.sh: $target for ${seconds}s"
  targets+=("$target")
  # shellcheck disable=SC2086  # FUZZ_FLAGS is a list of flags
  (
    rc=0
    "$binary" -max_total_time="$seconds" -max_len="$max_len" -timeout=10 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="$artifacts/$target-" "$@" ${FUZZ_FLAGS:-} \
      "$corpus" >"$work/$target.log" 2>&1 || rc=$?
    echo "$rc" >"$work/$target.rc"
  ) &
}

fuzz gguf "$build/tests/gguf/gguf_fuzz" 4096 \
  "$root"/tests/data/gguf/corpus "$root"/tests/data/gguf/*.gguf \
  -- -dict="$root/tests/data/gguf/gguf.dict"
fuzz http "$build/tests/http/http_request_fuzz" 8192 "$root"/tests/data/http/corpus \
  -- -dict="$root/tests/data/http/http.dict"
fuzz openai "$build/tests/server/openai_codec_fuzz" 4096 "$root"/tests/data/openai/corpus
wait

# Each target's output in turn (its last lines: the final stats, or the crash and its input).
failed=""
for target in "${targets[@]}"; do
  echo "== fuzz.sh: $target"
  tail -n 40 "$work/$target.log"
  if [ "$(cat "$work/$target.rc" 2>/dev/null || echo 1)" != 0 ]; then
    echo "fuzz.sh: $target FAILED (inputs in $artifacts/)"
    failed="$failed $target"
  fi
done
if [ -n "$failed" ]; then
  echo "fuzz.sh: failed:$failed"
  exit 1
fi
echo "fuzz.sh: no crash in ${seconds}s per target"
