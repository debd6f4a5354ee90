#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang (ASan + UBSan) and runs
# each for REDMUTEX_FUZZ_SECONDS (default 60), starting from the committed seed
# corpus (copied: the committed one stays small). A crash, leak or sanitizer
# report stops the run with a nonzero status; the input that caused it is
# saved as build-fuzz/crash-<target>-*. Reproduce: build-fuzz/tests/fuzz/fuzz_<target> FILE
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${REDMUTEX_FUZZ_SECONDS:-60}
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DREDMUTEX_WERROR=ON \
  -DREDMUTEX_FUZZ=ON -DREDMUTEX_BUILD_TESTS=OFF -DREDMUTEX_BUILD_BENCH=OFF >/dev/null
ninja -C build-fuzz fuzz_url fuzz_reader fuzz_client
for target in url reader client; do
  corpus=build-fuzz/corpus-$target
  rm -rf "$corpus"
  cp -r tests/fuzz/corpus/$target "$corpus"
  echo "-- fuzz_$target for ${seconds} s"
  log=build-fuzz/fuzz-$target.log
  status=0
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ASAN_OPTIONS=detect_leaks=1 \
    build-fuzz/tests/fuzz/fuzz_$target -max_total_time="$seconds" -timeout=25 -rss_limit_mb=4096 \
    -artifact_prefix="build-fuzz/crash-$target-" -print_final_stats=1 "$corpus" >"$log" 2>&1 || status=$?
  grep -E '^(Done|stat::number_of_executed_units|stat::peak_rss_mb)' "$log" || true
  if [ "$status" -ne 0 ]; then
    tail -n 60 "$log"
    echo "fuzz_$target failed with status $status; the input is saved as build-fuzz/crash-$target-*"
    exit 1
  fi
done
