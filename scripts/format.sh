#!/bin/sh
# Formats the C sources with clang-format and the checked-in .clang-format:
#   scripts/format.sh           rewrites the files in place
#   scripts/format.sh --check   changes nothing; fails listing every difference (scripts/test.sh)
# Covers core/, cli/, bindings/common and tests/c (git's tracked *.c, *.h, *.cpp). The version
# is Debian 12's clang-format 14: another version may format differently, so CI uses that one.
set -eu
cd "$(dirname "$0")/.."
if ! command -v clang-format >/dev/null; then
  echo "format.sh: clang-format not found (apt-get install clang-format, or scripts/deps.sh)" >&2
  exit 2
fi
files=$(git ls-files 'core/*.c' 'core/*.h' 'cli/*.c' 'cli/*.h' 'bindings/common/*.c' 'bindings/common/*.h' \
  'tests/c/*.c' 'tests/c/*.h' 'tests/c/*.cpp')
if [ "${1:-}" = --check ]; then
  # shellcheck disable=SC2086 # one argument per file; no path has a space
  if ! clang-format --dry-run --Werror $files; then
    echo "format.sh: the files above are not formatted as .clang-format says; run scripts/format.sh" \
      "($(clang-format --version))" >&2
    exit 1
  fi
  echo "ok: $(echo "$files" | wc -l) files formatted ($(clang-format --version))"
else
  # shellcheck disable=SC2086
  clang-format -i $files
fi
