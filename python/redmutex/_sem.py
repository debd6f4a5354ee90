"""Semaphores, count-down latches and multi-locks over the C core (blocking API).

Made by Client.semaphore(), Client.latch() and Client.multi_lock(). The waits
run with the GIL released and end on Ctrl-C like a lock's (_signals.py).

A semaphore's holds are permits, each with an id (Redisson's permit id) and a
lease renewed by the watchdog. ``with sem:`` takes one permit for the block
and gives back that same permit when it ends. acquire() and release() follow
threading.Semaphore: release() gives back the most recent permit acquired by
the calling thread through this object, or, if it has none, the most recent
one of any thread (a semaphore is not owned by a thread); release(permit_id)
names one.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Any, Callable, Sequence

from . import _events, _signals
from ._client import (
    _LEASE_MIN_MS,
    _WAIT_FOREVER,
    Client,
    Lock,
    LockState,
    Name,
    _acquire_wait_ms,
    _add_note,
    _to_bytes,
    _to_count,
    _to_ms,
    _wait_ms,
)
from ._errors import InvalidArgument, LockLostError, LockTimeout, NotOwnedError, check
from ._redmutex_cffi import ffi, lib

__all__ = ["CountDownLatch", "MultiLock", "Semaphore"]

_ETIMEDOUT: int = lib.REDMUTEX_ETIMEDOUT
_EINTR: int = lib.REDMUTEX_EINTR
_ENOTOWNER: int = lib.REDMUTEX_ENOTOWNER
_PERMIT_ID_SIZE: int = lib.REDMUTEX_PERMIT_ID_SIZE


def _permits(value: object, what: str, maximum: int) -> int:
    """A count of permits: an int from 1 to maximum."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{what} must be an int, not {type(value).__name__}")
    if not 1 <= value <= maximum:
        raise InvalidArgument(f"{what} must be from 1 to {maximum} (got {value!r})")
    return value


def _interruptible_call(call: Callable[[Any, int, int], None], wait_ms: int, rc_out: Any) -> int:
    """Runs a C wait `call(rc_out, wait_ms, interruptible)` with Ctrl-C ending
    it (see Lock._acquire_ms): returns its result code; REDMUTEX_EINTR runs
    the pending signal handlers and waits on for the time left (PEP 475).
    What a handler raises propagates; rc_out[0] then tells whether the call
    had won (0) and must be given back."""
    deadline = None if wait_ms == _WAIT_FOREVER else time.monotonic() + wait_ms / 1000
    while True:
        rc_out[0] = 1
        call(rc_out, wait_ms, _signals.interruptible(wait_ms))
        rc = rc_out[0]
        if rc != _EINTR:
            return rc
        _signals.run_pending_handlers()
        if deadline is not None:
            wait_ms = max(0, math.ceil((deadline - time.monotonic()) * 1000))


def _new_semaphore(
    client_ptr: Any,
    name: Name,
    permits: int,
    lease: float | None,
    fencing: bool,
    resize: bool,
    max_hold: float | None,
    max_extensions: int | None,
) -> Any:
    """A C semaphore handle (not garbage collected) for the keyword arguments
    of Client.semaphore(), checked; raises InvalidArgument for bad ones."""
    c_name = _to_bytes(name, "semaphore name", lib.REDMUTEX_NAME_MAX)
    _permits(permits, "permits", lib.REDMUTEX_SEMAPHORE_PERMITS_MAX)
    opts = ffi.new("redmutex_semaphore_options *")
    check(lib.redmutex_semaphore_options_init(opts, lib.REDMUTEX_SEMAPHORE_OPTIONS_VERSION))
    if lease is not None:
        opts.lease_ms = _to_ms(lease, "lease", minimum_ms=_LEASE_MIN_MS)
    if max_hold is not None:
        opts.max_hold_ms = _to_ms(max_hold, "max_hold", allow_zero=False)
    if max_extensions is not None:
        opts.max_extensions = _to_count(max_extensions, "max_extensions")
    if fencing:
        opts.flags |= lib.REDMUTEX_SEMAPHORE_FENCING
    if resize:
        opts.flags |= lib.REDMUTEX_SEMAPHORE_RESIZE
    out = ffi.new("redmutex_semaphore **")
    check(lib.redmutex_semaphore_new(out, client_ptr, c_name, permits, opts))
    return out[0]


