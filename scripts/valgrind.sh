#!/usr/bin/env bash
# Runs every C test binary of a build (default build-test) under valgrind
# memcheck: leaks (definite and possible) and memory errors fail the run.
# Code under valgrind runs many times slower, so the tests' own time bounds
# (leases, timeouts, deadlines of waits) are stretched by
# REDMUTEX_TEST_TIME_SCALE (default 4, see tests/c/harness.h); what they
# assert stays the same.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build-test}
export REDMUTEX_TEST_TIME_SCALE=${REDMUTEX_TEST_TIME_SCALE:-4}
# test_safety's straggler stress: 10 s of the same code instead of 30 (as under the sanitizers).
export REDMUTEX_STRESS_SECONDS=${REDMUTEX_STRESS_SECONDS:-10}
# Longest first (after the serial ones): they run ${REDMUTEX_VALGRIND_JOBS:-2} at a time (most of a test's time is its
# servers' and leases' wall-clock time, not CPU), each one's output printed when it ends.
# test_safety's cases that compare throughputs over seconds run alone (RT_ALONE=only,
# tests/c/harness.h); its other cases (RT_ALONE=skip) run beside the rest.
serial=(test_safety@only)
tests=(test_safety@skip test_cluster_moves test_semaphore test_sentinel test_ttl test_redlock test_watchdog test_cluster
       test_races test_fair test_acl test_rwlock test_fair_handoff test_tls test_events test_multilock test_latch
       test_api test_quorum test_retry test_lock test_rlock test_hostile test_concurrency test_interrupt test_lifetimes
       test_options test_pollwait test_thread_signals test_inspect test_stats test_resp)
run_one() {
  local t=$1 start log rc=0 alone=
  if [[ $t == *@* ]]; then alone=${t#*@}; t=${t%@*}; fi
  start=$(date +%s)
  log=$(mktemp)
  RT_ALONE=$alone valgrind -q --leak-check=full --errors-for-leak-kinds=definite,possible --error-exitcode=1 \
    "$dir/tests/c/$t" >"$log" 2>&1 || rc=$?
  sed 's/^/   /' "$log"
  rm -f "$log"
  if [ "$rc" -ne 0 ]; then
    echo "-- $t${alone:+ (RT_ALONE=$alone)}: FAILED under valgrind (exit $rc, $(( $(date +%s) - start )) s)"
    return 1
  fi
  echo "-- $t${alone:+ (RT_ALONE=$alone)}: clean under valgrind ($(( $(date +%s) - start )) s)"
}
export -f run_one
export dir
for t in "${serial[@]}"; do run_one "$t"; done
printf '%s\n' "${tests[@]}" | xargs -P "${REDMUTEX_VALGRIND_JOBS:-2}" -I{} bash -c 'run_one "$1"' _ {}
