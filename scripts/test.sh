#!/usr/bin/env bash
# The whole test suite: install dependencies, build, run every test, run the fast unit tests
# again under AddressSanitizer + UndefinedBehaviorSanitizer, the threaded ones (compute pool, tier
# I/O, engine, HTTP, kvserve serve) under ThreadSanitizer, and fuzz the GGUF reader, the HTTP
# request parser and the OpenAI codec for a bounded time.
# Ends with how long each phase took, the ten slowest tests, and one summary line
# "summary: N passed, M failed".
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
jobs="$(nproc 2>/dev/null || echo 2)"
logdir="$(mktemp -d)"
passed=0
failed=0
status=0

# phase NAME: closes the running phase (its seconds go to the timing table) and opens NAME.
phase_names=()
phase_secs=()
phase_name=""
phase_start=$SECONDS
phase() {
  if [ -n "$phase_name" ]; then
    phase_names+=("$phase_name")
    phase_secs+=($((SECONDS - phase_start)))
  fi
  phase_name="$1"
  phase_start=$SECONDS
  [ -n "$1" ] && echo "== $1"
}

count() {  # count LOG: adds CTest's totals from LOG to passed/failed
  local line total fails
  line="$(grep -E '[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$1" | tail -n 1)"
  if [ -z "$line" ]; then
    failed=$((failed + 1))
    return
  fi
  fails="$(sed -E 's/.* ([0-9]+) tests? failed out of ([0-9]+).*/\1/' <<<"$line")"
  total="$(sed -E 's/.* failed out of ([0-9]+).*/\1/' <<<"$line")"
  passed=$((passed + total - fails))
  failed=$((failed + fails))
}

phase "setup"
bash "$root/scripts/setup.sh" || exit 1

phase "build (Release)"
# KVSERVE_UNITY: each module's sources compile in groups, parsing shared headers once (the same
# code as a plain build, in fewer compiler runs). KVSERVE_FOREIGN_ISA_OPT: the kernel files of
# ISAs this CPU lacks (their tests skip here) still compile whole, at -O0.
bash "$root/scripts/build.sh" -DKVSERVE_UNITY=ON -DKVSERVE_FOREIGN_ISA_OPT=-O0 || exit 1
phase "tests (Release)"
ctest --test-dir "$root/build" --output-on-failure -j"$jobs" 2>&1 | tee "$logdir/main.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
count "$logdir/main.log"

# The sanitizer builds use clang (the Release build above is g++: both compilers build the
# project) and compile only what their tests run:
# - the numeric modules at -O1, as the sanitizers' own documentation advises (most of -O2's
#   speed under instrumentation, for much less compile time); the serving modules and the
#   kvserve command at -O0 (KVSERVE_SERVING_OPT): instrumented Boost.Beast code took twice as
#   long at -O1, and the tests spend their time in the numeric modules;
# - only the ISA kernels this CPU can run (KVSERVE_HOST_ISA_ONLY): the tests of the others skip.
# The ASan + UBSan build also holds the libFuzzer targets (-DKVSERVE_FUZZ=ON, as scripts/fuzz.sh
# configures it), so fuzzing needs no build of its own. They link with lld, LLVM's faster linker,
# and compile each module's sources in groups (KVSERVE_UNITY), parsing shared headers once.
sanitizer_cmake() {  # sanitizer_cmake DIR ARGS...: configures DIR with clang, no benchmarks
  local dir="$1"
  shift
  CC=clang CXX=clang++ cmake -S "$root" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -DNDEBUG" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -DNDEBUG" \
    -DKVSERVE_SERVING_OPT=-O0 -DKVSERVE_HOST_ISA_ONLY=ON \
    -DCMAKE_EXE_LINKER_FLAGS=-fuse-ld=lld -DKVSERVE_BUILD_BENCH=OFF -DKVSERVE_UNITY=ON "$@" >/dev/null
}
phase "build (ASan + UBSan, with the fuzz targets)"
sanitizer_cmake "$root/build-asan" -DKVSERVE_SANITIZE=ON -DKVSERVE_FUZZ=ON || exit 1
cmake --build "$root/build-asan" -j"$jobs" --target kvserve_unit_tests gguf_fuzz \
  http_request_fuzz openai_codec_fuzz || exit 1