class Semaphore:
    """At most ``permits`` holders at once, across processes (Redisson's
    RPermitExpirableSemaphore wire format: a Java service's permits count
    against the same capacity).

    Made by Client.semaphore(). Arguments:

    * ``permits`` - the capacity. Set on the servers when the semaphore does
      not exist yet; a different capacity there raises InvalidArgument at
      the first acquisition (nothing changed) unless ``resize=True``, which
      sets it (permits held stay held).
    * ``lease`` - seconds each permit lives without renewal. None (default):
      the client's ``watchdog_lease``, renewed by the watchdog while held, so
      a crashed holder's permit comes back within a lease.
    * ``timeout`` - longest wait of ``with sem:`` (None: forever).
    * ``fencing`` - each acquisition gets a fencing token (``fence``).
    * ``on_lost`` - ``callable(semaphore, state, permit_id)`` when a held
      permit turns RENEWAL_FAILING or LOST (and HELD again), on the client's
      event thread.
    * ``max_hold`` / ``max_extensions`` - as for locks.
    """

    def __init__(
        self,
        client: Client,
        name: Name,
        permits: int,
        *,
        lease: float | None = None,
        timeout: float | None = None,
        fencing: bool = False,
        resize: bool = False,
        on_lost: Callable[[Semaphore, LockState, str], object] | None = None,
        max_hold: float | None = None,
        max_extensions: int | None = None,
    ) -> None:
        if not isinstance(client, Client):
            raise InvalidArgument("client must be a redmutex.Client")
        client._check_open()
        self._name = name
        self._timeout_ms = _wait_ms(timeout)
        self.timeout = timeout
        if on_lost is not None and not callable(on_lost):
            raise InvalidArgument("on_lost must be callable")
        self._on_lost = on_lost
        ptr = _new_semaphore(client._ptr, name, permits, lease, fencing, resize, max_hold, max_extensions)
        self._ptr = ffi.gc(ptr, lib.redmutex_semaphore_free)
        self._permits = permits
        self._fencing = bool(fencing)
        self.client = client
        # Permit ids held through this object: per acquiring thread (newest
        # last), and all of them in acquisition order.
        self._mu = threading.Lock()
        self._by_thread: dict[int, list[bytes]] = {}
        self._order: list[bytes] = []
        self._pending: list[BaseException] = []
        if on_lost is not None:
            _events.listen(int(lib.redmutex_semaphore_id(self._ptr)), self)
            client._c.pump_events()

    # -- bookkeeping ------------------------------------------------------------

    def _run_on_lost(self, state: int, owner: str) -> None:
        callback = self._on_lost
        if callback is None:
            return
        try:
            callback(self, LockState(state), owner)
        except BaseException as exc:  # noqa: BLE001 - kept for the semaphore's user
            if not self._pending:
                self._pending.append(exc)

    def _raise_pending(self) -> None:
        if self._pending:
            raise self._pending.pop()

    def _push(self, permit: bytes) -> None:
        with self._mu:
            self._by_thread.setdefault(threading.get_ident(), []).append(permit)
            self._order.append(permit)

    def _forget(self, permit: bytes) -> None:
        with self._mu:
            if permit in self._order:
                self._order.remove(permit)
            for ident, stack in list(self._by_thread.items()):
                if permit in stack:
                    stack.remove(permit)
                    if not stack:
                        del self._by_thread[ident]

    def _latest(self) -> bytes | None:
        """The calling thread's most recent permit, else the most recent of any thread."""
        with self._mu:
            stack = self._by_thread.get(threading.get_ident())
            if stack:
                return stack[-1]
            return self._order[-1] if self._order else None

    def _permit_arg(self, permit_id: Name | None) -> bytes:
        if permit_id is None:
            permit = self._latest()
            if permit is None:
                raise NotOwnedError(
                    f"semaphore {self._name!r}: no permit is held through this object", NotOwnedError.code
                )
            return permit
        return _to_bytes(permit_id, "permit_id", _PERMIT_ID_SIZE - 1)

    # -- acquire and release -------------------------------------------------------

    def _acquire_ms(self, permits: int, wait_ms: int) -> bytes | None:
        """The id of `permits` permits acquired within wait_ms, or None on timeout."""
        out = ffi.new("char[]", _PERMIT_ID_SIZE)
        client_ptr, ptr = self.client._ptr, self._ptr

        def call(rc_out: Any, ms: int, interruptible: int) -> None:
            lib.rmpy_semaphore_acquire(client_ptr, out, len(out), ptr, permits, ms, interruptible, rc_out)

        rc_out = ffi.new("int *")
        try:
            rc = _interruptible_call(call, wait_ms, rc_out)
        except BaseException as exc:
            # A signal handler raised as the acquisition won: give it back.
            if rc_out[0] == 0 and lib.redmutex_semaphore_release(ptr, out) < 0:
                _add_note(
                    exc, f"redmutex: a permit of {self._name!r} acquired as this came could not be given back"
                )
            raise
        if rc == _ETIMEDOUT:
            return None
        check(rc)
        permit = ffi.string(out)
        self._push(permit)
        return permit

    def acquire(self, permits: int = 1, blocking: bool = True, timeout: float | None = -1) -> bool:
        """Takes ``permits`` permits (1 by default) as one hold, with
        threading.Semaphore.acquire's contract: ``blocking=False`` tries once,
        else waits up to ``timeout`` seconds (-1 or None: forever). True when
        taken, False when not in time. The permit id is ``permit_id`` (for
        the calling thread) until released. Raises InvalidArgument for bad
        arguments (0, negative or more permits than the capacity, a NaN
        timeout: nothing is sent) and when the servers have another
        capacity; ConnectionError, WrongTypeError, ClosedError."""
        count = _permits(permits, "permits", min(self._permits, lib.REDMUTEX_ACQUIRE_PERMITS_MAX))
        wait_ms = _acquire_wait_ms(blocking, timeout)
        self._raise_pending()
        return self._acquire_ms(count, wait_ms) is not None

    def release(self, permit_id: Name | None = None) -> None:
        """Gives back a permit: ``permit_id``, or the most recent one acquired
        by the calling thread (any thread's, if it has none). Raises
        NotOwnedError when no such permit is held (nothing changed) and
        LockLostError when it was lost before the release (its lease ended:
        the work done under it was not protected to the end)."""
        permit = self._permit_arg(permit_id)
        try:
            check(lib.redmutex_semaphore_release(self._ptr, permit))
        except (LockLostError, NotOwnedError):
            self._forget(permit)
            raise
        self._forget(permit)
        self._raise_pending()

    def __enter__(self) -> Semaphore:
        """Takes one permit, waiting up to the semaphore's ``timeout`` (None:
        forever); raises LockTimeout when it cannot be had in time."""
        self._raise_pending()
        start = time.monotonic()
        permit = self._acquire_ms(1, self._timeout_ms)
        if permit is None:
            waited = round((time.monotonic() - start) * 1000)
            raise LockTimeout(
                f"semaphore {self._name!r}: no permit free; waited {waited} ms", LockTimeout.code
            )
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        """Gives back the block's permit. Raises LockLostError if it was lost
        while the block ran, unless the block raised (then it is a note)."""
        with self._mu:
            stack = self._by_thread.get(threading.get_ident())
            permit = stack[-1] if stack else None
        try:
            self.release(permit)
        except BaseException as err:
            if exc is None:
                raise
            _add_note(
                exc,
                f"redmutex: releasing a permit of {self._name!r} on leaving the block also failed: {err!r}",
            )

    # -- what the servers say ---------------------------------------------------------

    def available(self) -> int:
        """Permits an acquisition could take now, as the servers say (one round
        trip): the capacity when the semaphore does not exist there yet."""
        self._raise_pending()
        out = ffi.new("int64_t *")
        check(lib.redmutex_semaphore_available(out, ffi.NULL, self._ptr))
        return int(out[0])

    def extend(self, seconds: float, replace: bool = False, permit_id: Name | None = None) -> None:
        """Extends a held permit's lease (the calling thread's most recent by
        default) by ``seconds`` (or sets it, replace=True); never re-creates
        one that is gone. Raises NotOwnedError, LockLostError, LimitError."""
        ms = _to_ms(seconds, "seconds", allow_zero=False)
        permit = self._permit_arg(permit_id)
        mode = lib.REDMUTEX_EXTEND_REPLACE if replace else lib.REDMUTEX_EXTEND_ADD
        check(lib.redmutex_semaphore_extend(self._ptr, permit, ms, mode))

    # -- local state (no I/O) -------------------------------------------------------

    @property
    def name(self) -> Name:
        """The semaphore's name, as given; it is the Redis key of its counter."""
        return self._name

    @property
    def permits(self) -> int:
        """The capacity this semaphore was made with."""
        return self._permits

    @property
    def permit_id(self) -> str | None:
        """The id of the calling thread's most recent permit (any thread's, if it has none), or None."""
        permit = self._latest()
        return None if permit is None else permit.decode("ascii")

    @property
    def held(self) -> list[str]:
        """The ids of the permits held through this object, oldest first."""
        with self._mu:
            return [p.decode("ascii") for p in self._order]

    def _state_of(self, permit: bytes | None) -> LockState:
        self.client._check_open()
        if permit is None:
            return LockState.UNLOCKED
        out = ffi.new("redmutex_state *")
        check(lib.redmutex_semaphore_state(out, self._ptr, permit))
        return LockState(out[0])

    @property
    def state(self) -> LockState:
        """The state of ``permit_id``'s permit (UNLOCKED when none is held)."""
        self._raise_pending()
        return self._state_of(self._latest())

    @property
    def lost(self) -> bool:
        """True when ``permit_id``'s permit is known to be lost (release it to forget it)."""
        return self.state == LockState.LOST

    @property
    def validity(self) -> float:
        """Seconds ``permit_id``'s permit is still known to be valid; 0.0 when none is held."""
        permit = self._latest()
        if permit is None:
            return 0.0
        out = ffi.new("int64_t *")
        check(lib.redmutex_semaphore_validity(out, self._ptr, permit))
        return max(0, out[0]) / 1000

    @property
    def fence(self) -> int | None:
        """The fencing token of ``permit_id``'s permit, or None (fencing off, or none held)."""
        permit = self._latest()
        if not self._fencing or permit is None:
            return None
        out = ffi.new("int64_t *")
        rc = lib.redmutex_semaphore_fence(out, self._ptr, permit)
        if rc == _ENOTOWNER:
            return None
        check(rc)
        return int(out[0])

    def __repr__(self) -> str:
        with self._mu:
            held = len(self._order)
        name, permits = self._name, self._permits
        return f"<redmutex.Semaphore name={name!r} permits={permits} held={held} at {id(self):#x}>"


