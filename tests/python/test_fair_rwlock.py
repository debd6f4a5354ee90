"""client.fair_lock() and client.rwlock() from Python: formats, order, giving up, sharing."""

from __future__ import annotations

import queue
import signal
import threading
import time

import pytest
import redis
import redmutex

from rmtest_util import wait_until


def queue_key(name: str) -> str:
    return f"redisson_lock_queue:{{{name}}}"


def test_fair_lock_is_reentrant_in_redisson_fair_format(client: redmutex.Client, r: redis.Redis) -> None:
    fair = client.fair_lock("jobs:fair", fencing=True)
    assert isinstance(fair, redmutex.FairLock) and isinstance(fair, redmutex.RLock)
    with fair:
        token = fair.fence
        with fair:
            assert fair.hold_count == 2
            assert r.hgetall("jobs:fair") == {client.thread_owner().encode(): b"2"}
            assert fair.fence == token
        assert fair.hold_count == 1
    assert not r.exists("jobs:fair", queue_key("jobs:fair"))
    with fair:
        assert fair.fence > token


def test_fair_lock_serves_threads_in_arrival_order(client: redmutex.Client, r: redis.Redis) -> None:
    name = "fair:threads"
    holder = client.fair_lock(name)
    holder.acquire()
    served: queue.Queue[int] = queue.Queue()

    def waiter(i: int) -> None:
        with client.fair_lock(name, timeout=20):
            served.put(i)

    threads = []
    for i in range(5):
        threads.append(threading.Thread(target=waiter, args=(i,)))
        threads[-1].start()
        wait_until(lambda n=i + 1: r.llen(queue_key(name)) == n, what=f"waiter {i} to join the queue")
    holder.release()
    for t in threads:
        t.join(20)
    assert [served.get_nowait() for _ in range(5)] == [0, 1, 2, 3, 4]


def test_fair_waiter_that_times_out_leaves_the_queue(client: redmutex.Client, r: redis.Redis) -> None:
    name = "fair:timeout"
    holder = client.fair_lock(name)
    holder.acquire()
    other = client.fair_lock(name, owner="another-owner", timeout=0.3)
    start = time.monotonic()
    with pytest.raises(redmutex.LockTimeout), other:
        pass
    assert 0.3 <= time.monotonic() - start < 3
    assert not r.exists(
        queue_key(name), "redisson_lock_timeout:{fair:timeout}", "redmutex_lock_waiters:{fair:timeout}"
    )
    assert other.acquire(blocking=False) is False  # a try does not queue either
    assert not r.exists(queue_key(name))
    holder.release()
    assert other.acquire(blocking=False) is True
    other.release()


class Interrupted(Exception):
    pass


def test_signal_ends_a_fair_wait_and_the_waiter_leaves_the_queue(
    client: redmutex.Client, make_client, r: redis.Redis
) -> None:
    name = "fair:signal"
    holder = client.fair_lock(name, owner="holder")
    holder.acquire()

    def handler(signum: int, frame: object) -> None:
        raise Interrupted(f"signal {signum}")

    old = signal.signal(signal.SIGUSR1, handler)
    main = threading.get_ident()

    def poke() -> None:
        wait_until(lambda: r.llen(queue_key(name)) == 1, what="the waiter to queue")
        signal.pthread_kill(main, signal.SIGUSR1)

    t = threading.Thread(target=poke)
    t.start()
    waiter = make_client().fair_lock(name)
    try:
        with pytest.raises(Interrupted):
            waiter.acquire(timeout=30)
    finally:
        signal.signal(signal.SIGUSR1, old)
        t.join()
    assert not r.exists(queue_key(name))
    assert waiter.state is redmutex.LockState.UNLOCKED
    holder.release()
    assert not r.exists(name)


