"""redmutex: distributed locks for Redis, with a C core.

::

    import redmutex

    with redmutex.Client("redis://127.0.0.1:6379/0") as client:
        with client.lock("jobs:nightly", timeout=10.0) as lock:
            ...   # held; the watchdog renews the lease while the block runs

``client.lock()`` is a plain lock in redis-py's wire format, ``client.rlock()``
a reentrant lock in Redisson's RLock format, ``client.fair_lock()`` a reentrant
FIFO lock in Redisson's RFairLock format and ``client.rwlock()`` a read-write
lock in Redisson's RReadWriteLock format. ``redmutex.asyncio`` has the same
locks for asyncio (``AsyncClient``). See docs/python.md.
"""

from ._base import LockInfo, LockState
from ._client import Client, FairLock, Lock, ReadLock, ReadWriteLock, RLock, WriteLock
from ._errors import (
    AuthError,
    ClosedError,
    ConnectionError,
    DuplicateEndpointError,
    ForkedError,
    InterruptedWait,
    InvalidArgument,
    LimitError,
    LockLostError,
    LockTimeout,
    NotOwnedError,
    OutOfMemory,
    ProtocolError,
    RedMutexError,
    ReplicaError,
    ServerError,
    SystemFailure,
    UnsupportedError,
    WrongTypeError,
    check,
)
from ._redmutex_cffi import ffi as _ffi
from ._redmutex_cffi import lib as _lib
from ._sem import CountDownLatch, MultiLock, Semaphore

__version__ = "1.1.0"

#: Longest lock name, in bytes (UTF-8 for str names).
NAME_MAX: int = _lib.REDMUTEX_NAME_MAX
#: Longest explicit owner id, in bytes.
OWNER_MAX: int = _lib.REDMUTEX_OWNER_MAX
#: Longest lease, wait or timeout, in seconds (one year).
TIME_MAX: float = _lib.REDMUTEX_TIME_MAX_MS / 1000


def library_version() -> str:
    """The version of the C core compiled into this package, "MAJOR.MINOR.PATCH"."""
    return _ffi.string(_lib.redmutex_version()).decode("ascii")


__all__ = [
    "NAME_MAX",
    "OWNER_MAX",
    "TIME_MAX",
    "AuthError",
    "Client",
    "ClosedError",
    "ConnectionError",
    "CountDownLatch",
    "DuplicateEndpointError",
    "FairLock",
    "ForkedError",
    "InterruptedWait",
    "InvalidArgument",
    "LimitError",
    "Lock",
    "LockInfo",
    "LockLostError",
    "LockState",
    "LockTimeout",
    "MultiLock",
    "NotOwnedError",
    "OutOfMemory",
    "ProtocolError",
    "RLock",
    "ReadLock",
    "ReadWriteLock",
    "RedMutexError",
    "ReplicaError",
    "Semaphore",
    "ServerError",
    "SystemFailure",
    "UnsupportedError",
    "WriteLock",
    "WrongTypeError",
    "__version__",
    "check",
    "library_version",
]
