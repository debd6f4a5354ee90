#!/usr/bin/env python3
"""scripts/check-layers.py sees an up-call wherever it hides.

Copies core/src, plants one up-call at a time and expects the checker to
fail naming it: a static inline in a header that calls up, a function-like
macro that does, and a .c file calling a header inline of a layer above.
The untouched copy must pass, so a failure is the plant's and nothing else.
"""

import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
CHECKER = os.path.join(ROOT, "scripts", "check-layers.py")

# (file, text to find, text put before it, what the checker must say)
PLANTS = [
    (
        "conn.h",
        "static inline void rm_conn_progress",
        "static inline void rm_conn_planted(redmutex_client *c) { rm_holds_follow_moves_locked(c); }\n",
        "rm_conn_planted calls rm_holds_follow_moves_locked of holds.c, a layer above it",
    ),
    (
        "conn.h",
        "static inline void rm_conn_progress",
        "#define RM_CONN_PLANTED(c) \\\n    rm_subscriber_forget((c))\n",
        "RM_CONN_PLANTED calls rm_subscriber_forget of subscriber.c, a layer above it",
    ),
    (
        "conn.h",
        "static inline void rm_conn_progress",
        "static inline int64_t rm_conn_planted_pause(void)\n{\n    return rm_fair_pause_ms(1, 1);\n}\n",
        "rm_conn_planted_pause calls rm_fair_pause_ms of kind.h, a layer above it",
    ),
    (
        "pool.c",
        "bool rm_pool_settle(redmutex_client *c, rm_server *srv)\n{\n",
        None,
        "pool.c calls rm_lock_server of handle.h, a layer above it",
    ),
]


def run(src):
    p = subprocess.run([sys.executable, CHECKER, src], capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def main():
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "src")
        shutil.copytree(os.path.join(ROOT, "core", "src"), src)
        rc, out = run(src)
        if rc != 0:
            print("the untouched copy fails:\n" + out)
            return 1
        for name, anchor, plant, expected in PLANTS:
            path = pathlib.Path(src, name)
            original = path.read_text()
            assert anchor in original, f"{name} no longer has {anchor!r}: update the plant"
            if plant is None:  # a call at the top of a function's body
                planted = original.replace(anchor, anchor + "    (void)rm_lock_server(NULL, 0);\n", 1)
            else:
                planted = original.replace(anchor, plant + anchor, 1)
            path.write_text(planted)
            rc, out = run(src)
            path.write_text(original)
            if rc == 0 or expected not in out:
                failures.append(f"{name}: planted {expected!r}; checker said (rc {rc}):\n{out}")
    for f in failures:
        print(f)
    if not failures:
        print(f"{len(PLANTS)} planted up-calls, each found")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
