#!/bin/sh
# The shared library exports only redmutex_ symbols and carries SONAME libredmutex.so.<major>.
set -eu
lib="$1"
major="$2"
bad=$(nm -D --defined-only "$lib" | awk '{print $3}' | sed 's/@.*//' | grep -v '^redmutex_' | grep -v '^REDMUTEX_1\(\.[0-9]*\)\?$' || true)
if [ -n "$bad" ]; then
  echo "symbols exported without the redmutex_ prefix:"
  echo "$bad"
  exit 1
fi
count=$(nm -D --defined-only "$lib" | awk '{print $3}' | sed 's/@.*//' | grep -c '^redmutex_')
soname=$(readelf -d "$lib" | sed -n 's/.*SONAME.*\[\(.*\)\].*/\1/p')
if [ "$soname" != "libredmutex.so.$major" ]; then
  echo "SONAME is '$soname', expected libredmutex.so.$major"
  exit 1
fi
# Every function declared in the public header is exported.
header="$(dirname "$0")/../../core/include/redmutex.h"
for fn in $(grep -o 'redmutex_[a-z_]*(' "$header" | tr -d '(' | sort -u); do
  case "$fn" in *_fn) continue ;; esac
  if ! nm -D --defined-only "$lib" | awk '{print $3}' | sed 's/@.*//' | grep -qx "$fn"; then
    echo "declared but not exported: $fn"
    exit 1
  fi
done
echo "ok: $count redmutex_ symbols, SONAME $soname"
