"""cffi build module: compiles the C core into ``redmutex._redmutex_cffi``.

This file is run by cffi's setuptools integration (``cffi_modules`` in
setup.py); ``pip install .`` or ``pip install -e .`` builds the extension.

The C declarations given to cffi are *generated* from the public header
core/include/redmutex.h at build time, so they cannot drift from it: comments,
preprocessor lines, ``REDMUTEX_API`` and the ``extern "C"`` block are removed,
and every integer ``#define REDMUTEX_*`` becomes ``#define NAME ...`` (cffi
asks the compiler for the value). tests/python/test_cdef.py checks that every
``redmutex_`` function of the header reaches the compiled module. The
asyncio worker pool's declarations are generated the same way from its own
header, python/redmutex/_aio.h.
"""

from __future__ import annotations

import glob
import os
import re
import shlex
import subprocess
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
INCLUDE_DIR = os.path.join(ROOT, "core", "include")
SOURCE_DIR = os.path.join(ROOT, "core", "src")
HEADER = os.path.join(INCLUDE_DIR, "redmutex.h")

# The package's own C (python/redmutex/_signals.c): the signal handler that ends waits.
SIGNALS_SOURCE = os.path.join(HERE, "_signals.c")
SIGNALS_CDEF = """
int rmpy_signal_chain(int signum);
int rmpy_signal_chained(int signum);
int rmpy_wait_begin(redmutex_client *client);
void rmpy_wait_end(int slot);
void rmpy_acquire(redmutex_client *client, redmutex_lock *lock, const char *owner, int64_t wait_ms,
                  int interruptible, int *rc);
void rmpy_semaphore_acquire(redmutex_client *client, char *out, size_t size, redmutex_semaphore *sem,
                            int64_t permits, int64_t wait_ms, int interruptible, int *rc);
void rmpy_multi_lock_acquire(redmutex_client *client, redmutex_multi_lock *multi, const char *owner,
                             int64_t wait_ms, int interruptible, int *rc);
void rmpy_latch_wait(redmutex_client *client, redmutex_latch *latch, int64_t wait_ms, int interruptible,
                     int *rc);
"""

# The package's worker pool for redmutex.asyncio (python/redmutex/_aio.c); its
# declarations are generated from _aio.h (generate_aio_cdef), their one copy.
AIO_SOURCE = os.path.join(HERE, "_aio.c")
AIO_HEADER = os.path.join(HERE, "_aio.h")

# The queue between the core's log callback and the `redmutex` logger (python/redmutex/_log.c).
LOG_SOURCE = os.path.join(HERE, "_log.c")
LOG_CDEF = """
typedef struct rmpy_log_record {
    int level;
    char message[...];
    char lock[...];
    char server[...];
} rmpy_log_record;
void rmpy_log(int level, const char *message, const char *lock_name, const char *server, void *payload);
int rmpy_log_fd(void);
int rmpy_log_next(rmpy_log_record *out);
uint64_t rmpy_log_dropped(void);
"""

_INCLUDE_RE = re.compile(r'^\s*#\s*include\s*[<"](redmutex/[^>"]+)[>"]', re.M)
_DEFINE_RE = re.compile(r"^\s*#\s*define\s+(REDMUTEX_[A-Z0-9_]+)(\([^)]*\))?[ \t]*(.*)$")


def _read_header(path: str, seen: tuple[str, ...] = ()) -> str:
    """The header's text with its own small headers (redmutex/...) inlined."""
    if path in seen:
        return ""
    with open(path, encoding="utf-8") as f:
        text = f.read()

    def inline(m: re.Match[str]) -> str:
        return _read_header(os.path.join(INCLUDE_DIR, m.group(1)), (*seen, path))

    return _INCLUDE_RE.sub(inline, text)


def _strip_comments(text: str) -> str:
    # Keep string literals intact; drop /* */ and // comments.
    pattern = re.compile(r'"(?:\\.|[^"\\])*"|/\*.*?\*/|//[^\n]*', re.S)

    def repl(m: re.Match[str]) -> str:
        s = m.group(0)
        if s.startswith('"'):
            return s
        return "\n" * s.count("\n") if s.startswith("/*") else ""

    return pattern.sub(repl, text)


def _logical_lines(text: str) -> list[str]:
    """Lines with backslash continuations joined."""
    return text.replace("\\\n", " ").split("\n")


