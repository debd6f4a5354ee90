"""Symbol versions tell a program which release it needs (ctest symbol_versions).

    python3 tests/c/check_versions.py build/libredmutex.so.1

Every function of the 1.0.0 baseline (abi/libredmutex.so.1.abi) is exported
as REDMUTEX_1. Every function added since is exported in the node of the
release that added it (REDMUTEX_1.1, ...), never in REDMUTEX_1: a program
built against a newer library then refuses to start on an older one (a
missing version node) instead of failing later on a missing function. And
the doc comment of each such function in redmutex.h says "Since 1.N." for
its node. And the release's version is the same everywhere it is written
(CMakeLists.txt's project(), which the packages read, and the copies the
header, the Python package, the bindings and the man page carry), and the
release has its ABI baseline in abi/ (abi/README.md). Exits 1 listing every
rule broken.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BASELINE = ROOT / "abi" / "libredmutex.so.1.abi"
HEADER = ROOT / "core" / "include" / "redmutex.h"


def exported(lib: str) -> dict[str, str]:
    """Exported function -> its version node, from nm -D."""
    nm = ["nm", "-D", "--defined-only", lib]
    out = subprocess.run(nm, capture_output=True, text=True, check=True).stdout
    funcs = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "TtWi" and "@" in parts[2]:
            name, _, node = parts[2].partition("@")
            funcs[name] = node.lstrip("@")
    return funcs


def baseline() -> set[str]:
    return set(re.findall(r"<elf-symbol name='(redmutex_\w+)'[^>]*type='func-type'", BASELINE.read_text()))


def doc_of(header: str, name: str) -> str | None:
    """The doc comment that serves a function: the last comment before its
    declaration (declarations that share one comment follow it directly)."""
    m = re.search(r"REDMUTEX_API[^;(]*\b" + name + r"\s*\(", header)
    if not m:
        return None
    end = header.rfind("*/", 0, m.start())
    start = header.rfind("/*", 0, end)
    return header[start : end + 2] if end >= 0 and start >= 0 else None


def problems(funcs: dict[str, str], base: set[str], header: str) -> list[str]:
    out = []
    for name, node in sorted(funcs.items()):
        if name in base:
            if node != "REDMUTEX_1":
                out.append(f"{name}: in the 1.0.0 baseline, so REDMUTEX_1, not {node}")
            continue
        m = re.fullmatch(r"REDMUTEX_1\.(\d+)", node)
        if not m:
            out.append(f"{name}: added after 1.0.0, so it belongs in the node of its release, not {node}")
            continue
        doc = doc_of(header, name)
        if doc is None:
            out.append(f"{name}: exported as {node} but not declared in redmutex.h")
        elif f"Since 1.{m[1]}." not in doc:
            out.append(f"{name}: its doc comment in redmutex.h must say 'Since 1.{m[1]}.' ({node})")
    missing = sorted(base - set(funcs))
    out += [f"{name}: in the 1.0.0 baseline but no longer exported" for name in missing]
    return out


# Where the version is written besides CMakeLists.txt: file, and a pattern whose group 1 is it.
VERSION_PLACES = [
    ("core/include/redmutex.h", r'#define REDMUTEX_VERSION_STRING "([^"]+)"'),
    ("python/redmutex/__init__.py", r'^__version__ = "([^"]+)"'),
    ("bindings/ruby/redmutex.rb", r'VERSION = "([^"]+)"'),
    ("bindings/perl/Redmutex_idioms.pm", r"our \$VERSION = '([^']+)'"),
    ("bindings/lua/redmutex.lua", r'VERSION = "([^"]+)"'),
    ("cli/redmutex.1", r'^\.TH REDMUTEX 1 "[^"]*" "redmutex ([^"]+)"'),
]


def version_problems(root: Path) -> tuple[str, list[str]]:
    """The project's version (CMakeLists.txt), and every place that disagrees or lacks it."""
    cmake = (root / "CMakeLists.txt").read_text()
    m = re.search(r"^project\(redmutex\s+VERSION\s+(\d+\.\d+\.\d+)", cmake, re.M)
    if not m:
        return "", ["CMakeLists.txt: no 'project(redmutex VERSION x.y.z' line"]
    version, out = m[1], []
    for path, pattern in VERSION_PLACES:
        found = re.search(pattern, (root / path).read_text(), re.M)
        if not found:
            out.append(f"{path}: no version found (pattern {pattern})")
        elif found[1] != version:
            out.append(f"{path}: says {found[1]}, CMakeLists.txt says {version}")
    major, minor, _ = version.split(".")
    if minor != "0" and not (root / "abi" / f"libredmutex.so.{major}-{major}.{minor}.0.abi").exists():
        out.append(f"abi/: no baseline of {major}.{minor}.0 (abi/README.md says how to write it)")
    return version, out


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    funcs = exported(argv[0])
    found = problems(funcs, baseline(), HEADER.read_text())
    version, wrong = version_problems(ROOT)
    found += wrong
    if found:
        print("versions:", *found, sep="\n  ", file=sys.stderr)
        return 1
    nodes = sorted(set(funcs.values()))
    print(f"ok: {len(funcs)} functions in {', '.join(nodes)}; each added one says when in redmutex.h")
    places = len(VERSION_PLACES)
    print(f"ok: version {version} in CMakeLists.txt and the {places} places that repeat it; its ABI baseline")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
