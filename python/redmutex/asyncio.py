"""redmutex for asyncio: ``async with client.lock(name):`` without a thread per waiter.

::

    from redmutex.asyncio import AsyncClient

    async with AsyncClient("redis://127.0.0.1:6379/0") as client:
        async with client.lock("jobs:nightly", timeout=10.0):
            await run_nightly_job()   # the watchdog renews the lease meanwhile

The same locks as the blocking API (``lock()`` in redis-py's wire format,
``rlock()``, ``fair_lock()`` and ``rwlock()`` in Redisson's), awaited: ``await lock.acquire(blocking=True,
timeout=-1)``, ``await lock.release()``, ``await lock.extend(s)``,
``@client.synchronized(name)`` for coroutine functions. Reentrant locks are
owned by the task. A waiting task holds no thread; round trips run on a small
fixed pool of worker threads, so the loop never blocks on the network.
Cancelling a waiting task ends its wait at once with nothing held. See
docs/python.md.
"""

from ._async import (
    AsyncClient,
    AsyncFairLock,
    AsyncLock,
    AsyncReadLock,
    AsyncReadWriteLock,
    AsyncRLock,
    AsyncWriteLock,
)
from ._async_sem import AsyncCountDownLatch, AsyncMultiLock, AsyncSemaphore

__all__ = [
    "AsyncClient",
    "AsyncCountDownLatch",
    "AsyncFairLock",
    "AsyncLock",
    "AsyncMultiLock",
    "AsyncRLock",
    "AsyncReadLock",
    "AsyncReadWriteLock",
    "AsyncSemaphore",
    "AsyncWriteLock",
]
