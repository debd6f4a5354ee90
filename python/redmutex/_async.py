"""redmutex for asyncio: AsyncClient, AsyncLock, AsyncRLock (see redmutex.asyncio).

How a task waits without a thread, and why the loop never blocks:

* Round trips run on a small fixed pool of C worker threads (_aio.c). The
  loop submits a job, awaits a future, and learns of finished jobs through
  the pool's eventfd, registered with ``loop.add_reader``. The workers never
  take the GIL.
* A waiting acquire is a pollable wait of the core (``redmutex_wait_*``):
  queued on the lock's release channel like a blocked acquire, due again at
  the holder's lease end or the capped backoff. The client's wait fd (one
  per client, whatever the number of waits) is registered with the loop; a
  ready wait wakes its task, which makes one attempt on the pool. A task
  waiting for a lock holds no thread and no descriptor.
* Cancellation ends a wait at once. An attempt in flight is abandoned: the
  worker releases what it won for nobody and frees the wait, whether the
  loop still runs or not. Such clean-ups run on the pool after the task has
  moved on; the next acquisition of the same owner and lock waits for them
  first (_after_cleanups), so it never races what it cancelled: it does not
  take a hand-off the cancelled wait is giving back for a hold of its own,
  and no release of the cancelled attempt's win lands under it.
* A loop that is closed with tasks still waiting cannot run them again: the
  next use of the client (on another loop, or its close) ends their waits
  and gives back what their attempts won (_reap).
* Lost-lock news comes from the client's event fd, also on the loop:
  ``on_lost`` runs on the loop (a coroutine function's result is scheduled
  as a task).

Ownership is per task: the default owner of an AsyncRLock is the task that
calls (and awaits) acquire() ("<client id>:task-<n>"), so two tasks on one
thread exclude each other and one task may re-enter. The owner is taken when
the method is called, not when its coroutine first runs: asyncio.wait_for()
(before 3.12) and shield() run the coroutine in a task of their own, and the
hold must still be the caller's. An AsyncLock (plain) is owned by the lock
object, like asyncio.Lock. ``owner=`` names an owner explicitly, as in the
sync API.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import itertools
import os
import time
import weakref
from typing import Any, Awaitable, Callable, Coroutine, Protocol, Sequence, Tuple, TypeVar, Union, cast

from . import _stats
from ._args import _WAIT_FOREVER, Name, _acquire_wait_ms, _to_ms
from ._base import ClientBase, LockBase, LockInfo, LockState, ReadWriteBase, _exit_release, _inspect
from ._client import Client
from ._errors import ClosedError, InvalidArgument, OutOfMemory, check, error_for
from ._redmutex_cffi import ffi, lib

__all__ = ["AsyncClient", "AsyncLock", "AsyncRLock"]

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])
OnLost = Callable[["AsyncLock", LockState], object]

_ETIMEDOUT: int = lib.REDMUTEX_ETIMEDOUT
_EINTR: int = lib.REDMUTEX_EINTR
_DONE_BATCH = 64

# ---- task owners -------------------------------------------------------------

_task_numbers: weakref.WeakKeyDictionary[asyncio.Task[Any], int] = weakref.WeakKeyDictionary()
_task_counter = itertools.count(1)


def _task_number() -> int:
    """A process-unique number for the running task (never reused)."""
    task = asyncio.current_task()
    if task is None:
        raise RuntimeError("redmutex.asyncio locks are used from a task of a running event loop")
    number = _task_numbers.get(task)
    if number is None:
        number = _task_numbers[task] = next(_task_counter)
    return number


def _raise_job_error(job: Any) -> None:
    if job.rc < 0:
        raise error_for(job.rc, ffi.string(job.msg).decode("utf-8", "replace"))


def _expire(fut: asyncio.Future[bool]) -> None:
    if not fut.done():
        fut.set_result(False)


def _expire_none(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


# Who a lock call acts for, on one lock name: (name, owner id) or (name, the
# lock object's id) for a plain lock's anonymous owner. Clean-ups of
# cancelled calls are tracked by it (AsyncClient._settling).
_OwnerKey = Tuple[bytes, Union[bytes, int]]


class _Later:
    """The owner of a call made outside any task: taken when its coroutine runs."""


_LATER = _Later()
# Whom a lock call acts for, as taken when the call was made.
_CallOwner = Union[bytes, None, _Later]


class _Target(Protocol):
    """What a job of the pool acts on: a lock, a semaphore, a latch or a
    multi-lock of this API (its C handle and the pool's reference to it)."""

    _ptr: Any
    _ref: Any

    def _release_inline(self, owner: bytes | None) -> None:
        """Gives back `owner`'s hold at once, once the pool is gone (the client is closed)."""


class _Pending:
    """A job the pool has: the job (kept alive here), the future its task
    awaits (None: nobody), the futures of acquisitions that wait for it to
    end (it is a clean-up, see AsyncClient._settling), and its owner key."""

    __slots__ = ("future", "job", "key", "waiters")

    def __init__(self, job: Any, future: asyncio.Future[None] | None, key: _OwnerKey | None) -> None:
        self.job = job
        self.future = future
        self.key = key
        self.waiters: list[asyncio.Future[None]] = []


class _Readiness:
    """One pollable wait of a task: what the client's wait fd said about it,
    the attempt in flight, and whether the wait was freed (once only)."""

    __slots__ = ("c_wait", "freed", "future", "job", "key", "lock", "owner", "ready", "wait_id")

    def __init__(self, wait: Any, lock: _Target, owner: bytes | None, key: _OwnerKey) -> None:
        self.ready = False
        self.future: asyncio.Future[bool] | None = None
        self.c_wait = wait  # the redmutex_wait
        self.wait_id = int(lib.redmutex_wait_id(wait))  # its key in AsyncClient._waits
        self.lock = lock
        self.owner = owner
        self.key = key
        self.job: Any = None  # the attempt in flight, if any
        self.freed = False

    async def wait(self, loop: asyncio.AbstractEventLoop, timeout: float | None) -> bool:
        """True once the wait is ready (at once if it became ready meanwhile), False on timeout."""
        if not self.ready:
            fut = self.future = loop.create_future()
            timer = None if timeout is None else loop.call_later(timeout, _expire, fut)
            try:
                if not await fut:
                    return False
            finally:
                self.future = None
                if timer is not None:
                    timer.cancel()
        self.ready = False
        return True


# Clients whose close is under way stay referenced until it has finished.
_closing: set[AsyncClient] = set()


class AsyncClient(ClientBase):
    """A redmutex client for asyncio: ``await lock.acquire()``, ``async with lock:``.

    ``url_or_list`` and the keyword options are those of redmutex.Client
    (one URL, or N for Redlock; ``watchdog_lease``, ``command_timeout``,
    ``wait_backoff_cap``...). ``pool_threads`` is the number of worker
    threads that make round trips for all tasks of the client (default 4):
    a round trip never blocks the event loop, and a waiting task holds no
    thread at all.

    A client is bound to the event loop it is first used on. Close it with
    ``await client.close()`` or ``async with AsyncClient(...) as client:``;
    a client that is dropped without closing is closed in the background
    once its loop has let go of it, and at interpreter exit.
    """

    _repr_name = "redmutex.asyncio.AsyncClient"

    def __init__(self, url_or_list: Name | Sequence[Name], *, pool_threads: int = 4, **options: Any) -> None:
        if isinstance(pool_threads, bool) or not isinstance(pool_threads, int) or not 1 <= pool_threads <= 64:
            raise InvalidArgument(f"pool_threads must be an int from 1 to 64, not {pool_threads!r}")
        self._client = Client(url_or_list, **options)
        self._ptr = self._client._ptr
        pool = lib.rmpy_pool_new(pool_threads)
        if pool == ffi.NULL:
            raise OSError(
                ffi.errno, f"cannot start the worker threads of redmutex.asyncio (errno {ffi.errno})"
            )
        self._pool = ffi.gc(pool, lib.rmpy_pool_stop)
        self._pool_fd: int = lib.rmpy_pool_fd(pool)
        self._wait_fd: int = check(lib.redmutex_client_wait_fd(self._ptr))
        self._event_fd: int = check(lib.redmutex_client_event_fd(self._ptr))
        self._pool_threads = pool_threads
        self._pid = os.getpid()
        self._loop: asyncio.AbstractEventLoop | None = None
        # Jobs the pool has, by address.
        self._pending: dict[int, _Pending] = {}
        # Clean-ups still running (abandoned or detached jobs), by the owner key they act for.
        self._settling: dict[_OwnerKey, set[int]] = {}
        self._idle: asyncio.Future[None] | None = None  # set when _pending empties (close)
        self._waits: dict[int, _Readiness] = {}  # by redmutex_wait_id
        self._listeners: dict[int, weakref.ReferenceType[AsyncLock]] = {}  # locks with on_lost, by lock id
        self._done_buf = ffi.new("rmpy_job *[]", _DONE_BATCH)
        self._id_buf = ffi.new("uint64_t *")
        self._state_buf = ffi.new("redmutex_state *")
        self._owner_buf = ffi.new("char[]", lib.REDMUTEX_OWNER_MAX + 1)
        self._closed = False
        self._close_task: asyncio.Task[None] | None = None
        self._pool_gone = False

    @classmethod
    async def create(cls, url_or_list: Name | Sequence[Name], **kwargs: Any) -> AsyncClient:
        """Makes a client without blocking the running loop. The constructor
        itself does no I/O with one URL; with several (Redlock) it connects to
        every server to refuse duplicates, for up to ``connect_timeout``, so
        from a coroutine prefer ``await AsyncClient.create(urls)``."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, functools.partial(cls, url_or_list, **kwargs))

    # -- properties ---------------------------------------------------------

    @property
    def id(self) -> str:
        """The client's id (a random UUID): the first part of every task owner."""
        return self._client.id

    @property
    def server_count(self) -> int:
        """How many servers (N) the client uses; N > 1 means Redlock."""
        return self._client.server_count

    def stats(self) -> dict[str, Any]:
        """What the client has counted: as redmutex.Client.stats() (no I/O, never blocks)."""
        return self._client.stats()

    @property
    def pool_threads(self) -> int:
        """The number of worker threads making round trips."""
        return self._pool_threads

    # Per-name observers (redmutex.prometheus, redmutex.otel) live on the blocking client.

    @property
    def _observers(self) -> tuple[_stats.NameObservations, ...]:
        return self._client._observers

    def _add_observer(self, observer: _stats.NameObservations) -> None:
        self._client._add_observer(observer)

    def _remove_observer(self, observer: _stats.NameObservations) -> None:
        self._client._remove_observer(observer)

    def task_owner(self) -> str:
        """The running task's default owner id of reentrant locks, ``"<client id>:task-<n>"``."""
        self._check_open()
        return f"{self.id}:task-{_task_number()}"

    # -- locks ----------------------------------------------------------------

    def lock(self, name: Name, **kwargs: Any) -> AsyncLock:
        """A plain, non-reentrant lock named ``name`` (redis-py wire format).

        Keyword arguments as for redmutex.Client.lock(): ``lease``,
        ``timeout`` (of ``async with``), ``fencing``, ``owner``, ``on_lost``,
        ``max_hold``, ``max_extensions``. Sends nothing.
        """
        return AsyncLock(self, name, **kwargs)

    def rlock(self, name: Name, **kwargs: Any) -> AsyncRLock:
        """A reentrant lock named ``name`` (Redisson RLock wire format), owned by
        the running task unless ``owner=`` is given. Arguments as for lock()."""
        return AsyncRLock(self, name, **kwargs)

    def fair_lock(self, name: Name, **kwargs: Any) -> AsyncFairLock:
        """A reentrant, first-come-first-served lock named ``name`` (Redisson
        RFairLock wire format), owned by the running task unless ``owner=``
        is given: waiting tasks, threads, processes and Redisson clients are
        served in the order they asked. Arguments as for lock()."""
        return AsyncFairLock(self, name, **kwargs)

    def rwlock(self, name: Name, **kwargs: Any) -> AsyncReadWriteLock:
        """A read-write lock named ``name`` (Redisson RReadWriteLock wire
        format): ``async with rw.read:`` shared, ``async with rw.write:``
        exclusive, both owned by the running task unless ``owner=`` is given.
        Arguments as for lock(); they apply to both sides."""
        return AsyncReadWriteLock(self, name, **kwargs)

    def semaphore(self, name: Name, permits: int, **kwargs: Any) -> Any:
        """A semaphore named ``name`` with ``permits`` permits (Redisson
        RPermitExpirableSemaphore wire format): ``async with sem:``. Keyword
        arguments as for redmutex.Client.semaphore(). Sends nothing."""
        from ._async_sem import AsyncSemaphore

        return AsyncSemaphore(self, name, permits, **kwargs)

    def latch(self, name: Name) -> Any:
        """A count-down latch named ``name`` (Redisson RCountDownLatch wire format)."""
        from ._async_sem import AsyncCountDownLatch

        return AsyncCountDownLatch(self, name)

    def multi_lock(self, locks: Sequence[AsyncLock], **kwargs: Any) -> Any:
        """All of ``locks`` (lock objects of this client) or none:
        ``async with client.multi_lock([a, b]):``, owned by the calling task
        unless ``owner=`` is given; ``timeout=`` for ``async with``."""
        from ._async_sem import AsyncMultiLock

        return AsyncMultiLock(self, locks, **kwargs)

    def synchronized(self, name: Name, *, reentrant: bool = False, **lock_kwargs: Any) -> Callable[[F], F]:
        """Decorator for coroutine functions: every call runs under the lock ``name``.

        ``lock_kwargs`` are those of lock(); with ``timeout`` a call raises
        LockTimeout when the lock cannot be had in time. ``reentrant=True``
        uses rlock(), owned by the calling task, so the function may await
        itself. Each call uses a fresh lock object. Plain functions are
        refused (TypeError): use redmutex.Client.synchronized for them.
        """
        make = self.rlock if reentrant else self.lock
        make(name, **lock_kwargs)  # validate the arguments now, not at the first call

        def decorator(fn: F) -> F:
            if not inspect.iscoroutinefunction(fn):
                raise TypeError("AsyncClient.synchronized() wraps coroutine functions (async def)")

            @functools.wraps(fn)
            async def wrapper(*args: Any, **kwargs: Any) -> Any:
                async with make(name, **lock_kwargs):
                    return await fn(*args, **kwargs)

            return cast(F, wrapper)

        return decorator

    # -- lifetime -------------------------------------------------------------

    async def close(self) -> None:
        """Closes the client: releases the locks still held through it (unless
        ``leave_locks_on_close``), ends every wait (those tasks raise
        ClosedError), and stops the worker threads once the calls in
        progress have finished. Bounded by ``shutdown_timeout``. Idempotent;
        cancelling the caller does not stop the close."""
        if self._pool_gone:
            return
        if self._close_task is None:
            loop = self._bind()
            self._closed = True
            _closing.add(self)
            self._close_task = loop.create_task(self._close())
        await asyncio.shield(self._close_task)

    async def _close(self) -> None:
        try:
            job = self._new_job(lib.RMPY_OP_CLOSE)
            job.client = self._ptr
            await self._submit(job)
            self._client._closed_by_other()
            _raise_job_error(job)
        finally:
            if self._pending:
                # Calls in progress end soon: the core answers them with ClosedError.
                self._idle = cast(asyncio.AbstractEventLoop, self._loop).create_future()
                await self._idle
            self._unbind()
            self._pool_gone = True
            ffi.release(self._pool)  # the workers exit; nothing is pending
            _closing.discard(self)

    async def __aenter__(self) -> AsyncClient:
        """Returns the client itself."""
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        """Closes the client (see close())."""
        await self.close()

    # -- the loop ---------------------------------------------------------------

    def _bind(self) -> asyncio.AbstractEventLoop:
        """The running loop, with the client's descriptors registered on it."""
        loop = asyncio.get_running_loop()
        if loop is self._loop:
            return loop
        if self._pool_gone or (self._closed and self._close_task is None):
            raise ClosedError("the client was closed", ClosedError.code)
        if os.getpid() != self._pid:
            # The worker threads stayed in the parent (and may have held the pool's mutex at fork).
            raise RuntimeError("this AsyncClient was made in the parent process; make a new one after fork()")
        if self._loop is not None and not self._loop.is_closed():
            raise RuntimeError("this AsyncClient is bound to another event loop; make one client per loop")
        if self._loop is not None:
            self._reap()
        self._loop = loop
        loop.add_reader(self._pool_fd, self._on_jobs_done)
        loop.add_reader(self._wait_fd, self._on_waits_ready)
        loop.add_reader(self._event_fd, self._on_events)
        self._on_jobs_done()  # results that came while no loop listened
        return loop

    def _reap(self) -> None:
        """The loop the client was bound to is closed: its tasks never run
        again. Their waits are freed and their attempts abandoned (the pool
        releases what they won); nothing of theirs stays held or queued."""
        for readiness in list(self._waits.values()):
            readiness.future = None
            self._give_up_wait(readiness)
        self._waits.clear()
        for entry in self._pending.values():
            fut = entry.future
            if fut is not None and fut.get_loop().is_closed():
                entry.future = None
                if entry.job.op in (lib.RMPY_OP_WAIT_TRY, lib.RMPY_OP_ACQUIRE_NOW):
                    self._abandon(entry.job, entry.key)
            entry.waiters = [w for w in entry.waiters if not w.get_loop().is_closed()]

    def _unbind(self) -> None:
        loop, self._loop = self._loop, None
        if loop is not None and not loop.is_closed():
            for fd in (self._pool_fd, self._wait_fd, self._event_fd):
                loop.remove_reader(fd)

    def _on_jobs_done(self) -> None:
        buf = self._done_buf
        while True:
            n = lib.rmpy_pool_done(self._pool, buf, _DONE_BATCH)
            for i in range(n):
                ptr = buf[i]
                addr = int(ffi.cast("uintptr_t", ptr))
                entry = self._pending.pop(addr, None)
                lib.rmpy_job_unref(ptr)  # the pool's reference; the entry holds ours
                if entry is None:
                    continue
                if entry.key is not None:
                    self._settled(entry.key, addr)
                for fut in (entry.future, *entry.waiters):
                    if fut is not None and not fut.done() and not fut.get_loop().is_closed():
                        fut.set_result(None)
            if n < _DONE_BATCH:
                break
        if not self._pending and self._idle is not None and not self._idle.done():
            self._idle.set_result(None)

    def _on_waits_ready(self) -> None:
        idp = self._id_buf
        while lib.redmutex_client_next_ready(self._ptr, idp) == 1:
            readiness = self._waits.get(int(idp[0]))
            if readiness is not None:
                readiness.ready = True
                fut = readiness.future
                if fut is not None and not fut.done() and not fut.get_loop().is_closed():
                    fut.set_result(True)

    def _on_events(self) -> None:
        idp, statep, ownerp = self._id_buf, self._state_buf, self._owner_buf
        while lib.redmutex_client_next_event(self._ptr, idp, statep, ownerp, len(ownerp)) == 1:
            ref = self._listeners.get(int(idp[0]))
            lock = ref() if ref is not None else None
            if lock is not None:
                # The owner whose hold changed (a semaphore's permit id).
                lock._deliver_lost(
                    LockState(statep[0]), ffi.string(ownerp).decode("utf-8", "surrogateescape")
                )

    def _listen(self, lock: Any, lock_id: int | None = None) -> None:
        """Delivers the lost-hold news of a lock (or of the handle lock_id names) to it."""
        key = int(lib.redmutex_lock_id(lock._ptr)) if lock_id is None else lock_id

        def forget(_ref: weakref.ReferenceType[Any]) -> None:
            self._listeners.pop(key, None)

        self._listeners[key] = weakref.ref(lock, forget)

    # -- jobs -------------------------------------------------------------------

    def _new_job(
        self, op: int, lock: _Target | None = None, owner: bytes | None = None, wait: Any = None
    ) -> Any:
        ptr = lib.rmpy_job_new()
        if ptr == ffi.NULL:
            raise OutOfMemory("out of memory", OutOfMemory.code)
        job = ffi.gc(ptr, lib.rmpy_job_unref)
        job.op = op
        if lock is not None:
            lib.rmpy_job_set_lock(job, lock._ref)
        if owner is not None:
            job.has_owner = 1
            job.owner = owner
        if wait is not None:
            job.wait = wait
        return job

    def _queue(self, job: Any, fut: asyncio.Future[None] | None, key: _OwnerKey | None = None) -> bool:
        """Hands a job to the pool; False when the pool is gone (client closed).
        A job queued with nobody awaiting it (fut None) is a clean-up of `key`."""
        addr = int(ffi.cast("uintptr_t", job))
        self._pending[addr] = _Pending(job, fut, key)
        if self._pool_gone or lib.rmpy_pool_submit(self._pool, job) != 0:
            del self._pending[addr]
            return False
        if fut is None and key is not None:
            self._settling.setdefault(key, set()).add(addr)
        return True

    def _settled(self, key: _OwnerKey, addr: int) -> None:
        jobs = self._settling.get(key)
        if jobs is not None:
            jobs.discard(addr)
            if not jobs:
                del self._settling[key]

    async def _after_cleanups(self, key: _OwnerKey, deadline: float | None = None) -> bool:
        """Waits until the clean-ups of this owner's cancelled calls on this
        lock have run (each is at most a round trip or two): a new acquisition
        must not race them. False when the deadline (loop time) came first."""
        while self._settling.get(key):
            loop = self._bind()
            fut: asyncio.Future[None] = loop.create_future()
            for addr in self._settling[key]:
                self._pending[addr].waiters.append(fut)
            timer = None if deadline is None else loop.call_at(deadline, _expire_none, fut)
            try:
                await fut
            finally:
                if timer is not None:
                    timer.cancel()
            if deadline is not None and loop.time() >= deadline and self._settling.get(key):
                return False
        return True

    def _start(self, job: Any, key: _OwnerKey | None = None) -> asyncio.Future[None]:
        """Hands a job to the pool; the future is done when the job is.
        Raises ClosedError (the job never ran) when the pool is gone."""
        loop = self._bind()
        fut: asyncio.Future[None] = loop.create_future()
        if not self._queue(job, fut, key):
            raise ClosedError("the client was closed", ClosedError.code)
        return fut

    async def _submit(self, job: Any, key: _OwnerKey | None = None) -> None:
        """Runs a job on the pool and waits for it. CancelledError leaves the
        job running: the caller abandons it (see _abandon)."""
        await self._start(job, key)

    def _abandon(self, job: Any, key: _OwnerKey | None = None) -> bool:
        """Gives up on a job whose task was cancelled. True: the pool undoes
        what it does for nobody (a clean-up of `key` until it ends); False: it
        had finished (its results stand)."""
        if self._pool_gone or not lib.rmpy_job_abandon(self._pool, job):
            return False
        addr = int(ffi.cast("uintptr_t", job))
        entry = self._pending.get(addr)
        if entry is not None:
            entry.future = None
            if key is not None:
                entry.key = key
                self._settling.setdefault(key, set()).add(addr)
        return True

    def _run_detached(self, job: Any, lock: _Target, owner: bytes | None, key: _OwnerKey | None) -> None:
        """Runs a clean-up job (a release, a wait's free) without waiting for it;
        inline once the pool is gone: the client is closed then, and those
        calls return at once."""
        if self._queue(job, None, key):
            return
        if job.op == lib.RMPY_OP_RELEASE or job.release_first:
            lock._release_inline(owner)
        if job.op == lib.RMPY_OP_WAIT_FREE:
            lib.redmutex_wait_free(job.wait)

    def _free_wait(
        self, wait: Any, lock: _Target, owner: bytes | None, release_first: bool, key: _OwnerKey
    ) -> None:
        job = self._new_job(lib.RMPY_OP_WAIT_FREE, lock, owner, wait)
        job.release_first = int(release_first)
        self._run_detached(job, lock, owner, key)

    def _give_up_wait(self, readiness: _Readiness) -> None:
        """Ends a wait whose task stopped waiting (once): an attempt in flight
        is abandoned (the pool releases what it wins and frees the wait),
        else the wait is freed on the pool, giving back what an attempt that
        had just finished won (a hand-off to the wait is given back by the
        free itself)."""
        if readiness.freed:
            return
        readiness.freed = True
        job, readiness.job = readiness.job, None
        if job is not None and self._abandon(job, readiness.key):
            return
        won = job is not None and job.rc == 0
        self._free_wait(readiness.c_wait, readiness.lock, readiness.owner, won, readiness.key)

    async def _call(
        self, op: int, lock: _Target, owner: bytes | None = None, key: _OwnerKey | None = None
    ) -> Any:
        """A job that needs no undoing if its task is cancelled (release, extend,
        queries); a release or extension cancelled in flight still runs, and the
        owner's next acquisition waits for it (key)."""
        job = self._new_job(op, lock, owner)
        try:
            await self._submit(job)
        except asyncio.CancelledError:
            self._abandon(job, key)
            raise
        return job

    async def _acquire_now(self, lock: _Target, owner: bytes | None, key: _OwnerKey) -> bool:
        await self._after_cleanups(key)
        job = self._new_job(lib.RMPY_OP_ACQUIRE_NOW, lock, owner)
        try:
            await self._submit(job, key)
        except asyncio.CancelledError:
            if not self._abandon(job, key) and job.rc == 0:
                self._run_detached(self._new_job(lib.RMPY_OP_RELEASE, lock, owner), lock, owner, key)
            raise
        if job.rc == _ETIMEDOUT:
            return False
        _raise_job_error(job)
        return True

    async def _acquire_waiting(
        self,
        lock: _Target,
        owner: bytes | None,
        wait_ms: int,
        key: _OwnerKey,
        make_wait: Callable[[], tuple[Any, bytes | None, _OwnerKey]] | None = None,
    ) -> bool:
        """Acquires within wait_ms (or forever) through a pollable wait of the
        core: a lock's, or the one make_wait() returns with its owner and key
        (a semaphore's, whose permit id is the wait's own, a multi-lock's, a
        latch's; its try's success is the acquisition). make_wait() makes a
        new wait at each call: an interrupted wait is followed by another."""
        loop = self._bind()
        deadline = None if wait_ms == _WAIT_FOREVER else loop.time() + wait_ms / 1000
        if not await self._after_cleanups(key, deadline):
            return False  # the owner's own clean-up outlasted the wait: not acquired in time

        def begin() -> _Readiness:
            if make_wait is not None:
                wait, wait_owner, wait_key = make_wait()
            else:
                out = ffi.new("redmutex_wait **")
                check(lib.redmutex_wait_new(out, lock._ptr, ffi.NULL if owner is None else owner))
                wait, wait_owner, wait_key = out[0], owner, key
            readiness = _Readiness(wait, lock, wait_owner, wait_key)
            self._waits[readiness.wait_id] = readiness
            return readiness

        def end(readiness: _Readiness) -> None:
            self._waits.pop(readiness.wait_id, None)
            self._give_up_wait(readiness)  # nothing to do if the wait was freed

        readiness = begin()
        retry_count = self._client._retry_count
        try:
            tries, last = 0, False
            while True:
                job = self._new_job(lib.RMPY_OP_WAIT_TRY, lock, readiness.owner, readiness.c_wait)
                done = self._start(job, readiness.key)
                # From here until its result is read, the attempt is in flight:
                # whoever ends the wait meanwhile abandons it (_give_up_wait).
                readiness.job = job
                await done
                readiness.job = None
                if job.rc == 0:
                    readiness.freed = True
                    lib.redmutex_wait_free(readiness.c_wait)  # never blocks after a try that acquired
                    return True
                if job.rc == _EINTR and not self._closed and not self._client._closed:
                    # redmutex_client_interrupt() ended every wait of the C
                    # client: a signal meant for a blocking acquire on the main
                    # thread (_signals.py), not for this task. It waits on for
                    # the time it has left (PEP 475), in a new wait.
                    end(readiness)
                    readiness = begin()
                    last = last or (deadline is not None and loop.time() >= deadline)
                    continue
                if job.rc != _ETIMEDOUT:
                    _raise_job_error(job)
                tries += 1
                if last or (retry_count and tries >= retry_count):
                    return False
                timeout = None if deadline is None else max(0.0, deadline - loop.time())
                # At the deadline, one last attempt (as the blocking acquire makes).
                last = not await readiness.wait(loop, timeout)
        finally:
            # Cancelled (in a try or between them), timed out, failed, or its
            # loop closed and its coroutine is being closed: the wait ends here.
            end(readiness)


# ---- locks ----------------------------------------------------------------------


def _inspect_holding(ptr: Any, ref: Any) -> LockInfo:
    """_inspect on a worker thread; ref, the C handle's reference, is held by
    the call, so the handle outlives an await that was cancelled meanwhile."""
    del ref  # only needed to stay alive until here
    return _inspect(ptr)


class AsyncLock(LockBase[AsyncClient]):
    """A plain, non-reentrant distributed lock for asyncio (redis-py wire format).

    Made by AsyncClient.lock(); arguments as for redmutex.Client.lock(). Like
    asyncio.Lock it is owned by the lock object: any task may release what
    another acquired, and a task that acquires it twice waits for itself.
    ``on_lost`` runs on the event loop; if it returns an awaitable, that is
    run as a task.

    The arguments, the local state and the properties are LockBase's
    (_base.py), shared with the blocking API; the calls here are awaited.
    """

    _client_class = AsyncClient
    _client_what = "redmutex.asyncio.AsyncClient"

    # -- helpers ------------------------------------------------------------

    def _setup(self, handle: Any) -> None:
        ref = lib.rmpy_lockref_new(handle)
        if ref == ffi.NULL:
            lib.redmutex_lock_free(handle)
            raise OutOfMemory("out of memory", OutOfMemory.code)
        # Jobs in flight hold references of their own: the C handle outlives
        # this object until they are done.
        self._ref = ffi.gc(ref, lib.rmpy_lockref_unref)
        self._ptr = handle

    def _listen(self) -> None:
        self.client._listen(self)

    def _owner_key(self) -> bytes | None:
        """The owner of this call: explicit, else the lock object (plain) or the task (rlock)."""
        return self._owner

    def _owner_c(self) -> Any:
        """The owner of the calling task's local queries, as the C calls take it."""
        owner = self._owner_key()
        return ffi.NULL if owner is None else owner

    def _call_owner(self) -> _CallOwner:
        """The owner of a call, taken when the call is made (in the calling
        task), or _LATER when no task runs: then when its coroutine starts."""
        try:
            return self._owner_key()
        except RuntimeError:
            return _LATER

    def _resolve(self, owner: _CallOwner) -> bytes | None:
        return self._owner_key() if isinstance(owner, _Later) else owner

    def _key(self, owner: bytes | None) -> _OwnerKey:
        """What this owner's calls on this lock are tracked by (AsyncClient._settling)."""
        return (self._c_name, id(self) if owner is None else owner)

    def _release_inline(self, owner: bytes | None) -> None:
        """The release of a clean-up once the pool is gone (the client is closed: it returns at once)."""
        lib.redmutex_lock_release(self._ptr, ffi.NULL if owner is None else owner)

    def _deliver_lost(self, state: LockState, owner: str = "") -> None:
        """Runs on_lost on the loop; an awaitable it returns runs as a task."""
        del owner  # a lock object has one owner's hold in view
        self._run_on_loop(self._call_on_lost(state))

    async def _acquire_ms(self, owner: _CallOwner, wait_ms: int) -> bool:
        owner = self._resolve(owner)
        if not self.client._observers:  # the usual case: the C core counts by itself
            return await self._acquire_c(owner, wait_ms)
        with self._observing(owner) as seen:
            seen.acquired = await self._acquire_c(owner, wait_ms)
        return seen.acquired

    async def _acquire_c(self, owner: bytes | None, wait_ms: int) -> bool:
        key = self._key(owner)
        if wait_ms == 0:
            return await self.client._acquire_now(self, owner, key)
        return await self.client._acquire_waiting(self, owner, wait_ms, key)

    # -- acquire and release ----------------------------------------------------

    def acquire(self, blocking: bool = True, timeout: float | None = -1) -> Coroutine[Any, Any, bool]:
        """Acquires the lock, with threading.Lock.acquire's contract, awaited.

        ``blocking=False`` tries once. Otherwise waits up to ``timeout``
        seconds (-1 or None: forever), holding no thread while it waits.
        True when acquired, False when not in time. Cancelling the task ends
        the wait at once with nothing held. Raises as redmutex.Lock.acquire().
        The owner (of a reentrant lock: the task) is the one that calls it:
        ``await asyncio.wait_for(lock.acquire(), 5)`` acquires for the task
        that awaits wait_for, which releases it.
        """
        wait_ms = _acquire_wait_ms(blocking, timeout)
        return self._acquire(self._call_owner(), wait_ms)

    async def _acquire(self, owner: _CallOwner, wait_ms: int) -> bool:
        self._raise_pending()
        return await self._acquire_ms(owner, wait_ms)

    def release(self) -> Coroutine[Any, Any, None]:
        """Releases one hold (deleting the lock and waking waiters when it was the
        last). Raises NotOwnedError if not held by this owner and LockLostError
        if the lease was lost before the release. A stored on_lost exception
        is raised after the release. Acts for the calling task (see acquire())."""
        return self._release(self._call_owner())

    async def _release(self, owner: _CallOwner) -> None:
        with self._releasing():
            owner = self._resolve(owner)
            job = await self.client._call(lib.RMPY_OP_RELEASE, self, owner, self._key(owner))
            self._observe_release(job.rc, owner)
            _raise_job_error(job)

    async def __aenter__(self) -> AsyncLock:
        """Acquires with the lock's ``timeout`` (None: forever); raises LockTimeout."""
        self._raise_pending()
        start = time.monotonic()
        if not await self._acquire_ms(self._call_owner(), self._timeout_ms):
            raise self._timeout_error(start)
        return self

    async def __aexit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        """Releases (also when the block was cancelled). Raises LockLostError if the
        lease was lost while the block ran - unless the block raised, whose
        exception is never masked (the release error is added to it as a note)."""
        with _exit_release(exc, self._note_exit_failure):
            await self.release()

    def extend(self, seconds: float, replace: bool = False) -> Coroutine[Any, Any, None]:
        """Adds ``seconds`` to the remaining lease (or sets it, with replace=True)
        if this owner still holds the lock. Raises NotOwnedError, LockLostError,
        LimitError. Acts for the calling task (see acquire())."""
        ms = _to_ms(seconds, "seconds", allow_zero=False)
        return self._extend(self._call_owner(), ms, replace)

    async def _extend(self, owner: _CallOwner, ms: int, replace: bool) -> None:
        self._raise_pending()
        owner = self._resolve(owner)
        job = self.client._new_job(lib.RMPY_OP_EXTEND, self, owner)
        job.ms = ms
        job.mode = lib.REDMUTEX_EXTEND_REPLACE if replace else lib.REDMUTEX_EXTEND_ADD
        try:
            await self.client._submit(job)
        except asyncio.CancelledError:
            self.client._abandon(job, self._key(owner))
            raise
        _raise_job_error(job)

    # -- queries (one round trip each) -----------------------------------------

    async def _query(self, op: int, owner: _CallOwner = None) -> int:
        self._raise_pending()
        job = await self.client._call(op, self, self._resolve(owner))
        _raise_job_error(job)
        return int(job.out)

    async def locked(self) -> bool:
        """True if anyone holds the lock, as the servers see it now."""
        return bool(await self._query(lib.RMPY_OP_IS_LOCKED))

    def owned(self) -> Coroutine[Any, Any, bool]:
        """True if this owner (the calling task's, see acquire()) holds the
        lock, as the servers see it now."""
        return self._owned(self._call_owner())

    async def _owned(self, owner: _CallOwner) -> bool:
        return bool(await self._query(lib.RMPY_OP_IS_OWNED, owner))

    async def ttl(self) -> float | None:
        """Remaining time to live on the servers, in seconds; None when nobody
        holds it, or it is held without a TTL (a redis-py lock with timeout=None)."""
        ms = await self._query(lib.RMPY_OP_TTL)
        return None if ms < 0 else ms / 1000

    def hold_count(self) -> Coroutine[Any, Any, int]:
        """This owner's hold count on the servers (reentrancy depth; 1 or 0 for
        a plain lock); the calling task's (see acquire())."""
        return self._query(lib.RMPY_OP_HOLD_COUNT, self._call_owner())

    async def force_release(self) -> bool:
        """Deletes the lock whoever holds it and wakes waiters; True if one was deleted."""
        return bool(await self._query(lib.RMPY_OP_FORCE_RELEASE))

    async def inspect(self) -> LockInfo:
        """What the servers hold under this lock's name, whatever its kind (see
        redmutex.Lock.inspect()); one round trip, on the loop's default executor."""
        self._raise_pending()
        call = functools.partial(_inspect_holding, self._ptr, self._ref)
        return await asyncio.get_running_loop().run_in_executor(None, call)

    def __repr__(self) -> str:
        """asyncio's form, "<redmutex.asyncio.AsyncLock object at 0x... name='x' [locked]>":
        locked when this owner (the running task's, for a reentrant lock) holds
        it, as known locally (no I/O)."""
        kind, (locked, _) = type(self).__name__, self._repr_state()
        return f"<redmutex.asyncio.{kind} object at {id(self):#x} name={self._name!r} [{locked}]>"


class AsyncRLock(AsyncLock):
    """A reentrant distributed lock for asyncio (Redisson RLock wire format).

    The default owner is the running task (``"<client id>:task-<n>"``): a
    task may acquire it again (``hold_count`` deep) and must release it as
    often; two tasks exclude each other, also on one thread. An explicit
    ``owner`` is the hash field used verbatim.
    """

    _kind = lib.REDMUTEX_KIND_RLOCK

    def _owner_key(self) -> bytes | None:
        if self._owner is not None:
            return self._owner
        return f"{self.client.id}:task-{_task_number()}".encode("ascii")


class AsyncFairLock(AsyncRLock):
    """A reentrant, fair (FIFO) distributed lock for asyncio (Redisson RFairLock
    wire format), owned by the running task: waiters are served in the order
    they asked, whoever they are (see redmutex.FairLock). A waiting task that
    is cancelled or times out leaves the queue."""

    _kind = lib.REDMUTEX_KIND_FAIR


class AsyncReadLock(AsyncRLock):
    """The read side of an AsyncReadWriteLock: shared, reentrant per task."""

    _kind = lib.REDMUTEX_KIND_READ


class AsyncWriteLock(AsyncRLock):
    """The write side of an AsyncReadWriteLock: exclusive, reentrant per task;
    its owner may take the read side too."""

    _kind = lib.REDMUTEX_KIND_WRITE


class AsyncReadWriteLock(ReadWriteBase[AsyncClient, AsyncReadLock, AsyncWriteLock]):
    """A read-write lock for asyncio (Redisson RReadWriteLock wire format):
    ``rw.read`` (an AsyncReadLock) and ``rw.write`` (an AsyncWriteLock) on the
    same name. See redmutex.ReadWriteLock."""

    _read_class = AsyncReadLock
    _write_class = AsyncWriteLock

    def __repr__(self) -> str:
        return f"<redmutex.asyncio.AsyncReadWriteLock {self.name!r}>"
