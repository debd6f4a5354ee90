#!/usr/bin/env python3
"""Copies the C of one language binding into a package's source tree.

    packaging/bundle.py BUILD_DIR DEST LANGUAGE

A gem, a CPAN dist, a rock and the Tcl tarball each compile, on the user's
machine, the C core, the code the bindings share (bindings/common) and
SWIG's wrapper for their language. Which files those are is CMake's to say:
BUILD_DIR is a build configured by scripts/package.sh with the bindings and a
query of CMake's file API, whose answer lists the sources of the targets
`redmutex_objects` (the core) and `redmutex_binding_common`. So a source file
added to CMakeLists.txt reaches every package with no list to update here.

DEST/src gets:
    core/include/...        the public header(s)
    core/src/*.c, *.h       the core's sources (CMake's list) and private headers
    common/*.c, *.h         the shared binding code (CMake's list) and its header
    redmutex_LANG.c         SWIG's wrapper, generated in BUILD_DIR by CMake's rule
    exports.map             the linker version script: only the module's entry is exported
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGETS = {"redmutex_objects": "core/src", "redmutex_binding_common": "common"}
# Where CMake's rule for each language writes SWIG's wrapper (bindings/<lang>/CMakeLists.txt).
WRAPPERS = {lang: f"bindings/{lang}/redmutex_{lang}.c" for lang in ("ruby", "perl", "tcl", "lua")}
# A module exports only the function its interpreter calls to load it; the core,
# compiled in, stays private, so that it never binds to another copy in the process.
EXPORTS = """{
  global:
    Init_redmutex_native;      /* Ruby */
    boot_Redmutex;             /* Perl */
    Redmutex_Init;             /* Tcl */
    Redmutex_SafeInit;
    luaopen_redmutex_native;   /* Lua */
  local: *;
};
"""


def fail(message: str) -> None:
    sys.exit(f"packaging/bundle.py: {message}")


def target_sources(build: str) -> dict[str, list[str]]:
    """{target name: [C source paths relative to the source tree]} from CMake's file API."""
    reply = os.path.join(build, ".cmake", "api", "v1", "reply")
    indexes = sorted(glob.glob(os.path.join(reply, "index-*.json")))
    if not indexes:
        fail(f"no CMake file API reply in {reply} (configure with the codemodel-v2 query)")
    with open(indexes[-1], encoding="utf-8") as f:
        index = json.load(f)
    model = next((o for o in index["objects"] if o["kind"] == "codemodel"), None)
    if model is None:
        fail("CMake's file API reply has no codemodel")
    with open(os.path.join(reply, model["jsonFile"]), encoding="utf-8") as f:
        codemodel = json.load(f)
    found: dict[str, list[str]] = {}
    for ref in codemodel["configurations"][0]["targets"]:
        if ref["name"] not in TARGETS:
            continue
        with open(os.path.join(reply, ref["jsonFile"]), encoding="utf-8") as f:
            target = json.load(f)
        found[ref["name"]] = [s["path"] for s in target["sources"] if s["path"].endswith(".c")]
    missing = set(TARGETS) - set(found)
    if missing:
        fail(f"CMake has no target {', '.join(sorted(missing))} (configured with the bindings?)")
    return found


def copy(src: str, dest: str) -> None:
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    shutil.copy2(src, dest)


def main() -> None:
    if len(sys.argv) != 4 or sys.argv[3] not in WRAPPERS:
        fail("usage: bundle.py BUILD_DIR DEST ruby|perl|tcl|lua")
    build, dest, lang = sys.argv[1:]
    out = os.path.join(dest, "src")
    for target, sources in target_sources(build).items():
        into = os.path.join(out, TARGETS[target])
        dirs = set()
        for path in sources:
            absolute = path if os.path.isabs(path) else os.path.join(ROOT, path)
            if not absolute.startswith(ROOT + os.sep):
                fail(f"{target}'s source {path} is outside the source tree")
            copy(absolute, os.path.join(into, os.path.basename(path)))
            dirs.add(os.path.dirname(absolute))
        if len(dirs) != 1:
            fail(f"{target}'s sources are in several directories ({sorted(dirs)}): bundle.py keeps one")
        for header in glob.glob(os.path.join(dirs.pop(), "*.h")):
            copy(header, os.path.join(into, os.path.basename(header)))
    include = os.path.join(ROOT, "core", "include")
    for header in glob.glob(os.path.join(include, "**", "*.h"), recursive=True):
        copy(header, os.path.join(out, "core", "include", os.path.relpath(header, include)))
    wrapper = os.path.join(build, WRAPPERS[lang])
    if not os.path.exists(wrapper):
        fail(f"{wrapper} is missing: build it first (ninja -C {build} {WRAPPERS[lang]})")
    copy(wrapper, os.path.join(out, os.path.basename(wrapper)))
    with open(os.path.join(out, "exports.map"), "w", encoding="utf-8") as f:
        f.write(EXPORTS)


if __name__ == "__main__":
    main()
