#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang (ASan + UBSan) and runs
# all at once, each for REDMUTEX_FUZZ_SECONDS (default 60), starting from the committed seed
# corpus (copied: the committed one stays small). A crash, leak or sanitizer
# report stops the run with a nonzero status; the input that caused it is
# saved as build-fuzz/crash-<target>-*. Reproduce: build-fuzz/tests/fuzz/fuzz_<target> FILE
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${REDMUTEX_FUZZ_SECONDS:-60}
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DREDMUTEX_WERROR=ON \
  -DREDMUTEX_FUZZ=ON -DREDMUTEX_BUILD_TESTS=OFF -DREDMUTEX_BUILD_BENCH=OFF >/dev/null
ninja -C build-fuzz fuzz_url fuzz_reader fuzz_client
# The targets run at the same time (each is one process, single-threaded): the stage takes
# about ${seconds} s, not three times that.
run_target() {
  local target=$1 corpus=build-fuzz/corpus-$1 log=build-fuzz/fuzz-$1.log status=0
  rm -rf "$corpus"
  cp -r tests/fuzz/corpus/$target "$corpus"
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ASAN_OPTIONS=detect_leaks=1 \
    build-fuzz/tests/fuzz/fuzz_$target -max_total_time="$seconds" -timeout=25 -rss_limit_mb=4096 \
    -artifact_prefix="build-fuzz/crash-$target-" -print_final_stats=1 "$corpus" >"$log" 2>&1 || status=$?
  return "$status"
}
targets=(url reader client)
declare -A pid
for target in "${targets[@]}"; do
  echo "-- fuzz_$target for ${seconds} s"
  run_target "$target" &
  pid[$target]=$!
done
failed=0
for target in "${targets[@]}"; do
  status=0
  wait "${pid[$target]}" || status=$?
  echo "-- fuzz_$target:"
  grep -E '^(Done|stat::number_of_executed_units|stat::peak_rss_mb)' "build-fuzz/fuzz-$target.log" || true
  if [ "$status" -ne 0 ]; then
    tail -n 60 "build-fuzz/fuzz-$target.log"
    echo "fuzz_$target failed with status $status; the input is saved as build-fuzz/crash-$target-*"
    failed=1
  fi
done
exit "$failed"
