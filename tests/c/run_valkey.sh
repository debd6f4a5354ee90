#!/bin/sh
# Runs some cases of a C test binary against Valkey instead of redis-server.
#
#   run_valkey.sh VALKEY_SH CACHE_DIR TEST_BINARY CASE...
#
# VALKEY_SH (scripts/valkey.sh) fetches valkey-server into CACHE_DIR. When it
# cannot (no pip, no network), the test is skipped (exit 77) with a message
# saying why, except in CI (CI=true), where the fetch must work: it fails.
# Each CASE is a name filter of the test binary, run in turn.
set -u
valkey_sh=$1 cache=$2 test=$3
shift 3
if ! bin=$(bash "$valkey_sh" "$cache"); then
  if [ "${CI:-}" = true ]; then
    echo "run_valkey.sh: no valkey-server (see above); CI must run the Valkey cases" >&2
    exit 1
  fi
  echo "run_valkey.sh: SKIPPED: no valkey-server could be fetched (see above)" >&2
  exit 77
fi
echo "server: $("$bin" --version)"
for case in "$@"; do
  REDMUTEX_TEST_SERVER=$bin "$test" "$case" || exit 1
done
