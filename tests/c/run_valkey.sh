#!/bin/sh
# Runs a test against Valkey instead of redis-server.
#
#   run_valkey.sh VALKEY_SH CACHE_DIR TEST_BINARY [CASE...]
#   run_valkey.sh VALKEY_SH CACHE_DIR -- COMMAND [ARG...]
#
# VALKEY_SH (scripts/valkey.sh) fetches valkey-server into CACHE_DIR (empty:
# its default cache). When it cannot (no pip, no network), the test is
# skipped (exit 77) with a message saying why, except in CI (CI=true), where
# the fetch must work: it fails. Each CASE is a name filter of the test
# binary, run in turn (none: every case); after `--`, COMMAND runs once. The
# server binary reaches the test as REDMUTEX_TEST_SERVER.
set -u
valkey_sh=$1 cache=$2
shift 2
if ! bin=$(bash "$valkey_sh" ${cache:+"$cache"}); then
  if [ "${CI:-}" = true ]; then
    echo "run_valkey.sh: no valkey-server (see above); CI must run the Valkey cases" >&2
    exit 1
  fi
  echo "run_valkey.sh: SKIPPED: no valkey-server could be fetched (see above)" >&2
  exit 77
fi
echo "server: $("$bin" --version)"
REDMUTEX_TEST_SERVER=$bin
export REDMUTEX_TEST_SERVER
if [ "$1" = -- ]; then
  shift
  exec "$@"
fi
test=$1
shift
[ $# -gt 0 ] || exec "$test"
for case in "$@"; do
  "$test" "$case" || exit 1
done