class CountDownLatch:
    """A count that reaches zero once (Redisson's RCountDownLatch wire format).

    Made by Client.latch(name). ``try_set_count(n)`` sets the count if the
    latch has none; ``count_down()`` takes one off (at zero every waiter goes
    on); ``wait(timeout)`` waits for zero; ``count`` is the count now. A
    Java service counting down the same latch releases the waiters here.
    """

    def __init__(self, client: Client, name: Name) -> None:
        if not isinstance(client, Client):
            raise InvalidArgument("client must be a redmutex.Client")
        client._check_open()
        self._name = name
        c_name = _to_bytes(name, "latch name", lib.REDMUTEX_NAME_MAX)
        self.client = client
        out = ffi.new("redmutex_latch **")
        check(lib.redmutex_latch_new(out, client._ptr, c_name))
        self._ptr = ffi.gc(out[0], lib.redmutex_latch_free)

    @property
    def name(self) -> Name:
        """The latch's name, as given; it is the Redis key of its count."""
        return self._name

    def try_set_count(self, count: int) -> bool:
        """Sets the count (an int >= 1) when the latch has none; True when set,
        False when a count was there already (left as it is)."""
        if isinstance(count, bool) or not isinstance(count, int) or count < 1 or count > 2**62:
            raise InvalidArgument(f"count must be an int >= 1, not {count!r}")
        self.client._check_open()
        out = ffi.new("int *")
        check(lib.redmutex_latch_try_set_count(out, self._ptr, count))
        return bool(out[0])

    def count_down(self) -> None:
        """Counts down by one; at zero the latch opens and every waiter goes on.
        A ConnectionError means it may or may not have counted."""
        self.client._check_open()
        check(lib.redmutex_latch_count_down(self._ptr))

    @property
    def count(self) -> int:
        """The count now (0 when open or never set); one round trip."""
        self.client._check_open()
        out = ffi.new("int64_t *")
        check(lib.redmutex_latch_count(out, self._ptr))
        return int(out[0])

    def wait(self, timeout: float | None = None) -> bool:
        """Waits until the count is zero: True, or False when ``timeout``
        seconds (None: forever) ran out first. Ctrl-C ends the wait."""
        wait_ms = _wait_ms(timeout)
        self.client._check_open()
        client_ptr, ptr = self.client._ptr, self._ptr

        def call(rc_out: Any, ms: int, interruptible: int) -> None:
            lib.rmpy_latch_wait(client_ptr, ptr, ms, interruptible, rc_out)

        rc = _interruptible_call(call, wait_ms, ffi.new("int *"))
        if rc == _ETIMEDOUT:
            return False
        check(rc)
        return True

    def delete(self) -> bool:
        """Deletes the count (Redisson's delete()); True when one was deleted."""
        self.client._check_open()
        out = ffi.new("int *")
        check(lib.redmutex_latch_delete(out, self._ptr))
        return bool(out[0])

    def __repr__(self) -> str:
        return f"<redmutex.CountDownLatch name={self._name!r} at {id(self):#x}>"


