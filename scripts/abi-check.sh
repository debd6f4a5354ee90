#!/bin/sh
# Compares the ABI of a built libredmutex.so.1 with the 1.x baseline in abi/ (libabigail's abidiff).
# Passes when the only differences are new functions and fields appended to options structs;
# fails on a removed or changed function, a changed type, or a new SONAME. Prints the report.
#   scripts/abi-check.sh build-test/libredmutex.so.1
set -eu
lib=${1:?usage: abi-check.sh path/to/libredmutex.so.1}
root=$(cd "$(dirname "$0")/.." && pwd)
if ! command -v abidiff >/dev/null; then
  echo "abidiff not found: apt-get install abigail-tools" >&2
  exit 2
fi
# The full report, additions included, for the log.
abidiff --headers-dir2 "$root/core/include" --drop-private-types \
  --suppressions "$root/abi/redmutex.abignore" "$root/abi/libredmutex.so.1.abi" "$lib" || true
# The verdict: with additions filtered out, nothing may be left.
if abidiff --headers-dir2 "$root/core/include" --drop-private-types --no-added-syms \
  --suppressions "$root/abi/redmutex.abignore" "$root/abi/libredmutex.so.1.abi" "$lib" >/dev/null; then
  echo "ok: $(basename "$lib") is ABI-compatible with the 1.x baseline (additions only)"
else
  echo "FAIL: $(basename "$lib") breaks the 1.x ABI (see the report above); restore compatibility," \
    "or bump the SONAME and regenerate abi/ as abi/README.md says" >&2
  exit 1
fi
