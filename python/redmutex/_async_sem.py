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
import inspect
import itertools
import time
from typing import Any, Callable, Sequence

from ._async import AsyncClient, AsyncLock, _raise_job_error, _task_number
from ._client import LockState, Name, _acquire_wait_ms, _add_note, _to_bytes, _wait_ms
from ._errors import ClosedError, InvalidArgument, LockTimeout, NotOwnedError, OutOfMemory, check
from ._redmutex_cffi import ffi, lib
from ._sem import _new_semaphore, _permits

__all__ = ["AsyncCountDownLatch", "AsyncMultiLock", "AsyncSemaphore"]

_ETIMEDOUT: int = lib.REDMUTEX_ETIMEDOUT
_ENOTOWNER: int = lib.REDMUTEX_ENOTOWNER
_PERMIT_ID_SIZE: int = lib.REDMUTEX_PERMIT_ID_SIZE
_calls = itertools.count(1)


def _ref_of(kind: int, ptr: Any, free: Any) -> Any:
    """The pool's reference-counted hold on a C handle (freed with the last reference)."""
    ref = lib.rmpy_ref_new(kind, ptr)
    if ref == ffi.NULL:
        free(ptr)
        raise OutOfMemory("out of memory", OutOfMemory.code)
    return ffi.gc(ref, lib.rmpy_lockref_unref)


def _current_task() -> object:
    task = asyncio.current_task()
    if task is None:
        raise RuntimeError("redmutex.asyncio objects are used from a task of a running event loop")
    return task


