"""Argument checks shared by every class of the package, blocking and asyncio.

Every value a caller gives is checked here before anything reaches the C
core, so that bad input gets one message in the caller's own terms (seconds,
not milliseconds; "lock name", not "name") and changes nothing on a server.
"""

from __future__ import annotations

import math
import threading
from typing import Any, Union

from ._errors import InvalidArgument, TimeoutOverflow, check
from ._redmutex_cffi import ffi, lib

#: A lock name or owner id, as a caller gives it.
Name = Union[str, bytes]

_TIME_MAX_MS: int = lib.REDMUTEX_TIME_MAX_MS
# The core's smallest lease and watchdog lease (handle.c, client.c): checked
# here too, so that the message says them in seconds, as they were given.
_LEASE_MIN_MS = 10
_WATCHDOG_LEASE_MIN_MS = 30
_WAIT_FOREVER: int = lib.REDMUTEX_WAIT_FOREVER


def _to_bytes(value: object, what: str, max_len: int) -> bytes:
    """A name, owner or URL as the NUL-terminated bytes the C API takes."""
    if isinstance(value, str):
        try:
            data = value.encode("utf-8")
        except UnicodeEncodeError as e:
            raise InvalidArgument(f"{what} is not valid UTF-8 text: {e}") from None
    elif isinstance(value, bytes):
        data = value
    else:
        raise InvalidArgument(f"{what} must be str or bytes, not {type(value).__name__}")
    if not data:
        raise InvalidArgument(f"{what} is empty")
    if b"\0" in data:
        raise InvalidArgument(f"{what} contains a NUL character, which the C API cannot pass")
    if len(data) > max_len:
        raise InvalidArgument(f"{what} is {len(data)} bytes long; at most {max_len} are allowed")
    return data


def _to_ms(value: object, what: str, *, allow_zero: bool = True, minimum_ms: int = 0) -> int:
    """Seconds (int or float) to whole milliseconds, rounded up, validated.

    Messages speak in seconds, the unit the caller gave: a value below the
    minimum (a positive one that rounds to no time at all included) is
    refused as "must be at least N seconds", never as zero or negative.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgument(f"{what} must be a number of seconds, not {type(value).__name__}")
    seconds = float(value) if isinstance(value, float) else value
    if isinstance(seconds, float) and (math.isnan(seconds) or math.isinf(seconds)):
        raise InvalidArgument(f"{what} must be a finite number of seconds, not {value!r}")
    if seconds < 0:
        raise InvalidArgument(f"{what} must not be negative (got {value!r})")
    if seconds > _TIME_MAX_MS / 1000:
        raise InvalidArgument(
            f"{what} of {value!r} seconds is too long; "
            f"at most {_TIME_MAX_MS // 1000} seconds (one year) are allowed"
        )
    ms = math.ceil(round(seconds * 1000, 3))
    floor = max(minimum_ms, 0 if allow_zero else 1)
    if ms < floor:
        raise InvalidArgument(f"{what} must be at least {floor / 1000:g} seconds (got {value!r})")
    return int(ms)


def _to_count(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{what} must be an int, not {type(value).__name__}")
    if value < 0:
        raise InvalidArgument(f"{what} must not be negative (got {value!r})")
    if value > 2**62:
        raise InvalidArgument(f"{what} is too large (got {value!r})")
    return value


def _wait_ms(timeout: object, what: str = "timeout") -> int:
    """A wait in seconds as a C wait in ms, by threading's rules for timeouts:
    None or -1 wait forever, and so does a wait longer than the C core's
    longest (a year) up to threading.TIMEOUT_MAX; a longer one raises an
    InvalidArgument that is also an OverflowError, as threading raises."""
    if timeout is None or (not isinstance(timeout, bool) and timeout == -1):
        return _WAIT_FOREVER
    if isinstance(timeout, (int, float)) and not isinstance(timeout, bool) and not math.isnan(timeout):
        if timeout > threading.TIMEOUT_MAX or math.isinf(timeout):
            raise TimeoutOverflow(
                f"{what} of {timeout!r} seconds is too large (threading.TIMEOUT_MAX is "
                f"{threading.TIMEOUT_MAX})"
            )
        if timeout > _TIME_MAX_MS / 1000:
            return _WAIT_FOREVER
    return _to_ms(timeout, what)


def _acquire_wait_ms(blocking: bool, timeout: object) -> int:
    """threading.Lock.acquire's argument rules, as a C wait in ms."""
    if not blocking:
        if timeout != -1:
            raise InvalidArgument("can't specify a timeout for a non-blocking call")
        return 0
    return _wait_ms(timeout)


def _hold_options(opts: Any, lease: object, max_hold: object, max_extensions: object) -> None:
    """Sets what a lock's and a semaphore's C options share (validated):
    how long a hold lives and how long the watchdog may keep it."""
    if lease is not None:
        opts.lease_ms = _to_ms(lease, "lease", minimum_ms=_LEASE_MIN_MS)
    if max_hold is not None:
        opts.max_hold_ms = _to_ms(max_hold, "max_hold", allow_zero=False)
    if max_extensions is not None:
        opts.max_extensions = _to_count(max_extensions, "max_extensions")


def _lock_options(lease: object, fencing: object, max_hold: object, max_extensions: object) -> Any:
    """The C lock options for the keyword arguments of Client.lock() (validated)."""
    opts = ffi.new("redmutex_lock_options *")
    check(lib.redmutex_lock_options_init(opts, lib.REDMUTEX_LOCK_OPTIONS_VERSION))
    _hold_options(opts, lease, max_hold, max_extensions)
    if fencing:
        opts.flags |= lib.REDMUTEX_LOCK_FENCING
    return opts


def _add_note(exc: BaseException, note: str) -> None:
    add = getattr(exc, "add_note", None)  # Python 3.11+
    if add is not None:
        add(note)