phase "unit tests under ASan + UBSan"
ASAN_OPTIONS=detect_leaks=1 ctest --test-dir "$root/build-asan" -L unit --output-on-failure \
  -j"$jobs" 2>&1 | tee "$logdir/asan.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
count "$logdir/asan.log"

phase "build (ThreadSanitizer)"
# Its tests look for races, not numbers: only ops/, where they compute, keeps -O1.
sanitizer_cmake "$root/build-tsan" -DKVSERVE_TSAN=ON \
  "-DKVSERVE_SERVING_OPT_MODULES=quant;tokenizer;kv;prefix;model;sample;structured" || exit 1
cmake --build "$root/build-tsan" -j"$jobs" --target util_test tier_test tier_engine_test engine_test \
  kv_events_engine_test http_server_test http_client_test router_test router_proxy_test kvserve || exit 1
phase "threaded tests under ThreadSanitizer"
# server_openai runs the black-box server tests against the ThreadSanitizer build of kvserve:
# a race in the HTTP layer, the bridge or the engine ends that server, and its tests fail. Under
# ThreadSanitizer only the files whose servers are busy with concurrent clients, streams,
# cancellation, shutdown and tier I/O run (the whole set takes three minutes there; the rest
# ran above against the Release build).
KVSERVE_SERVER_TEST_FILES=api,chat,completions,hostile,kv_pressure,limits,process,tiers \
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$root/scripts/tsan.supp" ctest --test-dir "$root/build-tsan" \
  -R '^(Spin/ThreadPool|ThreadPool\.|Disk|Redis|BlockRecord|TierEngine|KvEventsEngine\.|Engine\.|ServerTest\.|ClientTest\.|RouterProxyTest\.|EventFeedTest\.|HealthCheckerTest\.|server_openai$)' \
  --output-on-failure -j"$jobs" 2>&1 | tee "$logdir/tsan.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
count "$logdir/tsan.log"

if [ -f "$root/scripts/fuzz.sh" ] && command -v clang++ >/dev/null 2>&1; then
  phase "fuzzing (${KVSERVE_FUZZ_SECONDS:-30} s per target)"
  # The three targets fuzz at once (FUZZ_JOBS): one per core left a core idle for the last one.
  if FUZZ_JOBS="${FUZZ_JOBS:-3}" KVSERVE_FUZZ_BUILD="$root/build-asan" bash "$root/scripts/fuzz.sh" \
    "${KVSERVE_FUZZ_SECONDS:-30}"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    status=1
  fi
fi

phase ""

echo "== time per phase"
total=0
for i in "${!phase_names[@]}"; do
  printf '%6d s  %s\n' "${phase_secs[$i]}" "${phase_names[$i]}"
  total=$((total + phase_secs[i]))
done
printf '%6d s  total\n' "$total"
# CTest's result lines: "  3/599 Test  #12: Name ......   Passed    1.23 sec".
echo "== ten slowest tests"
for log in "$logdir"/*.log; do
  sed -nE "s/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: ([^ ]+) .* ([0-9.]+) sec\$/\2 \1 $(basename "$log" .log)/p" "$log"
done | sort -rn | head -n 10 | awk '{ printf "%8.1f s  %s (%s)\n", $1, $2, $3 }'

# The failures again, last, where a reader of only the log's tail sees them.
if grep -q 'The following tests FAILED' "$logdir"/*.log 2>/dev/null; then
  echo "== failed tests"
  for log in "$logdir"/*.log; do
    sed -n '/The following tests FAILED/,/^Errors while running/p' "$log" | sed "s|^|$(basename "$log" .log): |"
  done
fi
echo "summary: $passed passed, $failed failed"
exit "$status"
