"""Semaphores, count-down latches and multi-locks for asyncio (redmutex.asyncio)."""

from __future__ import annotations

import asyncio
import inspect
import math
import time

import pytest
import redis
import redmutex
from redmutex.asyncio import (
    AsyncClient,
    AsyncCountDownLatch,
    AsyncFairLock,
    AsyncLock,
    AsyncMultiLock,
    AsyncRLock,
    AsyncSemaphore,
)


def test_async_semaphore_holds_and_gives_back(redis_url: str, r: redis.Redis) -> None:
    async def main() -> None:
        async with AsyncClient(redis_url) as c:
            sem = c.semaphore("a:jobs", 2)
            async with sem:
                assert int(r.get("a:jobs")) == 1
                assert sem.state == redmutex.LockState.HELD
                async with sem:
                    assert int(r.get("a:jobs")) == 0
                    assert not await sem.acquire(blocking=False)
                    assert not await sem.acquire(timeout=0.2)
                assert await sem.available() == 1
            assert int(r.get("a:jobs")) == 2 and sem.held == []
            with pytest.raises(redmutex.NotOwnedError):
                await sem.release()

    asyncio.run(main())


def test_a_cancelled_waiter_holds_no_permit(redis_url: str, r: redis.Redis) -> None:
    async def main() -> None:
        async with AsyncClient(redis_url) as c:
            sem = c.semaphore("a:cancel", 1)
            assert await sem.acquire()
            waiter = asyncio.ensure_future(sem.acquire(timeout=30))
            await asyncio.sleep(0.3)
            waiter.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiter
            await sem.release()
            other = c.semaphore("a:cancel", 1)
            assert await other.acquire(timeout=5)
            assert r.zcard("{a:cancel}:timeout") == 1
            await other.release()

    asyncio.run(main())


def test_async_semaphore_waiters_are_served_as_permits_free(redis_url: str) -> None:
    async def main() -> None:
        async with AsyncClient(redis_url) as c:
            sem = c.semaphore("a:three", 3)
            inside, most = [0], [0]

            async def worker() -> None:
                for _ in range(10):
                    async with sem:
                        inside[0] += 1
                        most[0] = max(most[0], inside[0])
                        await asyncio.sleep(0.005)
                        inside[0] -= 1

            await asyncio.wait_for(asyncio.gather(*(worker() for _ in range(8))), 60)
            assert most[0] == 3

    asyncio.run(main())


def test_async_semaphore_bad_input(redis_url: str, r: redis.Redis) -> None:
    async def main() -> None:
        async with AsyncClient(redis_url) as c:
            with pytest.raises(redmutex.InvalidArgument):
                c.semaphore("bad", 0)
            sem = c.semaphore("bad", 2)
            for kwargs in ({"permits": 3}, {"permits": 0}, {"timeout": math.nan}):
                with pytest.raises(redmutex.InvalidArgument):
                    await sem.acquire(**kwargs)
        assert r.keys("*") == []

    asyncio.run(main())


def test_async_latch_is_released_by_a_count_down_elsewhere(redis_url: str, r: redis.Redis) -> None:
    async def main() -> None:
        async with AsyncClient(redis_url, wait_backoff_cap=20.0) as c:
            latch = c.latch("a:gate")
            assert await latch.try_set_count(1)
            assert await latch.count() == 1
            assert not await latch.wait(0.2)
            waiters = [asyncio.ensure_future(latch.wait(30)) for _ in range(3)]
            await asyncio.sleep(1.5)
            start = time.monotonic()
            with redmutex.Client(redis_url) as sync:
                sync.latch("a:gate").count_down()
            assert await asyncio.gather(*waiters) == [True, True, True]
            assert time.monotonic() - start < 1.0
            assert await latch.count() == 0

    asyncio.run(main())


def test_async_multi_lock_all_or_nothing_and_no_deadlock(redis_url: str, r: redis.Redis) -> None:
    async def main() -> None:
        async with AsyncClient(redis_url) as c, AsyncClient(redis_url) as d:
            a, b = c.lock("am:a"), c.rlock("am:b")
            multi = c.multi_lock([a, b])
            held = d.rlock("am:b")
            assert await held.acquire()
            assert not await multi.acquire(blocking=False)
            assert not r.exists("am:a")
            await held.release()
            async with multi:
                assert r.exists("am:a") and r.exists("am:b")
            assert r.keys("am:*") == []

            rounds = [0]

            async def run(names: list[str]) -> None:
                m = c.multi_lock([c.lock(n) for n in names], timeout=30)
                for _ in range(50):
                    async with m:
                        rounds[0] += 1

            names = ["ad:x", "ad:y", "ad:z"]
            await asyncio.wait_for(asyncio.gather(run(names), run(names[::-1])), 120)
            assert rounds[0] == 100

    asyncio.run(main())


