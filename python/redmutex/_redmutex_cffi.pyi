"""Types of the cffi extension that _build.py compiles (the C core and the package's C helpers).

The boundary between typed Python and C. ``ffi`` is typed for what the
package asks of it; ``string`` returns bytes because every string this
package reads from C is a ``char`` array. ``lib`` holds the functions and
constants of redmutex.h, _aio.h, _log.h and _signals.c, which cffi makes
from the cdef at build time; they are typed as ``Any`` here, so a value that
comes out of ``lib`` is converted (``int()``, ``bool()``, ``LockState()``...)
where it enters typed code. test_cdef.py checks the cdef against the header.
"""

from typing import Any, Callable

# A C value handed out by cffi (a pointer, array or struct): its fields and
# items are those of the C declaration, which this file does not repeat.
CData = Any

class _FFI:
    NULL: CData
    errno: int
    def new(self, cdecl: str, init: object = ...) -> CData: ...
    def string(self, cdata: CData, maxlen: int = ...) -> bytes: ...
    def gc(self, cdata: CData, destructor: Callable[[CData], object], size: int = ...) -> CData: ...
    def cast(self, cdecl: str, value: object) -> CData: ...
    def addressof(self, cdata: CData, *fields_or_indexes: str | int) -> CData: ...
    def release(self, cdata: CData) -> None: ...

ffi: _FFI
lib: Any
