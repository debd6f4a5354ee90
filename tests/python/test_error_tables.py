"""The error table: redmutex.h's codes, the bindings' table (bindings/common/errors.c)
and the package's exception classes agree (tests/errortable.py), and the package
raises for each code the class the table names."""

from __future__ import annotations

import os
import sys

import redmutex
from redmutex import _errors

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import errortable


def test_the_c_codes_the_bindings_table_and_the_python_classes_agree() -> None:
    rows, problems = errortable.check()
    assert not problems, problems
    assert len(rows) > 1


def test_each_code_raises_the_class_the_table_names() -> None:
    rows, _ = errortable.check()
    for row in rows[1:]:
        cls = getattr(redmutex, row.name)
        parent = (
            redmutex.RedMutexError if row.parent == errortable.BASE_BINDING else getattr(redmutex, row.parent)
        )
        assert cls.code == row.code and issubclass(cls, parent), row
        assert type(_errors.error_for(row.code, "x")) is cls, row
    exported = {
        name
        for name, obj in vars(redmutex).items()
        if isinstance(obj, type)
        and issubclass(obj, redmutex.RedMutexError)
        and "code" in vars(obj)
        and obj.code
    }
    assert exported == {r.name for r in rows[1:]}


def test_a_code_the_bindings_table_lacks_is_found() -> None:
    header = errortable.HEADER.read_text()
    table = errortable.TABLE.read_text()
    python = errortable.PYTHON.read_text()
    added = header.replace("} redmutex_error;", "    ,REDMUTEX_ENEW = -99\n} redmutex_error;")
    assert "-99" in added
    _, problems = errortable.check(header=added, table=table, python=python)
    assert any("REDMUTEX_ENEW (-99) has no entry" in p for p in problems), problems
    renamed = table.replace('"LockTimeout"', '"TimeoutError"')
    _, problems = errortable.check(header=header, table=renamed, python=python)
    assert any("the bindings call it TimeoutError, Python LockTimeout" in p for p in problems), problems
    orphaned = table.replace('"LockLostError", "LOST", "NotOwnedError"', '"LockLostError", "LOST", NULL')
    _, problems = errortable.check(header=header, table=orphaned, python=python)
    assert any(p.startswith("LockLostError: derives from RedMutexError") for p in problems), problems