# ---- one implementation for both APIs --------------------------------------------------


def _properties(cls: type) -> set[str]:
    return {name for name, value in inspect.getmembers(cls) if isinstance(value, property)}


@pytest.mark.parametrize(
    ("blocking", "awaited", "coroutines"),
    [
        # A round trip is awaited in asyncio: a coroutine method there.
        (redmutex.Lock, AsyncLock, {"ttl", "hold_count"}),
        (redmutex.RLock, AsyncRLock, {"ttl", "hold_count"}),
        (redmutex.FairLock, AsyncFairLock, {"ttl", "hold_count"}),
        (redmutex.Semaphore, AsyncSemaphore, set()),
        (redmutex.CountDownLatch, AsyncCountDownLatch, {"count"}),
        (redmutex.MultiLock, AsyncMultiLock, set()),
    ],
)
def test_each_asyncio_class_has_the_blocking_ones_properties(
    blocking: type, awaited: type, coroutines: set[str]
) -> None:
    """The local state (no I/O) reads the same in both APIs: a property of
    one that the other lacks is drift between two copies."""
    assert _properties(blocking) - coroutines == _properties(awaited)


def test_an_async_semaphore_refuses_local_queries_on_a_closed_client_as_the_blocking_one_does(
    redis_url: str,
) -> None:
    with redmutex.Client(redis_url) as client:
        sem = client.semaphore("closed:s", 2)
    with pytest.raises(redmutex.ClosedError):
        _ = sem.state

    async def main() -> None:
        client = AsyncClient(redis_url)
        sem = client.semaphore("closed:a", 2)
        await client.close()
        for prop in ("state", "lost"):
            with pytest.raises(redmutex.ClosedError):
                getattr(sem, prop)
        assert "redmutex.asyncio.AsyncSemaphore name='closed:a' permits=2 held=0" in repr(sem)

    asyncio.run(main())


def test_asyncio_semaphores_latches_and_multi_locks_say_what_they_are(redis_url: str) -> None:
    async def main() -> None:
        async with AsyncClient(redis_url) as c:
            assert "<redmutex.asyncio.AsyncCountDownLatch name='r:l'" in repr(c.latch("r:l"))
            multi = c.multi_lock([c.lock("r:a"), c.lock("r:b")])
            assert "<redmutex.asyncio.AsyncMultiLock locks=['r:a', 'r:b']" in repr(multi)

    asyncio.run(main())


def test_an_async_semaphore_keeps_what_an_awaitable_on_lost_raised(redis_url: str, r: redis.Redis) -> None:
    """As for AsyncLock: the exception of an on_lost coroutine is raised by
    the next call on the semaphore, not dropped with its task."""

    class Gone(Exception):
        pass

    news: list[tuple[redmutex.LockState, str]] = []

    async def on_lost(sem: AsyncSemaphore, state: redmutex.LockState, permit: str) -> None:
        news.append((state, permit))
        raise Gone(permit)

    async def main() -> None:
        async with AsyncClient(redis_url, watchdog_lease=0.6) as c:
            sem = c.semaphore("a:gone", 2, on_lost=on_lost)
            with pytest.raises(redmutex.LockLostError):
                async with sem:
                    permit = sem.permit_id
                    r.delete("{a:gone}:timeout")
                    deadline = time.monotonic() + 20
                    while not news:
                        assert time.monotonic() < deadline, "no lost-permit news"
                        await asyncio.sleep(0.02)
            assert news[0] == (redmutex.LockState.LOST, permit)
            with pytest.raises(Gone):
                _ = sem.state
            assert sem.state == redmutex.LockState.UNLOCKED  # raised once

    asyncio.run(main())


def test_a_waiter_goes_on_after_an_interrupt_of_the_client(redis_url: str, r: redis.Redis) -> None:
    # redmutex_client_interrupt (a signal during a blocking acquire on the main
    # thread) ends the pollable waits of the C client: a semaphore's wait is
    # followed by a new one, with a permit id of its own, and the permit it
    # finally takes is the one release() gives back.
    from redmutex._redmutex_cffi import lib

    async def main() -> None:
        async with AsyncClient(redis_url) as c:
            sem = c.semaphore("a:intr", 1)
            assert await sem.acquire()
            other = c.semaphore("a:intr", 1)
            waiter = asyncio.ensure_future(other.acquire(timeout=30))
            await asyncio.sleep(0.3)
            for _ in range(3):
                lib.redmutex_client_interrupt(c._ptr)
                await asyncio.sleep(0.1)
            assert not waiter.done(), waiter.exception() if waiter.done() else None
            await sem.release()
            assert await asyncio.wait_for(waiter, 15)
            assert r.zcard("{a:intr}:timeout") == 1
            await other.release()
            assert r.zcard("{a:intr}:timeout") == 0

    asyncio.run(main())
