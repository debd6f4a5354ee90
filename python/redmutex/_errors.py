"""Exception classes and the one function that maps C result codes to them."""

from __future__ import annotations

import builtins
from typing import NoReturn

from ._redmutex_cffi import ffi, lib


class RedMutexError(Exception):
    """Base class of every error redmutex raises.

    ``code`` is the C library's negative REDMUTEX_E* result code (0 for errors
    raised by the Python layer itself) and the message is the C library's
    detail message, e.g. "lock 'jobs' is held by another owner; waited 2000 ms".
    """

    code: int = 0

    def __init__(self, message: str = "", code: int | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class InvalidArgument(RedMutexError, ValueError):
    """An argument is invalid (bad name, owner, time, URL or option). Nothing was sent."""

    code = lib.REDMUTEX_EINVAL


class TimeoutOverflow(InvalidArgument, OverflowError):
    """A wait longer than threading.TIMEOUT_MAX: an InvalidArgument that is also
    the OverflowError threading's acquire() raises for it."""


class OutOfMemory(RedMutexError, MemoryError):
    """The C library ran out of memory."""

    code = lib.REDMUTEX_ENOMEM


class LockTimeout(RedMutexError, TimeoutError):
    """The lock is held by another owner and the wait ran out (``with`` form only;
    ``acquire()`` returns False instead)."""

    code = lib.REDMUTEX_ETIMEDOUT


class NotOwnedError(RedMutexError, RuntimeError):
    """The caller does not hold the lock (release or extend of a lock not held).

    Also a RuntimeError, which is what threading.Lock and threading.RLock
    raise for releasing a lock the caller does not hold.
    """

    code = lib.REDMUTEX_ENOTOWNER


class LockLostError(NotOwnedError):
    """The lock was held but is lost: its lease ran out or renewal found it gone.

    Raised by ``release()`` and at the end of a ``with`` block: the work done
    under the lock was not protected to the end. It is also a NotOwnedError
    (the caller no longer owns the lock), so code written for redis-py, which
    catches ``LockNotOwnedError`` there, catches it as NotOwnedError.
    """

    code = lib.REDMUTEX_ELOST


class ConnectionError(RedMutexError, builtins.ConnectionError):
    """Could not connect, the connection dropped, or a server did not answer in time."""

    code = lib.REDMUTEX_ECONN


class ProtocolError(RedMutexError):
    """A server sent a reply that is malformed or not what the command returns."""

    code = lib.REDMUTEX_EPROTOCOL


class ServerError(RedMutexError):
    """A server answered with an error (READONLY, LOADING, OOM, BUSY, ...)."""

    code = lib.REDMUTEX_ESERVER


class WrongTypeError(RedMutexError):
    """The key exists but is not a lock of this kind (Redis WRONGTYPE). Nothing changed."""

    code = lib.REDMUTEX_EWRONGTYPE


class AuthError(RedMutexError):
    """Authentication or authorization failed (WRONGPASS, NOAUTH, NOPERM)."""

    code = lib.REDMUTEX_EAUTH


class ForkedError(RedMutexError):
    """The lock was acquired by the parent process; a forked child cannot release or extend it."""

    code = lib.REDMUTEX_EFORKED


class DuplicateEndpointError(RedMutexError):
    """Two of a client's URLs lead to the same Redis server (same run_id)."""

    code = lib.REDMUTEX_EDUPLICATE


class ReplicaError(RedMutexError):
    """Fewer replicas acknowledged than ``min_replicas``; the lock was released."""

    code = lib.REDMUTEX_EREPLICAS


class ClosedError(RedMutexError):
    """The client was closed."""

    code = lib.REDMUTEX_ECLOSED


class InterruptedWait(RedMutexError, InterruptedError):
    """A wait was ended by ``redmutex_client_interrupt()`` and no Python
    exception explains why.

    A wait ended by a signal raises what the signal's handler raised
    (KeyboardInterrupt for Ctrl-C), or goes on if the handler returned; this
    class is for other uses of the C interrupt.
    """

    code = lib.REDMUTEX_EINTR


class LimitError(RedMutexError):
    """A cap set in the options (``max_hold``, ``max_extensions``) was reached."""

    code = lib.REDMUTEX_ELIMIT


class UnsupportedError(RedMutexError, NotImplementedError):
    """The request needs a feature this build of the C core does not have."""

    code = lib.REDMUTEX_EUNSUPPORTED


class SystemFailure(RedMutexError, OSError):
    """The operating system failed a request redmutex cannot do without
    (no random bytes for a token); nothing was sent."""

    code = lib.REDMUTEX_ESYSTEM


_CLASSES: dict[int, type[RedMutexError]] = {
    cls.code: cls
    for cls in (
        InvalidArgument,
        OutOfMemory,
        LockTimeout,
        NotOwnedError,
        LockLostError,
        ConnectionError,
        ProtocolError,
        ServerError,
        WrongTypeError,
        AuthError,
        ForkedError,
        DuplicateEndpointError,
        ReplicaError,
        ClosedError,
        InterruptedWait,
        LimitError,
        UnsupportedError,
        SystemFailure,
    )
}


def error_for(code: int, message: str) -> RedMutexError:
    """The exception object for a C result code and message."""
    cls = _CLASSES.get(code, RedMutexError)
    if not message:
        message = ffi.string(lib.redmutex_strerror(code)).decode("utf-8", "replace")
    return cls(message, code)


def check(rc: int) -> int:
    """Returns rc when it is not an error; otherwise raises the matching exception.

    This is the one place where C result codes become Python exceptions. The
    message is the calling thread's ``redmutex_last_error()``, so call it
    right after the C function, on the same thread.
    """
    if rc >= 0:
        return rc
    message = ffi.string(lib.redmutex_last_error()).decode("utf-8", "replace")
    raise error_for(rc, message)


def raise_invalid(message: str) -> NoReturn:
    """Raises InvalidArgument for bad input found before calling C."""
    raise InvalidArgument(message)
