"""lock.inspect(): what the servers hold under a lock's name, whatever its kind."""

from __future__ import annotations

import asyncio
import dataclasses
import threading

import pytest
import redmutex
import redmutex.asyncio

from rmtest_util import wait_until


def test_a_free_name(client):
    info = client.rlock("free").inspect()
    assert isinstance(info, redmutex.LockInfo)
    assert info == redmutex.LockInfo(
        held=False,
        kind=None,
        owner=None,
        hold_count=0,
        ttl=None,
        fence=None,
        queue_length=0,
        readers=0,
        servers_answered=1,
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.held = True  # type: ignore[misc]


def test_a_plain_lock_shows_the_start_of_its_token_and_its_fence(client, r):
    lock = client.lock("p", lease=20, fencing=True)
    with lock:
        info = client.rlock("p").inspect()  # any kind of handle reads any kind of lock
        token = r.get("p").decode()
        assert info.held and info.kind == "lock" and info.hold_count == 1
        assert info.owner == token[:8] and token not in repr(info)
        assert 15 < info.ttl <= 20
        assert info.fence == lock.fence == int(r.get("redisson_lock_token:{p}"))


def test_reentrant_fair_and_read_write_locks(client, r):
    with client.rlock("re"), client.rlock("re"):
        info = client.lock("re").inspect()
        assert (info.kind, info.owner, info.hold_count) == ("rlock", client.thread_owner(), 2)
    fair = client.fair_lock("f")
    with fair:
        assert client.fair_lock("f").inspect().kind == "fair"
        other = redmutex.Client(f"redis://127.0.0.1:{r.connection_pool.connection_kwargs['port']}")
        other_lock = other.fair_lock("f")
        waiter = threading.Thread(target=lambda: other_lock.acquire(timeout=20) and other_lock.release())
        waiter.start()
        wait_until(lambda: r.llen("redisson_lock_queue:{f}") == 1, 10, what="the waiter to queue")
        info = client.lock("f").inspect()
        assert info.kind == "fair" and info.queue_length == 1
    waiter.join(20)
    other.close()
    rw = client.rwlock("rw")
    with rw.write, rw.read:
        info = rw.read.inspect()
        assert info.kind == "write" and info.owner == client.thread_owner() + ":write" and info.readers == 1
    with rw.read:
        info = rw.write.inspect()
        assert info.kind == "read" and info.owner == client.thread_owner() and info.readers == 1


def test_a_key_that_is_no_lock_and_a_closed_client(client, r):
    r.rpush("list", "x")
    with pytest.raises(redmutex.WrongTypeError):
        client.lock("list").inspect()
    lock = client.lock("x")
    client.close()
    with pytest.raises(redmutex.ClosedError):
        lock.inspect()


def test_asyncio_lock_inspect(redis_url, r):
    async def main():
        async with redmutex.asyncio.AsyncClient(redis_url) as c:
            lock = c.lock("a", lease=20)
            async with lock:
                info = await c.rlock("a").inspect()
            free = await lock.inspect()
            return info, free

    info, free = asyncio.run(main())
    assert info.held and info.kind == "lock" and len(info.owner) == 8
    assert not free.held and free.kind is None
