#!/bin/sh
# clang's thread-safety analysis sees a function that needs the client mutex (RM_REQUIRES,
# internal.h) called without it: a planted call fails to compile, the same call with the
# mutex held compiles. Usage: check_thread_safety.sh CLANG SRC_DIR INCLUDE_DIR
set -eu
clang=$1 src=$2 inc=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
plant() { # $1: file name, $2: body of the function
  cat >"$tmp/$1.c" <<C
#include "client.h"
#include "holds.h"
redmutex_state planted(redmutex_client *c, rm_hold *h);
redmutex_state planted(redmutex_client *c, rm_hold *h)
{
$2
}
C
  "$clang" -fsyntax-only -Wthread-safety -Wno-thread-safety-precise -Werror -I"$src" -I"$inc" \
    $(pkg-config --cflags hiredis 2>/dev/null) "$tmp/$1.c" >"$tmp/$1.log" 2>&1
}
if plant unlocked '    return rm_hold_state(c, h, 0);'; then
  echo "FAIL: a call of rm_hold_state without c->mu compiled"
  exit 1
fi
grep -q "requires holding mutex 'c->mu'" "$tmp/unlocked.log" || { cat "$tmp/unlocked.log"; exit 1; }
if ! plant locked '    rm_client_lock(c);
    redmutex_state s = rm_hold_state(c, h, 0);
    rm_client_unlock(c);
    return s;'; then
  cat "$tmp/locked.log"
  echo "FAIL: the same call with c->mu held did not compile"
  exit 1
fi
if plant leaked '    rm_client_lock(c);
    return rm_hold_state(c, h, 0);'; then
  echo "FAIL: a function that returns with c->mu still held compiled"
  exit 1
fi
grep -q "mutex 'c->mu' is still held at the end of function" "$tmp/leaked.log" || { cat "$tmp/leaked.log"; exit 1; }
echo "ok: a call without the client mutex, and a mutex left held, fail to compile; the locked call compiles"
