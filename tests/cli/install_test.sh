#!/bin/sh
# Installs the build into a scratch prefix, as a user would with
# `cmake --install`, and runs the installed redmutex from a clean environment:
# it finds libredmutex through its RPATH, and its man page is in man1.
set -eu
build=$1
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
env -i "$prefix/bin/redmutex" --version | grep -q '^redmutex [0-9]'
env -i "$prefix/bin/redmutex" --help | grep -q 'redmutex run -n nightly-report'
test -s "$prefix/share/man/man1/redmutex.1"
if env -i "$prefix/bin/redmutex" run 2>/dev/null; then
  echo "a usage error must fail" >&2
  exit 1
fi
echo "installed redmutex runs from $prefix"
