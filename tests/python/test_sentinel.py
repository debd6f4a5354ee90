"""A redis+sentinel:// URL works from Python, sync and asyncio, with no new API.

One real Sentinel deployment (1 master + 2 replicas + 3 sentinels,
tests/rmsentinel.py) for the module; the failover test leaves it settled.
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
from rmsentinel import Sentinels, command


@pytest.fixture(scope="module")
def sd() -> Iterator[Sentinels]:
    with Sentinels(sentinel_password="py-sentinel-secret") as s:
        yield s


def url(sd: Sentinels) -> str:
    return sd.url_with(query=f"sentinel_password={sd.sentinel_password}")


def test_sync_client_takes_a_sentinel_url(sd: Sentinels) -> None:
    with redmutex.Client(url(sd)) as a, redmutex.Client(url(sd)) as b:
        with a.lock("py:sn:lock"):
            assert not b.lock("py:sn:lock").acquire(blocking=False)
            assert command(sd.master_port(), "EXISTS", "py:sn:lock") == 1
        with b.rlock("py:sn:r"), b.fair_lock("py:sn:f"):
            pass
        rw = a.rwlock("py:sn:rw")
        with rw.read:
            pass
        with rw.write:
            pass


def test_min_replicas_defaults_to_one_on_sentinel(sd: Sentinels) -> None:
    """With the default, a lock is on a replica when acquire returns (WAIT 1)."""
    replicas = [n.port for n in sd.nodes if n.alive and n.port != sd.master_port()]
    with redmutex.Client(url(sd)) as c:
        for k in range(10):
            name = f"py:sn:replicated:{k}"
            with c.lock(name):
                assert any(command(p, "EXISTS", name) == 1 for p in replicas)
    with pytest.raises(redmutex.InvalidArgument):
        redmutex.Client(url(sd), min_replicas=-2)


def test_asyncio_client_takes_a_sentinel_url(sd: Sentinels) -> None:
    async def main() -> None:
        async with redmutex.asyncio.AsyncClient(url(sd)) as c:
            async with c.lock("py:sn:async"):
                assert command(sd.master_port(), "EXISTS", "py:sn:async") == 1
            async with c.rlock("py:sn:async:r"):
                pass

    asyncio.run(main())


def test_wrong_service_and_sentinel_password_raise_clear_errors(sd: Sentinels) -> None:
    wrong_service = sd.url_with(query=f"sentinel_password={sd.sentinel_password}").replace(
        "/mymaster", "/nosuchmaster"
    )
    c = redmutex.Client(wrong_service, command_timeout=0.5)
    with c, pytest.raises(redmutex.ConnectionError, match="nosuchmaster"):
        c.lock("py:sn:x").acquire(blocking=False)
    with redmutex.Client(sd.url_with(query="sentinel_password=wrong-secret"), command_timeout=0.5) as c:
        with pytest.raises(redmutex.AuthError) as e:
            c.lock("py:sn:x").acquire(blocking=False)
        assert "wrong-secret" not in str(e.value)
    with pytest.raises(redmutex.InvalidArgument, match="service"):
        redmutex.Client(sd.url_with().replace("/mymaster", ""))


def test_failover_moves_sync_and_asyncio_waiters(sd: Sentinels) -> None:
    """SENTINEL FAILOVER while a lock is held and a thread and a task wait: the
    lock stays held (renewed on the new master), and both waiters get it in
    turn once it is released there."""
    holder = redmutex.Client(url(sd), watchdog_lease=4.0)
    waiters = redmutex.Client(url(sd), watchdog_lease=4.0, wait_backoff_cap=5.0)
    lock = holder.lock("py:sn:failover")
    assert lock.acquire(blocking=False)
    got: list[tuple[str, float]] = []

    def thread_waiter() -> None:
        with waiters.lock("py:sn:failover", timeout=30):
            got.append(("thread", time.monotonic()))

    async def task_waiter() -> None:
        ac = redmutex.asyncio.AsyncClient(url(sd), watchdog_lease=4.0, wait_backoff_cap=5.0)
        async with ac, ac.lock("py:sn:failover", timeout=30):
            got.append(("task", time.monotonic()))

    t = threading.Thread(target=thread_waiter)
    t.start()
    a = threading.Thread(target=asyncio.run, args=(task_waiter(),))
    a.start()
    time.sleep(0.3)  # both are waiting by now (nothing is asserted of this pause)
    new = sd.failover(settle=False)
    deadline = time.monotonic() + 5
    while command(new, "PTTL", "py:sn:failover") < 3000:  # renewed on the new master
        assert time.monotonic() < deadline, "the holder's lock was not renewed on the new master"
        time.sleep(0.02)
    assert lock.locked() and not lock.lost and not got
    released = time.monotonic()
    lock.release()
    t.join(30)
    a.join(30)
    assert sorted(w for w, _ in got) == ["task", "thread"]
    first = min(at for _, at in got)
    assert first - released < 1.0, f"the first waiter took {first - released:.2f} s"
    holder.close()
    waiters.close()
    sd.settle(new)