def generate_cdef(header: str = HEADER) -> tuple[str, dict[str, str]]:
    """Returns (cdef text, {macro name: value}) generated from the header.

    The cdef holds every declaration of the header plus ``#define NAME ...``
    for each integer-valued REDMUTEX_ macro. String and initializer macros
    are returned in the dict but not declared (cffi cannot take them).
    """
    text = _strip_comments(_read_header(header))
    out: list[str] = []
    macros: dict[str, str] = {}
    skip_depth = 0  # inside an #if(def) __cplusplus block
    depth = 0
    for line in _logical_lines(text):
        stripped = line.strip()
        if stripped.startswith("#"):
            directive = stripped[1:].strip()
            if directive.startswith(("if", "ifdef", "ifndef")):
                depth += 1
                if skip_depth == 0 and "__cplusplus" in directive:
                    skip_depth = depth
            elif directive.startswith("endif"):
                if skip_depth == depth:
                    skip_depth = 0
                depth -= 1
            elif directive.startswith("define") and skip_depth == 0:
                m = _DEFINE_RE.match(stripped)
                if m and not m.group(2) and m.group(3).strip():
                    macros[m.group(1)] = m.group(3).strip()
            continue
        if skip_depth:
            continue
        out.append(line)
    body = "\n".join(out)
    body = re.sub(r"\bREDMUTEX_API\b", "", body)
    body = re.sub(r'extern\s+"C"\s*\{', "", body)
    # pycparser does not know integer suffixes in shifts such as 1u << 0.
    body = re.sub(r"\b(\d+)[uU][lL]{0,2}\b", r"\1", body)
    # Array sizes named by a macro (REDMUTEX_STATS_BUCKETS): cffi needs the number itself.
    body = re.sub(
        r"\[(REDMUTEX_[A-Z0-9_]+)\]",
        lambda m: f"[{macros[m.group(1)]}]" if macros.get(m.group(1), "").isdigit() else m.group(0),
        body,
    )
    body = re.sub(r"\n\s*\n+", "\n", body).strip() + "\n"

    defines = []
    for name, value in macros.items():
        if name == "REDMUTEX_API" or value.startswith(("{", '"')):
            continue
        defines.append(f"#define {name} ...")
    return "\n".join(defines) + "\n" + body, macros


def generate_aio_cdef(header: str = AIO_HEADER) -> str:
    """The cffi declarations of the worker pool, from its header (_aio.h):
    without its comments and preprocessor lines; an array sized by a macro
    gets the size cffi asks the compiler for ([...]), and the pool's atomic
    fields, which Python never touches (and cffi cannot parse), become ``...;``."""
    with open(header, encoding="utf-8") as f:
        text = _strip_comments(f.read())
    lines = [line for line in _logical_lines(text) if not line.strip().startswith("#")]
    body = "\n".join(lines)
    body = re.sub(r"^\s*_Atomic\b[^;]*;", "    ...;", body, flags=re.M)
    body = re.sub(r"\[[^\]]*[A-Za-z_][^\]]*\]", "[...]", body)
    return re.sub(r"\n\s*\n+", "\n", body).strip() + "\n"


# The core's dependencies: hiredis (RESP) and OpenSSL (TLS), found with pkg-config.
_DEPENDENCIES = ["hiredis", "openssl"]
_FALLBACK_LIBRARIES = ["hiredis", "ssl", "crypto"]


def _pkg_config_dependencies() -> tuple[list[str], list[str], list[str], list[str]]:
    """(include dirs, extra compile args, library dirs, libraries) for hiredis and OpenSSL."""
    try:
        cflags = subprocess.run(
            ["pkg-config", "--cflags", *_DEPENDENCIES], check=True, capture_output=True, text=True
        ).stdout
        libs = subprocess.run(
            ["pkg-config", "--libs", *_DEPENDENCIES], check=True, capture_output=True, text=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return [], [], [], list(_FALLBACK_LIBRARIES)
    include_dirs, extra, library_dirs, libraries = [], [], [], []
    for flag in shlex.split(cflags):
        if flag.startswith("-I"):
            include_dirs.append(flag[2:])
        else:
            extra.append(flag)
    for flag in shlex.split(libs):
        if flag.startswith("-L"):
            library_dirs.append(flag[2:])
        elif flag.startswith("-l"):
            libraries.append(flag[2:])
    return include_dirs, extra, library_dirs, libraries or list(_FALLBACK_LIBRARIES)


def _rel(path: str) -> str:
    """setuptools wants source paths relative to setup.py's directory."""
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


def make_ffibuilder() -> FFI:
    """The FFI builder for setuptools (source paths relative to setup.py)."""
    from cffi import FFI

    cdef, _ = generate_cdef()
    ffibuilder = FFI()
    ffibuilder.cdef(cdef + SIGNALS_CDEF + generate_aio_cdef() + LOG_CDEF)
    include_dirs, extra_cflags, library_dirs, libraries = _pkg_config_dependencies()
    sources = sorted(glob.glob(os.path.join(SOURCE_DIR, "*.c")))
    if not sources:
        raise RuntimeError(f"no C sources found in {SOURCE_DIR}")
    ffibuilder.set_source(
        "redmutex._redmutex_cffi",
        '#include "redmutex.h"\n#include "_aio.h"\n#include "_log.h"\n',
        sources=[_rel(s) for s in [*sources, SIGNALS_SOURCE, AIO_SOURCE, LOG_SOURCE]],
        include_dirs=[_rel(INCLUDE_DIR), _rel(HERE), *include_dirs],
        library_dirs=library_dirs,
        libraries=[*libraries, "pthread"],
        # The core is C11 and its files define _GNU_SOURCE themselves.
        # Hidden visibility keeps the core's internal rm_* symbols private.
        extra_compile_args=["-std=c11", "-fvisibility=hidden", *extra_cflags],
    )
    return ffibuilder


ffibuilder = make_ffibuilder()
