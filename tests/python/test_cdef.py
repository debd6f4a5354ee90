"""The cffi declarations are generated from the C header and cover all of it."""

from __future__ import annotations

import importlib.util
import os
import re

import pytest
import redmutex
from redmutex._redmutex_cffi import lib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HEADER = os.path.join(ROOT, "core", "include", "redmutex.h")
BUILD = os.path.join(ROOT, "python", "redmutex", "_build.py")


def header_functions() -> set:
    with open(HEADER, encoding="utf-8") as f:
        text = f.read()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return set(re.findall(r"\b(redmutex_[a-z0-9_]+)\s*\(", text))


def header_error_codes() -> dict:
    with open(HEADER, encoding="utf-8") as f:
        text = f.read()
    return {m[0]: int(m[1]) for m in re.findall(r"\b(REDMUTEX_E[A-Z]+)\s*=\s*(-\d+)", text)}


@pytest.fixture(scope="module")
def build_module():
    if not os.path.exists(BUILD) or not os.path.exists(HEADER):
        pytest.skip("needs the source tree (core/include, python/redmutex/_build.py)")
    spec = importlib.util.spec_from_file_location("redmutex_build_under_test", BUILD)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_header_declares_functions():
    # Guards the regex below against silently matching nothing.
    assert {"redmutex_lock_acquire", "redmutex_client_new", "redmutex_last_error"} <= header_functions()


def test_generated_cdef_declares_every_header_function(build_module):
    cdef, _ = build_module.generate_cdef(HEADER)
    declared = set(re.findall(r"\b(redmutex_[a-z0-9_]+)\s*\(", cdef))
    missing = header_functions() - declared
    assert not missing, f"generated cdef lacks {sorted(missing)}"


def test_generated_cdef_is_clean_and_parses(build_module):
    from cffi import FFI

    cdef, macros = build_module.generate_cdef(HEADER)
    assert "REDMUTEX_API" not in cdef
    assert 'extern "C"' not in cdef
    assert "/*" not in cdef and "#include" not in cdef
    assert "#define REDMUTEX_TIME_MAX_MS ..." in cdef
    assert macros["REDMUTEX_VERSION_STRING"] == f'"{redmutex.library_version()}"'
    FFI().cdef(cdef)  # raises on anything cffi cannot parse


def test_installed_extension_has_every_header_function():
    missing = sorted(f for f in header_functions() if not hasattr(lib, f))
    assert not missing, f"the compiled module lacks {missing}"


def test_every_error_code_maps_to_its_own_exception_class():
    codes = header_error_codes()
    assert len(codes) >= 17
    seen = set()
    for name, value in codes.items():
        assert getattr(lib, name) == value
        exc = redmutex._errors.error_for(value, "msg")
        assert isinstance(exc, redmutex.RedMutexError)
        assert exc.code == value and str(exc) == "msg"
        assert type(exc) is not redmutex.RedMutexError, name
        seen.add(type(exc))
    assert len(seen) == len(codes)


def test_exception_hierarchy_matches_design():
    assert issubclass(redmutex.LockTimeout, TimeoutError)
    assert issubclass(redmutex.ConnectionError, ConnectionError)
    assert issubclass(redmutex.InvalidArgument, ValueError)
    for cls in (
        redmutex.LockTimeout,
        redmutex.NotOwnedError,
        redmutex.LockLostError,
        redmutex.ConnectionError,
        redmutex.ProtocolError,
        redmutex.InvalidArgument,
        redmutex.ClosedError,
    ):
        assert issubclass(cls, redmutex.RedMutexError)


def test_versions_agree():
    assert redmutex.library_version() == redmutex.__version__
    major, minor, patch = (int(x) for x in redmutex.__version__.split("."))
    assert lib.redmutex_version_number() == 10000 * major + 100 * minor + patch == lib.REDMUTEX_VERSION_NUMBER


def test_check_maps_codes_and_messages():
    assert redmutex.check(0) == 0
    lib.redmutex_clear_error()
    with pytest.raises(redmutex.InvalidArgument) as info:
        redmutex.check(lib.redmutex_lock_options_init(redmutex._ffi.NULL, 1))
    assert info.value.code == lib.REDMUTEX_EINVAL
    assert "opts is NULL" in str(info.value)


def test_the_type_stub_of_the_compiled_module_ships_and_matches_it():
    """The package ships py.typed, so type checkers read _redmutex_cffi.pyi for
    the compiled module: it is installed, and what it declares of ffi is there
    (a method that was renamed or dropped would type-check and then fail)."""
    import ast

    from redmutex._redmutex_cffi import ffi

    package = os.path.dirname(redmutex.__file__)
    assert os.path.exists(os.path.join(package, "py.typed"))
    stub = os.path.join(package, "_redmutex_cffi.pyi")
    assert os.path.exists(stub), "the type stub of the compiled module is not installed"
    with open(stub, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    (ffi_class,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "_FFI"]
    declared = {n.name for n in ffi_class.body if isinstance(n, ast.FunctionDef)}
    declared |= {n.target.id for n in ffi_class.body if isinstance(n, ast.AnnAssign)}
    assert {"new", "string", "NULL"} <= declared
    assert not [name for name in declared if not hasattr(ffi, name)]
    # The stub says string() returns bytes: so it does for the char arrays the package reads.
    assert isinstance(ffi.string(lib.redmutex_version()), bytes)
    stubbed = {n.target.id for n in tree.body if isinstance(n, ast.AnnAssign)}
    assert stubbed == {"ffi", "lib"}


AIO_HEADER = os.path.join(ROOT, "python", "redmutex", "_aio.h")


def test_the_asyncio_pool_declarations_are_generated_from_its_header(build_module, tmp_path):
    """_aio.h is the one declaration of the worker pool: a function or a job
    field added there reaches the cffi module without a second copy in
    _build.py (which could drift from it)."""
    from cffi import FFI

    with open(AIO_HEADER, encoding="utf-8") as f:
        text = f.read()
    text = text.replace("    int64_t out;\n", "    int64_t out;\n    int64_t added_field;\n")
    text = text.replace("#endif", "/* Added. */\nint rmpy_added_for_the_test(rmpy_job *j);\n#endif")
    header = tmp_path / "_aio.h"
    header.write_text(text, encoding="utf-8")
    cdef = build_module.generate_aio_cdef(str(header))
    assert "rmpy_added_for_the_test" in cdef and "added_field" in cdef
    assert "#" not in cdef and "/*" not in cdef and "_Atomic" not in cdef
    core, _ = build_module.generate_cdef(HEADER)
    FFI().cdef(core + cdef)  # raises on anything cffi cannot parse
    declared = set(re.findall(r"\b(rmpy_[a-z0-9_]+)\s*\(", build_module.generate_aio_cdef(AIO_HEADER)))
    assert declared and all(hasattr(lib, name) for name in declared)
