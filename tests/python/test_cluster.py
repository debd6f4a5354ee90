"""The same URL works on a Redis Cluster from Python, sync and asyncio, with no new API.

One real cluster (3 masters + 3 replicas, tests/rmcluster.py) for the module.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from typing import Iterator

import pytest
import redmutex
import redmutex.asyncio

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from rmcluster import Cluster


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with Cluster(masters=3, replicas=1) as cl:
        yield cl


def test_sync_client_takes_a_cluster_url_and_routes_every_name(cluster: Cluster) -> None:
    with redmutex.Client(cluster.url) as a, redmutex.Client(cluster.url) as b:
        owners = set()
        for k in range(30):
            name = f"py:cluster:{k}"
            with a.lock(name):
                assert not b.lock(name).acquire(blocking=False)
                owners.add(cluster.owner(name))
                assert cluster.command(cluster.owner(name), "EXISTS", name) == 1
            with b.rlock(name + ":r"), b.fair_lock(name + ":f"):
                pass
            rw = a.rwlock(name + ":rw")
            with rw.read:
                pass
        assert len(owners) == 3


def test_a_name_whose_keys_span_slots_is_refused(cluster: Cluster) -> None:
    with redmutex.Client(cluster.url) as c, pytest.raises(redmutex.InvalidArgument, match="hash slots"):
        c.rlock("a{}b").acquire(blocking=False)


def test_asyncio_client_takes_the_same_url(cluster: Cluster) -> None:
    async def main() -> None:
        async with redmutex.asyncio.AsyncClient(cluster.url) as c:
            for k in range(10):
                async with c.lock(f"py:async:{k}"):
                    pass
                async with c.rlock(f"py:async:r:{k}"):
                    pass

    asyncio.run(main())


def test_asyncio_waiter_is_woken_by_a_sharded_release(cluster: Cluster) -> None:
    async def main() -> float:
        a = redmutex.asyncio.AsyncClient(cluster.url, wait_backoff_cap=5.0)
        b = redmutex.asyncio.AsyncClient(cluster.url, wait_backoff_cap=5.0)
        async with a, b:
            holder = a.lock("py:async:wake")
            await holder.acquire()
            released: list[float] = []

            async def release_later() -> None:
                await asyncio.sleep(2.0)  # the waiter's backoff grows past a second meanwhile
                released.append(time.monotonic())
                await holder.release()

            task = asyncio.ensure_future(release_later())
            waiter = b.lock("py:async:wake")
            await waiter.acquire(timeout=10)
            woken = time.monotonic() - released[0]
            await waiter.release()
            await task
            return woken

    assert asyncio.run(main()) < 0.5


def test_inspect_reads_each_name_on_its_slots_master(cluster: Cluster) -> None:
    with redmutex.Client(cluster.url) as c:
        names = [f"py:inspect:{k}" for k in range(6)]
        assert len({cluster.owner(n) for n in names}) > 1  # more than one master is read
        locks = [c.lock(n, fencing=True) for n in names]
        for lock in locks:
            lock.acquire()
        for name, lock in zip(names, locks):
            info = lock.inspect()
            assert info.held and info.kind == "lock" and info.fence == lock.fence
            counter = cluster.command(cluster.owner(name), "GET", f"redisson_lock_token:{{{name}}}")
            assert info.fence == int(counter)
            assert lock.locked() and lock.hold_count == 1 and lock.ttl is not None and lock.ttl > 0
            lock.release()
            assert not lock.inspect().held