class MultiLock:
    """All of several locks or none (RedissonMultiLock's semantics).

    Made by Client.multi_lock([lock, ...]) from lock objects of one client,
    of any kinds. ``acquire()`` holds every lock when it returns True and
    none when it returns False; ``release()`` releases them all. Each lock
    is an ordinary hold of its lock object (renewed, reported, queried as
    usual), so services that take the same locks one by one exclude it.
    Never deadlocks against another multi-lock over overlapping locks,
    whatever their order: an attempt that misses a lock gives back the
    others before it waits.

    The owner is ``owner`` if given, else the locks' own: their explicit
    owner (the same for all of them), or each lock's default owner (the
    lock object for a plain lock, the calling thread for a reentrant one).
    """

    def __init__(
        self,
        client: Client,
        locks: Sequence[Lock],
        *,
        timeout: float | None = None,
        owner: Name | None = None,
    ) -> None:
        if not isinstance(client, Client):
            raise InvalidArgument("client must be a redmutex.Client")
        client._check_open()
        if isinstance(locks, (str, bytes)) or not isinstance(locks, Sequence) or not locks:
            raise InvalidArgument("multi_lock() takes a non-empty list of lock objects")
        for lock in locks:
            if not isinstance(lock, Lock):
                raise InvalidArgument(f"multi_lock() takes lock objects, not {type(lock).__name__}")
            if lock.client is not client:
                raise InvalidArgument("the locks of a multi-lock must belong to its client")
        if owner is not None:
            self._owner: Any = _to_bytes(owner, "owner", lib.REDMUTEX_OWNER_MAX)
        else:
            owners = {lock._owner if lock._owner != ffi.NULL else None for lock in locks}
            if len(owners) > 1:
                raise InvalidArgument("the locks of a multi-lock have different owners; pass owner=")
            only = owners.pop()
            self._owner = ffi.NULL if only is None else only
        self._timeout_ms = _wait_ms(timeout)
        self.timeout = timeout
        self.client = client
        self._locks = list(locks)
        array = ffi.new("redmutex_lock *[]", [lock._ptr for lock in self._locks])
        out = ffi.new("redmutex_multi_lock **")
        check(lib.redmutex_multi_lock_new(out, array, len(self._locks)))
        self._ptr = ffi.gc(out[0], lib.redmutex_multi_lock_free)

    @property
    def locks(self) -> list[Lock]:
        """The lock objects of the set, as given."""
        return list(self._locks)

    def _acquire_ms(self, wait_ms: int) -> bool:
        client_ptr, ptr, owner = self.client._ptr, self._ptr, self._owner

        def call(rc_out: Any, ms: int, interruptible: int) -> None:
            lib.rmpy_multi_lock_acquire(client_ptr, ptr, owner, ms, interruptible, rc_out)

        rc_out = ffi.new("int *")
        try:
            rc = _interruptible_call(call, wait_ms, rc_out)
        except BaseException as exc:
            # A signal handler raised as the set was won: give it back.
            if rc_out[0] == 0 and lib.redmutex_multi_lock_release(ptr, owner) < 0:
                _add_note(exc, "redmutex: the multi-lock acquired as this came could not be given back")
            raise
        if rc == _ETIMEDOUT:
            return False
        check(rc)
        return True

    def acquire(self, blocking: bool = True, timeout: float | None = -1) -> bool:
        """Acquires every lock, or none (threading.Lock.acquire's contract):
        True when all are held, False when one was held elsewhere until the
        wait ran out. Raises as Lock.acquire()."""
        self.client._check_open()
        return self._acquire_ms(_acquire_wait_ms(blocking, timeout))

    def release(self) -> None:
        """Releases every lock of the set (all of them, even when one fails: the
        first failure is raised, LockLostError when a lock was lost)."""
        self.client._check_open()
        check(lib.redmutex_multi_lock_release(self._ptr, self._owner))

    def __enter__(self) -> MultiLock:
        """Acquires all with the multi-lock's ``timeout``; raises LockTimeout."""
        start = time.monotonic()
        self.client._check_open()
        if not self._acquire_ms(self._timeout_ms):
            message = ffi.string(lib.redmutex_last_error()).decode("utf-8", "replace")
            waited = round((time.monotonic() - start) * 1000)
            raise LockTimeout(f"{message}; waited {waited} ms", LockTimeout.code)
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        """Releases all. Raises LockLostError if a lock was lost while the block
        ran, unless the block raised (then it is a note)."""
        try:
            self.release()
        except BaseException as err:
            if exc is None:
                raise
            _add_note(exc, f"redmutex: releasing the multi-lock on leaving the block also failed: {err!r}")

    def __repr__(self) -> str:
        names = [lock.name for lock in self._locks]
        return f"<redmutex.MultiLock locks={names!r} at {id(self):#x}>"