class AsyncSemaphore:
    """A semaphore for asyncio (Redisson RPermitExpirableSemaphore wire format).

    Made by AsyncClient.semaphore(name, permits); arguments as for
    redmutex.Semaphore (``on_lost`` runs on the loop, an awaitable it
    returns as a task).
    """

    def __init__(
        self,
        client: AsyncClient,
        name: Name,
        permits: int,
        *,
        lease: float | None = None,
        timeout: float | None = None,
        fencing: bool = False,
        resize: bool = False,
        on_lost: Callable[[AsyncSemaphore, LockState, str], object] | None = None,
        max_hold: float | None = None,
        max_extensions: int | None = None,
    ) -> None:
        if not isinstance(client, AsyncClient):
            raise InvalidArgument("client must be a redmutex.asyncio.AsyncClient")
        if client._closed:
            raise ClosedError("the client was closed", ClosedError.code)
        self._timeout_ms = _wait_ms(timeout)
        self.timeout = timeout
        if on_lost is not None and not callable(on_lost):
            raise InvalidArgument("on_lost must be callable")
        ptr = _new_semaphore(client._ptr, name, permits, lease, fencing, resize, max_hold, max_extensions)
        # Jobs in flight hold references of their own: the handle outlives this object until they are done.
        self._ref = _ref_of(lib.RMPY_REF_SEMAPHORE, ptr, lib.redmutex_semaphore_free)
        self._ptr = ptr
        self._name, self._c_name, self._permits = (
            name,
            _to_bytes(name, "name", lib.REDMUTEX_NAME_MAX),
            permits,
        )
        self._fencing = bool(fencing)
        self.client = client
        self._on_lost = on_lost
        self._tasks: set[asyncio.Task[Any]] = set()
        self._pending: list[BaseException] = []
        self._by_task: dict[object, list[bytes]] = {}
        self._order: list[bytes] = []
        if on_lost is not None:
            client._listen(self, int(lib.redmutex_semaphore_id(ptr)))

    # -- bookkeeping ---------------------------------------------------------------

    def _deliver_lost(self, state: LockState, owner: str = "") -> None:
        callback = self._on_lost
        if callback is None:
            return
        try:
            result = callback(self, state, owner)
            if inspect.isawaitable(result):
                task = asyncio.ensure_future(result)
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        except BaseException as exc:  # noqa: BLE001 - kept for the semaphore's user
            if not self._pending:
                self._pending.append(exc)

    def _raise_pending(self) -> None:
        if self._pending:
            raise self._pending.pop()

    def _release_inline(self, owner: bytes | None) -> None:
        if owner is not None:
            lib.redmutex_semaphore_release(self._ptr, owner)

    def _push(self, permit: bytes) -> None:
        self._by_task.setdefault(_current_task(), []).append(permit)
        self._order.append(permit)

    def _forget(self, permit: bytes) -> None:
        if permit in self._order:
            self._order.remove(permit)
        for task, stack in list(self._by_task.items()):
            if permit in stack:
                stack.remove(permit)
                if not stack:
                    del self._by_task[task]

    def _latest(self) -> bytes | None:
        task = asyncio.current_task()
        stack = self._by_task.get(task) if task is not None else None
        if stack:
            return stack[-1]
        return self._order[-1] if self._order else None

    # -- acquire and release -----------------------------------------------------------

    async def _acquire_ms(self, permits: int, wait_ms: int) -> bytes | None:
        client = self.client
        key = (self._c_name, next(_calls))
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
            out = ffi.new("redmutex_wait **")
            buf = ffi.new("char[]", _PERMIT_ID_SIZE)
            check(lib.redmutex_semaphore_wait_new(out, buf, len(buf), self._ptr, permits))
            permit = ffi.string(buf)
            key = (self._c_name, permit)
            if not await client._acquire_waiting(self, permit, wait_ms, key, make_wait=lambda: out[0]):
                return None
        self._push(permit)
        return permit

    async def acquire(self, permits: int = 1, blocking: bool = True, timeout: float | None = -1) -> bool:
        """Takes ``permits`` permits as one hold, with threading.Semaphore.acquire's
        contract, awaited: True when taken, False when not in time. A
        cancelled task holds nothing. Raises as redmutex.Semaphore.acquire()."""
        count = _permits(permits, "permits", min(self._permits, lib.REDMUTEX_ACQUIRE_PERMITS_MAX))
        wait_ms = _acquire_wait_ms(blocking, timeout)
        self._raise_pending()
        return await self._acquire_ms(count, wait_ms) is not None

    async def release(self, permit_id: Name | None = None) -> None:
        """Gives back ``permit_id``'s permit, or the calling task's most recent
        (any task's, if it has none). Raises NotOwnedError, LockLostError."""
        if permit_id is None:
            permit = self._latest()
            if permit is None:
                raise NotOwnedError(
                    f"semaphore {self._name!r}: no permit is held through this object", NotOwnedError.code
                )
        else:
            permit = _to_bytes(permit_id, "permit_id", _PERMIT_ID_SIZE - 1)
        job = await self.client._call(lib.RMPY_OP_RELEASE, self, permit, (self._c_name, permit))
        self._forget(permit)
        _raise_job_error(job)
        self._raise_pending()

    async def __aenter__(self) -> AsyncSemaphore:
        """Takes one permit within the semaphore's ``timeout``; raises LockTimeout."""
        self._raise_pending()
        start = time.monotonic()
        if await self._acquire_ms(1, self._timeout_ms) is None:
            waited = round((time.monotonic() - start) * 1000)
            raise LockTimeout(
                f"semaphore {self._name!r}: no permit free; waited {waited} ms", LockTimeout.code
            )
        return self

    async def __aexit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        """Gives back the block's permit (LockLostError if it was lost meanwhile,
        unless the block raised: then a note)."""
        stack = self._by_task.get(asyncio.current_task())
        permit = stack[-1] if stack else None
        try:
            await self.release(permit)
        except BaseException as err:
            if exc is None:
                raise
            _add_note(
                exc,
                f"redmutex: releasing a permit of {self._name!r} on leaving the block also failed: {err!r}",
            )

    async def available(self) -> int:
        """Permits an acquisition could take now, as the servers say."""
        self._raise_pending()
        job = await self.client._call(lib.RMPY_OP_SEM_AVAILABLE, self)
        _raise_job_error(job)
        return int(job.out)

    # -- local state (no I/O) ---------------------------------------------------------

    @property
    def name(self) -> Name:
        """The semaphore's name, as given."""
        return self._name

    @property
    def permits(self) -> int:
        """The capacity this semaphore was made with."""
        return self._permits

    @property
    def permit_id(self) -> str | None:
        """The calling task's most recent permit id (any task's, if it has none), or None."""
        permit = self._latest()
        return None if permit is None else permit.decode("ascii")

    @property
    def held(self) -> list[str]:
        """The ids of the permits held through this object, oldest first."""
        return [p.decode("ascii") for p in self._order]

    @property
    def state(self) -> LockState:
        """The state of ``permit_id``'s permit (UNLOCKED when none is held)."""
        permit = self._latest()
        if permit is None:
            return LockState.UNLOCKED
        out = ffi.new("redmutex_state *")
        check(lib.redmutex_semaphore_state(out, self._ptr, permit))
        return LockState(out[0])

    @property
    def fence(self) -> int | None:
        """The fencing token of ``permit_id``'s permit, or None."""
        permit = self._latest()
        if not self._fencing or permit is None:
            return None
        out = ffi.new("int64_t *")
        rc = lib.redmutex_semaphore_fence(out, self._ptr, permit)
        if rc == _ENOTOWNER:
            return None
        check(rc)
        return int(out[0])