def test_rwlock_readers_share_and_a_writer_excludes(client: redmutex.Client, r: redis.Redis) -> None:
    rw = client.rwlock("catalog")
    assert isinstance(rw, redmutex.ReadWriteLock)
    assert rw.read is rw.read and isinstance(rw.read, redmutex.ReadLock)
    assert isinstance(rw.write, redmutex.WriteLock) and rw.name == "catalog"
    both_in = threading.Barrier(3, timeout=10)
    leave = threading.Event()
    errors: list[BaseException] = []

    def reader() -> None:
        try:
            with rw.read:  # each thread is a reader of its own
                both_in.wait()
                leave.wait(10)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)

    readers = [threading.Thread(target=reader) for _ in range(2)]
    for t in readers:
        t.start()
    both_in.wait()  # two readers hold it at once
    assert r.hget("catalog", "mode") == b"read" and r.hlen("catalog") == 3
    assert rw.read.locked() and not rw.write.locked()
    assert rw.write.acquire(blocking=False) is False
    got: list[float] = []

    def writer() -> None:
        with rw.write:
            got.append(time.monotonic())
            assert r.hget("catalog", "mode") == b"write"

    w = threading.Thread(target=writer)
    w.start()
    wait_until(lambda: r.pubsub_numsub("redisson_rwlock:{catalog}")[0][1] >= 1, what="the writer to wait")
    assert not got  # readers are in: the writer waits
    left = time.monotonic()
    leave.set()
    for t in readers:
        t.join(10)
    w.join(10)
    assert not errors and got and got[0] - left < 2.0
    assert not r.exists("catalog")


def test_rwlock_writer_is_reentrant_and_may_read(client: redmutex.Client, r: redis.Redis) -> None:
    rw = client.rwlock("doc", fencing=True)
    with rw.write:
        with rw.write:
            assert rw.write.hold_count == 2
        with rw.read:  # the writer may read
            assert rw.read.hold_count == 1 and rw.read.locked()
        other = client.rwlock("doc", owner="someone-else")
        assert other.read.acquire(blocking=False) is False
        assert rw.write.fence is not None and rw.write.fence >= 1
    assert not r.exists("doc")
    with pytest.raises(redmutex.InvalidArgument):
        client.rwlock("doc", lease=-1)


def test_fair_lock_and_rlock_on_a_read_write_lock_raise_wrong_type(
    client: redmutex.Client, r: redis.Redis
) -> None:
    rw = client.rwlock("rw:kind", lease=30.0)
    for side in (rw.read, rw.write):
        with side:
            before = r.dump("rw:kind")
            for make in (client.fair_lock, client.rlock):
                lock = make("rw:kind", lease=5.0)
                started = time.monotonic()
                with pytest.raises(redmutex.WrongTypeError):
                    lock.acquire(timeout=2.0)
                assert time.monotonic() - started < 1.5, "it waited instead of failing"
                with pytest.raises(redmutex.WrongTypeError):
                    lock.locked()
                assert r.dump("rw:kind") == before
            assert r.keys("redisson_lock_queue:*") == []


def test_owned_is_false_for_a_reader_whose_hold_ran_out(client: redmutex.Client, r: redis.Redis) -> None:
    brief = client.rwlock("rw:owned", lease=0.3, owner="brief").read
    lasting = client.rwlock("rw:owned", lease=30.0, owner="lasting").read
    brief.acquire()
    lasting.acquire()
    assert brief.owned()
    wait_until(lambda: not r.exists("{rw:owned}:brief:rwlock_timeout:1"), what="the brief lease to end")
    assert r.hexists("rw:owned", "brief"), "the field stays while the other reader keeps the lock"
    assert not brief.owned()
    assert lasting.owned()
    with pytest.raises(redmutex.LockLostError):
        brief.release()
    lasting.release()


@pytest.mark.parametrize("owner", ["mode", "alice:write"])
def test_reader_owner_ids_that_are_reserved_fields_are_refused(
    client: redmutex.Client, r: redis.Redis, owner: str
) -> None:
    writer = client.rwlock("rw:reserved", owner="alice").write
    reader = client.rwlock("rw:reserved", owner=owner).read
    with pytest.raises(redmutex.InvalidArgument, match="cannot be used"):
        reader.acquire(blocking=False)
    assert r.dbsize() == 0
    with writer:
        before = r.hgetall("rw:reserved")
        with pytest.raises(redmutex.InvalidArgument):
            reader.acquire(blocking=False)
        assert r.hgetall("rw:reserved") == before
