"""Semaphores, count-down latches and multi-locks for asyncio (redmutex.asyncio)."""

from __future__ import annotations

import asyncio
import math
import time

import pytest
import redis
import redmutex
from redmutex.asyncio import AsyncClient


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
