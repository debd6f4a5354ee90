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
from typing import Any, Callable

from . import _events, _signals
from ._args import _WAIT_FOREVER, Name, _acquire_wait_ms, _add_note, _to_ms, _wait_ms
from ._base import LockState, _exit_release
from ._client import Client, Lock
from ._errors import LockLostError, LockTimeout, NotOwnedError, check
from ._redmutex_cffi import ffi, lib
from ._sembase import LatchBase, MultiLockBase, SemaphoreBase

__all__ = ["CountDownLatch", "MultiLock", "Semaphore"]

_ETIMEDOUT: int = lib.REDMUTEX_ETIMEDOUT
_EINTR: int = lib.REDMUTEX_EINTR
_PERMIT_ID_SIZE: int = lib.REDMUTEX_PERMIT_ID_SIZE


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
        rc = int(rc_out[0])
        if rc != _EINTR:
            return rc
        _signals.run_pending_handlers()
        if deadline is not None:
            wait_ms = max(0, math.ceil((deadline - time.monotonic()) * 1000))


class Semaphore(SemaphoreBase[Client]):
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

    _client_class = Client
    _client_what = "redmutex.Client"
    _repr_name = "redmutex.Semaphore"

    def _setup(self, handle: Any) -> None:
        self._ptr = ffi.gc(handle, lib.redmutex_semaphore_free)

    def _listen(self) -> None:
        _events.listen(int(lib.redmutex_semaphore_id(self._ptr)), self)
        self.client._c.pump_events()

    def _caller(self) -> object:
        return threading.get_ident()

    def _run_on_lost(self, state: int, owner: str) -> None:
        """Runs on_lost on the client's event thread (_events.py)."""
        self._call_on_lost(LockState(state), owner)

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
        count = self._count_arg(permits)
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
        if self._acquire_ms(1, self._timeout_ms) is None:
            raise self._timeout_error(start)
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        """Gives back the block's permit. Raises LockLostError if it was lost
        while the block ran, unless the block raised (then it is a note)."""
        with _exit_release(exc, self._note_exit_failure):
            self.release(self._block_permit())

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


class CountDownLatch(LatchBase[Client]):
    """A count that reaches zero once (Redisson's RCountDownLatch wire format).

    Made by Client.latch(name). ``try_set_count(n)`` sets the count if the
    latch has none; ``count_down()`` takes one off (at zero every waiter goes
    on); ``wait(timeout)`` waits for zero; ``count`` is the count now. A
    Java service counting down the same latch releases the waiters here.
    """

    _client_class = Client
    _client_what = "redmutex.Client"
    _repr_name = "redmutex.CountDownLatch"

    def _setup(self, handle: Any) -> None:
        self._ptr = ffi.gc(handle, lib.redmutex_latch_free)

    def try_set_count(self, count: int) -> bool:
        """Sets the count (an int >= 1) when the latch has none; True when set,
        False when a count was there already (left as it is)."""
        count = self._count_arg(count)
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


class MultiLock(MultiLockBase[Client, Lock]):
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

    _client_class = Client
    _client_what = "redmutex.Client"
    _repr_name = "redmutex.MultiLock"
    _lock_class = Lock

    def _setup(self, handle: Any) -> None:
        self._ptr = ffi.gc(handle, lib.redmutex_multi_lock_free)
        # The owner as the C calls take it (NULL: each lock's default owner).
        self._c_owner: Any = ffi.NULL if self._owner is None else self._owner

    def _acquire_ms(self, wait_ms: int) -> bool:
        client_ptr, ptr, owner = self.client._ptr, self._ptr, self._c_owner

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
        check(lib.redmutex_multi_lock_release(self._ptr, self._c_owner))

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
        with _exit_release(exc, self._note_exit_failure):
            self.release()
