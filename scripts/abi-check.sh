#!/bin/sh
# Compares the ABI of a built libredmutex.so.1 with each 1.x release's baseline in abi/
# (libabigail's abidiff): libredmutex.so.1.abi (1.0.0) and libredmutex.so.1-X.Y.Z.abi (each later
# release; tests/c/check_versions.py fails when the current release has none).
# Passes when the only differences from every baseline are new functions and fields appended to
# versioned structs; fails on a removed or changed function, a changed type, or a new SONAME.
# Prints each report.
#   scripts/abi-check.sh build-test/libredmutex.so.1
set -eu
lib=${1:?usage: abi-check.sh path/to/libredmutex.so.1}
root=$(cd "$(dirname "$0")/.." && pwd)
if ! command -v abidiff >/dev/null; then
  echo "abidiff not found: apt-get install abigail-tools" >&2
  exit 2
fi
failed=0
for base in "$root"/abi/libredmutex.so.1.abi "$root"/abi/libredmutex.so.1-*.abi; do
  [ -e "$base" ] || continue # the pattern itself, when no later release has a baseline yet
  echo "== against $(basename "$base")"
  # The full report, additions included, for the log.
  abidiff --headers-dir2 "$root/core/include" --drop-private-types \
    --suppressions "$root/abi/redmutex.abignore" "$base" "$lib" || true
  # The verdict: with additions filtered out, nothing may be left.
  if abidiff --headers-dir2 "$root/core/include" --drop-private-types --no-added-syms \
    --suppressions "$root/abi/redmutex.abignore" "$base" "$lib" >/dev/null; then
    echo "ok: $(basename "$lib") is ABI-compatible with $(basename "$base") (additions only)"
  else
    echo "FAIL: $(basename "$lib") breaks the ABI of $(basename "$base") (see the report above);" \
      "restore compatibility, or bump the SONAME and regenerate abi/ as abi/README.md says" >&2
    failed=1
  fi
done
exit $failed
