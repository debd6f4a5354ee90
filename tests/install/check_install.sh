#!/bin/sh
# Installs a build of redmutex into a temporary prefix and builds the README's C example
# against the installed tree, as its users would: with CMake (find_package(redmutex CONFIG),
# linked to redmutex::redmutex and to redmutex::redmutex_static) and with pkg-config. Each
# program then runs against a private redis-server and must take and release its lock.
#   tests/install/check_install.sh BUILD_DIR
set -eu
build=$(cd "${1:?usage: check_install.sh BUILD_DIR}" && pwd)
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d /tmp/redmutex-install-XXXXXX)
cleanup() {
  exec 3<&- 2>/dev/null || true # closing the pipe stops the server (tests/rmserver.py)
  rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
pc=$(find "$tmp/prefix" -name redmutex.pc)
[ -n "$pc" ] || { echo "redmutex.pc was not installed"; exit 1; }
libdir=$(dirname "$(dirname "$pc")")

# A redis-server of our own on a free port, from tests/rmserver.py (the helper every suite
# shares): it stops the server when this script's end of the pipe closes, however it ends.
mkfifo "$tmp/server"
python3 "$root/tests/rmserver.py" serve >"$tmp/server" &
exec 3<"$tmp/server"
read -r info <&3 || { echo "tests/rmserver.py started no server (its message is above)"; exit 1; }
for pair in $info; do
  case $pair in port=*) port=${pair#port=} ;; cli=*) redis_cli=${pair#cli=} ;; esac
done

# The README's C example, verbatim, inside a main() with the helpers it names.
awk '/^## C$/ {c = 1} c && /^```c$/ {on = 1; next} on && /^```$/ {exit} on {print}' "$root/README.md" >"$tmp/example.c"
grep -q 'redis://127.0.0.1:6379/0' "$tmp/example.c" || { echo "README's C example not found or changed"; exit 1; }
{
  cat <<'HEAD'
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
HEAD
  grep '^#include' "$tmp/example.c"
  cat <<'HELPERS'
static int warnings;
static void die(const char *m) { fprintf(stderr, "die: %s\n", m); exit(1); }
static void warn(const char *f, ...) { va_list a; va_start(a, f); vfprintf(stderr, f, a); va_end(a); warnings++; }
static void do_the_work(void) { puts("working under the lock"); }
int main(void) {
HELPERS
  grep -v '^#include' "$tmp/example.c" | sed "s|redis://127.0.0.1:6379/0|redis://127.0.0.1:$port/0|"
  printf '%s\n' 'return warnings ? 1 : 0;' '}'
} >"$tmp/app.c"

check_run() { # name, program
  out=$("$2" 2>&1) || { echo "$1: failed: $out"; exit 1; }
  [ "$out" = "working under the lock" ] || { echo "$1: unexpected output: $out"; exit 1; }
  [ "$("$redis_cli" -p "$port" exists jobs:nightly)" = 0 ] || { echo "$1: the lock was left held"; exit 1; }
  echo "ok   $1"
}

# CMake: find_package(redmutex CONFIG), shared and static.
cmake -S "$root/tests/install/consumer" -B "$tmp/consumer" -DCMAKE_PREFIX_PATH="$tmp/prefix" \
  -DAPP_SOURCE="$tmp/app.c" >"$tmp/cmake.log" 2>&1 || { cat "$tmp/cmake.log"; exit 1; }
cmake --build "$tmp/consumer" >>"$tmp/cmake.log" 2>&1 || { cat "$tmp/cmake.log"; exit 1; }
ldd "$tmp/consumer/app_shared" | grep -q "$libdir/libredmutex.so.1" || { echo "app_shared does not use the installed libredmutex.so.1"; exit 1; }
if ldd "$tmp/consumer/app_static" | grep -q libredmutex; then echo "app_static links libredmutex dynamically"; exit 1; fi
check_run "cmake redmutex::redmutex" "$tmp/consumer/app_shared"
check_run "cmake redmutex::redmutex_static" "$tmp/consumer/app_static"

# pkg-config, as the README shows it.
export PKG_CONFIG_PATH="$(dirname "$pc")"
cc -o "$tmp/app_pc" "$tmp/app.c" $(pkg-config --cflags --libs redmutex)
export LD_LIBRARY_PATH="$libdir"
check_run "pkg-config redmutex" "$tmp/app_pc"
