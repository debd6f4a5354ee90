"""The error table, as the three places that define it must agree on it.

    core/include/redmutex.h          the C codes (REDMUTEX_E* = -N)
    bindings/common/errors.c         the bindings' table: code -> class name, Tcl tag, parent
    python/redmutex/_errors.py       the Python classes (code = lib.REDMUTEX_E*, bases)

`python3 tests/errortable.py` checks them against each other from the sources
(ctest error_tables) and exits 1 listing every disagreement.
`python3 tests/errortable.py --list` prints the agreed table, one class a line,
"NAME PARENT TAG CODE", the base class first (PARENT and CODE "-" there,
whose NAME is the bindings' "Error"); each binding's test compares the classes
it really defines with it, and tests/python the package's.

Needs only the standard library (the Python classes are read with ast).
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
HEADER = ROOT / "core" / "include" / "redmutex.h"
TABLE = ROOT / "bindings" / "common" / "errors.c"
PYTHON = ROOT / "python" / "redmutex" / "_errors.py"

BASE_BINDING = "Error"  # the bindings' base class (Ruby also names it RedMutexError)
BASE_PYTHON = "RedMutexError"


class Row(NamedTuple):
    name: str
    parent: str  # the class it derives from; the base class for most
    tag: str  # Tcl's -errorcode word
    code: int


def c_codes(text: str | None = None) -> dict[str, int]:
    """REDMUTEX_E* -> value, from the header's result-code enum (typedef enum redmutex_error)."""
    text = text if text is not None else HEADER.read_text()
    text = text[text.index("typedef enum redmutex_error {") :]
    text = text[: text.index("} redmutex_error;")]
    return {m[1]: int(m[2]) for m in re.finditer(r"\b(REDMUTEX_E[A-Z0-9_]+)\s*=\s*(-?\d+)", text)}


def binding_rows(text: str | None = None) -> list[tuple[str, str, str, str | None]]:
    """(code macro or "0", name, tag, parent or None) for each entry of rmb_error_classes, in order."""
    text = text if text is not None else TABLE.read_text()
    body = text[text.index("rmb_error_classes[] = {") :]
    body = body[: body.index("};")]
    entry = re.compile(r'\{\s*(REDMUTEX_E[A-Z0-9_]+|0)\s*,\s*"(\w+)"\s*,\s*"(\w+)"\s*,\s*(NULL|"(\w+)")\s*\}')
    return [(m[1], m[2], m[3], m[5]) for m in entry.finditer(body)]


def python_classes(text: str | None = None) -> dict[str, tuple[list[str], str | None]]:
    """class name -> (bases, REDMUTEX_E* macro of the code it sets itself, or None)."""
    tree = ast.parse(text if text is not None else PYTHON.read_text())
    out: dict[str, tuple[list[str], str | None]] = {}
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        bases = [ast.unparse(b) for b in node.bases]
        code = None
        for stmt in node.body:
            target = stmt.target if isinstance(stmt, ast.AnnAssign) else None
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
                target = stmt.targets[0]
            value = getattr(stmt, "value", None)
            if isinstance(target, ast.Name) and target.id == "code" and isinstance(value, ast.Attribute):
                code = value.attr
        out[node.name] = (bases, code)
    return out


def check(
    header: str | None = None, table: str | None = None, python: str | None = None
) -> tuple[list[Row], list[str]]:
    """The agreed table and every disagreement found (texts default to the files')."""
    codes = c_codes(header)
    entries = binding_rows(table)
    classes = python_classes(python)
    problems: list[str] = []
    if not entries or entries[0][:2] != ("0", BASE_BINDING):
        problems.append(f'{TABLE.name}: the first entry must be the base class {{0, "{BASE_BINDING}", ...}}')
    rows = [Row(BASE_BINDING, "-", entries[0][2] if entries else "ERROR", 0)]
    seen_macros: set[str] = set()
    seen_tags = {rows[0].tag}
    python_by_code = {code: name for name, (_, code) in classes.items() if code}
    for macro, name, tag, parent in entries[1:]:
        if macro not in codes:
            problems.append(f"{TABLE.name}: {name} has {macro}, which redmutex.h does not define")
            continue
        if macro in seen_macros:
            problems.append(f"{TABLE.name}: {macro} has two entries")
        seen_macros.add(macro)
        if tag in seen_tags:
            problems.append(f"{TABLE.name}: the Tcl tag {tag} is used twice")
        seen_tags.add(tag)
        py = python_by_code.get(macro)
        if py is None:
            problems.append(f"{PYTHON.name}: no class sets code = lib.{macro} (the bindings call it {name})")
        elif py != name:
            problems.append(f"{macro}: the bindings call it {name}, Python {py}")
        else:
            bases = classes[name][0]
            want = parent or BASE_PYTHON
            if want not in bases:
                problems.append(f"{name}: derives from {want} in the bindings, from {bases} in Python")
            for base in bases:  # a redmutex base the bindings do not know would be lost there
                if base in classes and base != want:
                    problems.append(f"{name}: Python derives it from {base} too, the bindings do not")
        rows.append(Row(name, parent or BASE_BINDING, tag, codes[macro]))
    for macro in sorted(set(codes) - seen_macros, key=lambda m: -codes[m]):
        problems.append(
            f"{TABLE.name}: {macro} ({codes[macro]}) has no entry: bindings would raise the base class"
        )
    for macro, name in python_by_code.items():
        if macro not in codes:
            problems.append(
                f"{PYTHON.name}: {name} sets code = lib.{macro}, which redmutex.h does not define"
            )
    return rows, problems


def main(argv: list[str]) -> int:
    rows, problems = check()
    if problems:
        print("the error tables disagree:", *problems, sep="\n  ", file=sys.stderr)
        return 1
    if "--list" in argv:
        for r in rows:
            print(r.name, r.parent, r.tag, r.code if r.code else "-")
    else:
        print(
            f"ok: {len(rows) - 1} codes, the same in redmutex.h, the bindings' table and the Python classes"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
