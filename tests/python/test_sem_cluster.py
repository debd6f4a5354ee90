"""Semaphores, latches and multi-locks on a Redis Cluster, sync and asyncio.

One real cluster (3 masters + 3 replicas, tests/rmcluster.py) for the module.
Every key of a semaphore or latch is in its name's slot; a multi-lock over
names on different masters takes them with one request per slot, never a
CROSSSLOT command.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
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


def names_on_every_master(cluster: Cluster, prefix: str) -> list[str]:
    """Three lock names whose slots are on three different masters."""
    found: dict[int, str] = {}
    for k in range(1000):
        name = f"{prefix}:{k}"
        found.setdefault(cluster.owner(name), name)
        if len(found) == 3:
            return sorted(found.values())
    raise AssertionError("no names on three masters")


def test_a_semaphore_keeps_its_keys_in_its_slot_and_its_capacity(cluster: Cluster) -> None:
    with redmutex.Client(cluster.url) as a, redmutex.Client(cluster.url) as b:
        inside, most, errors = [0], [0], []
        mu = threading.Lock()

        def worker(client: redmutex.Client) -> None:
            sem = client.semaphore("py:csem", 2)
            try:
                for _ in range(15):
                    with sem:
                        with mu:
                            inside[0] += 1
                            most[0] = max(most[0], inside[0])
                        time.sleep(0.002)
                        with mu:
                            inside[0] -= 1
            except Exception as err:  # noqa: BLE001 - collected for the assertion
                errors.append(err)

        threads = [threading.Thread(target=worker, args=(c,)) for c in (a, b, a, b, a)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors and most[0] == 2
        node = cluster.owner("py:csem")
        assert cluster.command(node, "GET", "py:csem") == b"2"
        assert cluster.command(node, "EXISTS", "{py:csem}:timeout") == 0
        sem = a.semaphore("py:csem", 2)
        with sem:
            assert cluster.command(node, "ZCARD", "{py:csem}:timeout") == 1
            assert sem.available() == 1


def test_a_latch_counted_down_elsewhere_wakes_a_waiter(cluster: Cluster) -> None:
    with redmutex.Client(cluster.url, wait_backoff_cap=5.0) as a, redmutex.Client(cluster.url) as b:
        latch = a.latch("py:clatch")
        assert latch.try_set_count(2)
        woke: list[float] = []

        def wait() -> None:
            assert latch.wait(timeout=30)
            woke.append(time.monotonic())

        t = threading.Thread(target=wait)
        t.start()
        time.sleep(1.5)  # the waiter's backoff grows past a second meanwhile
        other = b.latch("py:clatch")
        other.count_down()
        assert other.count == 1
        other.count_down()
        counted = time.monotonic()
        t.join(30)
        assert woke and woke[0] - counted < 0.5
        assert cluster.command(cluster.owner("py:clatch"), "EXISTS", "py:clatch") == 0


def test_a_latch_name_with_braces_is_refused_on_a_cluster(cluster: Cluster) -> None:
    with redmutex.Client(cluster.url) as c, pytest.raises(redmutex.InvalidArgument):
        c.latch("a{b}").try_set_count(1)


def test_a_multi_lock_over_three_masters_is_all_or_nothing(cluster: Cluster) -> None:
    names = names_on_every_master(cluster, "py:cmulti")
    with redmutex.Client(cluster.url) as a, redmutex.Client(cluster.url) as b:
        multi = a.multi_lock([a.lock(n) for n in names])
        with multi:
            for n in names:
                assert cluster.command(cluster.owner(n), "EXISTS", n) == 1
                assert not b.lock(n).acquire(blocking=False)
        assert all(cluster.command(cluster.owner(n), "EXISTS", n) == 0 for n in names)
        # One lock of the set held elsewhere: the multi-lock gets none of them.
        single = b.lock(names[1])
        assert single.acquire()
        assert not multi.acquire(blocking=False)
        assert all(cluster.command(cluster.owner(n), "EXISTS", n) == 0 for n in (names[0], names[2]))
        single.release()
        assert multi.acquire(timeout=10)
        multi.release()


def test_opposite_multi_locks_over_three_masters_never_deadlock(cluster: Cluster) -> None:
    names = names_on_every_master(cluster, "py:cdead")
    with redmutex.Client(cluster.url) as a, redmutex.Client(cluster.url) as b:
        forward = a.multi_lock([a.lock(n) for n in names])
        backward = b.multi_lock([b.lock(n) for n in reversed(names)])
        done, errors = [0, 0], []

        def run(multi: redmutex.MultiLock, k: int) -> None:
            try:
                for _ in range(40):
                    if not multi.acquire(timeout=30):
                        raise AssertionError("a multi-lock waited 30 s: deadlock")
                    multi.release()
                    done[k] += 1
            except Exception as err:  # noqa: BLE001 - collected for the assertion
                errors.append(err)

        threads = [threading.Thread(target=run, args=(m, k)) for k, m in enumerate((forward, backward))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        assert not errors and done == [40, 40]


def test_asyncio_semaphore_latch_and_multi_lock_on_a_cluster(cluster: Cluster) -> None:
    names = names_on_every_master(cluster, "py:cas")

    async def main() -> None:
        async with redmutex.asyncio.AsyncClient(cluster.url) as c:
            sem = c.semaphore("py:cas:sem", 1)
            async with sem:
                assert not await sem.acquire(blocking=False)
            assert await sem.available() == 1
            latch = c.latch("py:cas:latch")
            assert await latch.try_set_count(1)
            waiter = asyncio.ensure_future(latch.wait(timeout=20))
            await asyncio.sleep(0.2)
            await latch.count_down()
            assert await waiter
            async with c.multi_lock([c.lock(n) for n in names]):
                for n in names:
                    assert cluster.command(cluster.owner(n), "EXISTS", n) == 1

    asyncio.run(main())
