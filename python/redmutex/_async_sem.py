"""Semaphores, count-down latches and multi-locks for asyncio (see redmutex.asyncio).

As for AsyncLock: a waiting task holds no thread (the core's pollable waits:
a semaphore's on its channel, a latch's on its channel, a multi-lock's on the
channel of the lock that was busy), the round trips run on the client's
worker pool, and a cancelled task holds nothing (what an attempt in flight
wins is given back by the pool).

A semaphore's permits are owned by nobody: ``async with sem:`` gives back the
permit its block took; ``release()`` gives back the calling task's most
recent permit, or the most recent of any task. A multi-lock's owner is the
calling task (``"<client id>:task-<n>"``, as for AsyncRLock) unless
``owner=`` is given.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any, Coroutine

from ._args import Name, _acquire_wait_ms, _wait_ms
from ._async import AsyncClient, AsyncLock, _OwnerKey, _raise_job_error, _task_number
from ._base import LockState, _exit_release
from ._errors import LockTimeout, OutOfMemory, check
from ._redmutex_cffi import ffi, lib
from ._sembase import LatchBase, MultiLockBase, SemaphoreBase

__all__ = ["AsyncCountDownLatch", "AsyncMultiLock", "AsyncSemaphore"]

_ETIMEDOUT: int = lib.REDMUTEX_ETIMEDOUT
_PERMIT_ID_SIZE: int = lib.REDMUTEX_PERMIT_ID_SIZE
_calls = itertools.count(1)


def _ref_of(kind: int, ptr: Any, free: Any) -> Any:
    """The pool's reference-counted hold on a C handle (freed with the last reference)."""
    ref = lib.rmpy_ref_new(kind, ptr)
    if ref == ffi.NULL:
        free(ptr)
        raise OutOfMemory("out of memory", OutOfMemory.code)
    return ffi.gc(ref, lib.rmpy_lockref_unref)