class AsyncCountDownLatch:
    """A count-down latch for asyncio (Redisson RCountDownLatch wire format);
    see redmutex.CountDownLatch. ``count`` is a coroutine method here."""

    def __init__(self, client: AsyncClient, name: Name) -> None:
        if not isinstance(client, AsyncClient):
            raise InvalidArgument("client must be a redmutex.asyncio.AsyncClient")
        if client._closed:
            raise ClosedError("the client was closed", ClosedError.code)
        self._name = name
        self._c_name = _to_bytes(name, "latch name", lib.REDMUTEX_NAME_MAX)
        out = ffi.new("redmutex_latch **")
        check(lib.redmutex_latch_new(out, client._ptr, self._c_name))
        self._ptr = out[0]
        self._ref = _ref_of(lib.RMPY_REF_LATCH, out[0], lib.redmutex_latch_free)
        self.client = client

    def _release_inline(self, owner: bytes | None) -> None:
        del owner  # a latch holds nothing

    @property
    def name(self) -> Name:
        """The latch's name, as given."""
        return self._name

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
        if isinstance(count, bool) or not isinstance(count, int) or count < 1 or count > 2**62:
            raise InvalidArgument(f"count must be an int >= 1, not {count!r}")
        return bool(await self._job(lib.RMPY_OP_LATCH_TRY_SET, count))

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

        def make_wait() -> Any:
            out = ffi.new("redmutex_wait **")
            check(lib.redmutex_latch_wait_new(out, self._ptr))
            return out[0]

        return await self.client._acquire_waiting(
            self, None, wait_ms, (self._c_name, next(_calls)), make_wait=make_wait
        )


class AsyncMultiLock:
    """All of several locks or none, for asyncio (RedissonMultiLock's semantics);
    see redmutex.MultiLock. Made by AsyncClient.multi_lock([lock, ...]) from
    lock objects of the client. Owned by the calling task unless ``owner=``
    is given (or the locks share an explicit owner)."""

    def __init__(
        self,
        client: AsyncClient,
        locks: Sequence[AsyncLock],
        *,
        timeout: float | None = None,
        owner: Name | None = None,
    ) -> None:
        if not isinstance(client, AsyncClient):
            raise InvalidArgument("client must be a redmutex.asyncio.AsyncClient")
        if client._closed:
            raise ClosedError("the client was closed", ClosedError.code)
        if isinstance(locks, (str, bytes)) or not isinstance(locks, Sequence) or not locks:
            raise InvalidArgument("multi_lock() takes a non-empty list of lock objects")
        for lock in locks:
            if not isinstance(lock, AsyncLock):
                raise InvalidArgument(f"multi_lock() takes lock objects, not {type(lock).__name__}")
            if lock.client is not client:
                raise InvalidArgument("the locks of a multi-lock must belong to its client")
        if owner is not None:
            self._owner: bytes | None = _to_bytes(owner, "owner", lib.REDMUTEX_OWNER_MAX)
        else:
            owners = {lock._owner for lock in locks}
            if len(owners) > 1:
                raise InvalidArgument("the locks of a multi-lock have different owners; pass owner=")
            self._owner = owners.pop()
        self._timeout_ms = _wait_ms(timeout)
        self.timeout = timeout
        self.client = client
        self._locks = list(locks)
        array = ffi.new("redmutex_lock *[]", [lock._ptr for lock in self._locks])
        out = ffi.new("redmutex_multi_lock **")
        check(lib.redmutex_multi_lock_new(out, array, len(self._locks)))
        self._ptr = out[0]
        self._ref = _ref_of(lib.RMPY_REF_MULTI, out[0], lib.redmutex_multi_lock_free)
        self._names = b"\0".join(lock._c_name for lock in self._locks)

    def _release_inline(self, owner: bytes | None) -> None:
        lib.redmutex_multi_lock_release(self._ptr, ffi.NULL if owner is None else owner)

    def _owner_of_call(self) -> bytes:
        if self._owner is not None:
            return self._owner
        return f"{self.client.id}:task-{_task_number()}".encode("ascii")

    @property
    def locks(self) -> list[AsyncLock]:
        """The lock objects of the set, as given."""
        return list(self._locks)

    async def _acquire_ms(self, owner: bytes, wait_ms: int) -> bool:
        client = self.client
        key = (self._names, owner)
        if wait_ms == 0:
            await client._after_cleanups(key)
            job = client._new_job(lib.RMPY_OP_ACQUIRE_NOW, self, owner)
            try:
                await client._submit(job, key)
            except asyncio.CancelledError:
                if not client._abandon(job, key) and job.rc == 0:
                    client._run_detached(client._new_job(lib.RMPY_OP_RELEASE, self, owner), self, owner, key)
                raise
            if job.rc == _ETIMEDOUT:
                return False
            _raise_job_error(job)
            return True

        def make_wait() -> Any:
            out = ffi.new("redmutex_wait **")
            check(lib.redmutex_multi_lock_wait_new(out, self._ptr, owner))
            return out[0]

        return await client._acquire_waiting(self, owner, wait_ms, key, make_wait=make_wait)

    def acquire(self, blocking: bool = True, timeout: float | None = -1) -> Any:
        """Acquires every lock or none, awaited (threading.Lock.acquire's contract),
        for the calling task. A cancelled task holds none of them."""
        wait_ms = _acquire_wait_ms(blocking, timeout)
        owner = self._owner_of_call()
        return self._acquire_ms(owner, wait_ms)

    def release(self) -> Any:
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
        try:
            await self.release()
        except BaseException as err:
            if exc is None:
                raise
            _add_note(exc, f"redmutex: releasing the multi-lock on leaving the block also failed: {err!r}")
