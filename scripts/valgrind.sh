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
tests=(test_api test_quorum test_lock test_rlock test_hostile test_concurrency test_watchdog test_redlock test_races test_safety
       test_tls test_acl test_interrupt test_events test_lifetimes test_options test_pollwait test_fair test_fair_handoff test_rwlock
       test_thread_signals test_cluster test_cluster_moves test_inspect test_ttl test_stats
       test_semaphore test_latch test_multilock test_sentinel)
for t in "${tests[@]}"; do
  start=$(date +%s)
  valgrind -q --leak-check=full --errors-for-leak-kinds=definite,possible --error-exitcode=1 \
    "$dir/tests/c/$t" | sed 's/^/   /'
  echo "-- $t: clean under valgrind ($(( $(date +%s) - start )) s)"
done