class AsyncSemaphore(SemaphoreBase[AsyncClient]):
    """A semaphore for asyncio (Redisson RPermitExpirableSemaphore wire format).

    Made by AsyncClient.semaphore(name, permits); arguments as for
    redmutex.Semaphore (``on_lost`` runs on the loop, an awaitable it
    returns as a task).
    """

    _client_class = AsyncClient
    _client_what = "redmutex.asyncio.AsyncClient"
    _repr_name = "redmutex.asyncio.AsyncSemaphore"

    def _setup(self, handle: Any) -> None:
        # Jobs in flight hold references of their own: the handle outlives this object until they are done.
        self._ref = _ref_of(lib.RMPY_REF_SEMAPHORE, handle, lib.redmutex_semaphore_free)
        self._ptr = handle

    def _listen(self) -> None:
        self.client._listen(self, int(lib.redmutex_semaphore_id(self._ptr)))

    def _caller(self) -> object:
        return asyncio.current_task()

    def _deliver_lost(self, state: LockState, owner: str = "") -> None:
        """Runs on_lost on the loop; an awaitable it returns runs as a task."""
        self._run_on_loop(self._call_on_lost(state, owner))

    def _release_inline(self, owner: bytes | None) -> None:
        if owner is not None:
            lib.redmutex_semaphore_release(self._ptr, owner)

    # -- acquire and release -----------------------------------------------------------

    async def _acquire_ms(self, permits: int, wait_ms: int) -> bytes | None:
        client = self.client
        key: _OwnerKey = (self._c_name, next(_calls))
        if wait_ms == 0:
            job = client._new_job(lib.RMPY_OP_ACQUIRE_NOW, self)
            job.ms = permits
            try:
                await client._submit(job, key)
            except asyncio.CancelledError:
                if not client._abandon(job, key) and job.rc == 0:
                    owner = ffi.string(job.owner)
                    client._run_detached(client._new_job(lib.RMPY_OP_RELEASE, self, owner), self, owner, key)
                raise
            if job.rc == _ETIMEDOUT:
                return None
            _raise_job_error(job)
            permit = ffi.string(job.owner)
        else:
            permits_made: list[bytes] = []  # each wait chooses its permit id

            def make_wait() -> tuple[Any, bytes, Any]:
                out = ffi.new("redmutex_wait **")
                buf = ffi.new("char[]", _PERMIT_ID_SIZE)
                check(lib.redmutex_semaphore_wait_new(out, buf, len(buf), self._ptr, permits))
                permits_made.append(ffi.string(buf))
                return out[0], permits_made[-1], (self._c_name, permits_made[-1])

            # A new permit id has no clean-up of its own to wait for.
            if not await client._acquire_waiting(
                self, None, wait_ms, (self._c_name, b""), make_wait=make_wait
            ):
                return None
            permit = permits_made[-1]
        self._push(permit)
        return permit

    async def acquire(self, permits: int = 1, blocking: bool = True, timeout: float | None = -1) -> bool:
        """Takes ``permits`` permits as one hold, with threading.Semaphore.acquire's
        contract, awaited: True when taken, False when not in time. A
        cancelled task holds nothing. Raises as redmutex.Semaphore.acquire()."""
        count = self._count_arg(permits)
        wait_ms = _acquire_wait_ms(blocking, timeout)
        self._raise_pending()
        return await self._acquire_ms(count, wait_ms) is not None

    async def release(self, permit_id: Name | None = None) -> None:
        """Gives back ``permit_id``'s permit, or the calling task's most recent
        (any task's, if it has none). Raises NotOwnedError, LockLostError."""
        permit = self._permit_arg(permit_id)
        job = await self.client._call(lib.RMPY_OP_RELEASE, self, permit, (self._c_name, permit))
        self._forget(permit)
        _raise_job_error(job)
        self._raise_pending()

    async def __aenter__(self) -> AsyncSemaphore:
        """Takes one permit within the semaphore's ``timeout``; raises LockTimeout."""
        self._raise_pending()
        start = time.monotonic()
        if await self._acquire_ms(1, self._timeout_ms) is None:
            raise self._timeout_error(start)
        return self

    async def __aexit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        """Gives back the block's permit (LockLostError if it was lost meanwhile,
        unless the block raised: then a note)."""
        with _exit_release(exc, self._note_exit_failure):
            await self.release(self._block_permit())

    async def available(self) -> int:
        """Permits an acquisition could take now, as the servers say."""
        self._raise_pending()
        job = await self.client._call(lib.RMPY_OP_SEM_AVAILABLE, self)
        _raise_job_error(job)
        return int(job.out)


class AsyncCountDownLatch(LatchBase[AsyncClient]):
    """A count-down latch for asyncio (Redisson RCountDownLatch wire format);
    see redmutex.CountDownLatch. ``count`` is a coroutine method here."""

    _client_class = AsyncClient
    _client_what = "redmutex.asyncio.AsyncClient"
    _repr_name = "redmutex.asyncio.AsyncCountDownLatch"

    def _setup(self, handle: Any) -> None:
        self._ptr = handle
        self._ref = _ref_of(lib.RMPY_REF_LATCH, handle, lib.redmutex_latch_free)

    def _release_inline(self, owner: bytes | None) -> None:
        del owner  # a latch holds nothing

    async def _job(self, op: int, ms: int = 0) -> int:
        job = self.client._new_job(op, self)
        job.ms = ms
        try:
            await self.client._submit(job)
        except asyncio.CancelledError:
            self.client._abandon(job)
            raise
        _raise_job_error(job)
        return int(job.out)

    async def try_set_count(self, count: int) -> bool:
        """Sets the count (>= 1) if the latch has none: True when set."""
        return bool(await self._job(lib.RMPY_OP_LATCH_TRY_SET, self._count_arg(count)))

    async def count_down(self) -> None:
        """Counts down by one; at zero every waiter goes on."""
        await self._job(lib.RMPY_OP_LATCH_COUNT_DOWN)

    async def count(self) -> int:
        """The count now (0 when open or never set)."""
        return await self._job(lib.RMPY_OP_LATCH_COUNT)

    async def wait(self, timeout: float | None = None) -> bool:
        """True once the count is zero, False when ``timeout`` seconds (None:
        forever) ran out first; the task holds no thread meanwhile."""
        wait_ms = _wait_ms(timeout)

        key = (self._c_name, next(_calls))

        def make_wait() -> tuple[Any, None, Any]:
            out = ffi.new("redmutex_wait **")
            check(lib.redmutex_latch_wait_new(out, self._ptr))
            return out[0], None, key

        return await self.client._acquire_waiting(self, None, wait_ms, key, make_wait=make_wait)


class AsyncMultiLock(MultiLockBase[AsyncClient, AsyncLock]):
    """All of several locks or none, for asyncio (RedissonMultiLock's semantics);
    see redmutex.MultiLock. Made by AsyncClient.multi_lock([lock, ...]) from
    lock objects of the client. Owned by the calling task unless ``owner=``
    is given (or the locks share an explicit owner)."""

    _client_class = AsyncClient
    _client_what = "redmutex.asyncio.AsyncClient"
    _repr_name = "redmutex.asyncio.AsyncMultiLock"
    _lock_class = AsyncLock

    def _setup(self, handle: Any) -> None:
        self._ptr = handle
        self._ref = _ref_of(lib.RMPY_REF_MULTI, handle, lib.redmutex_multi_lock_free)
        self._names = b"\0".join(lock._c_name for lock in self._locks)

    def _release_inline(self, owner: bytes | None) -> None:
        lib.redmutex_multi_lock_release(self._ptr, ffi.NULL if owner is None else owner)

    def _owner_of_call(self) -> bytes:
        if self._owner is not None:
            return self._owner
        return f"{self.client.id}:task-{_task_number()}".encode("ascii")

    async def _acquire_ms(self, owner: bytes, wait_ms: int) -> bool:
        client = self.client
        key = (self._names, owner)
        if wait_ms == 0:
            return await client._acquire_now(self, owner, key)

        def make_wait() -> tuple[Any, bytes, Any]:
            out = ffi.new("redmutex_wait **")
            check(lib.redmutex_multi_lock_wait_new(out, self._ptr, owner))
            return out[0], owner, key

        return await client._acquire_waiting(self, owner, wait_ms, key, make_wait=make_wait)

    def acquire(self, blocking: bool = True, timeout: float | None = -1) -> Coroutine[Any, Any, bool]:
        """Acquires every lock or none, awaited (threading.Lock.acquire's contract),
        for the calling task. A cancelled task holds none of them."""
        wait_ms = _acquire_wait_ms(blocking, timeout)
        owner = self._owner_of_call()
        return self._acquire_ms(owner, wait_ms)

    def release(self) -> Coroutine[Any, Any, None]:
        """Releases every lock of the set (the first failure is raised); for the calling task."""
        return self._release(self._owner_of_call())

    async def _release(self, owner: bytes) -> None:
        job = await self.client._call(lib.RMPY_OP_RELEASE, self, owner, (self._names, owner))
        _raise_job_error(job)

    async def __aenter__(self) -> AsyncMultiLock:
        """Acquires all with the multi-lock's ``timeout``; raises LockTimeout."""
        start = time.monotonic()
        if not await self._acquire_ms(self._owner_of_call(), self._timeout_ms):
            waited = round((time.monotonic() - start) * 1000)
            raise LockTimeout(
                f"multi-lock: a lock is held by another owner; waited {waited} ms", LockTimeout.code
            )
        return self

    async def __aexit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        """Releases all (LockLostError if one was lost meanwhile, unless the block raised)."""
        with _exit_release(exc, self._note_exit_failure):
            await self.release()
