"""Semaphores, count-down latches and multi-locks from Python (blocking API).

Each behaviour against a real redis-server; the wire formats are Redisson's
(tests/python/test_interop_redisson.py runs the real Java peer).
"""

from __future__ import annotations

import math
import threading
import time
from typing import Callable

import pytest
import redis
import redmutex

from rmtest_util import wait_until

# ---- semaphores ---------------------------------------------------------------


def test_with_holds_one_permit_in_redissons_keys(client: redmutex.Client, r: redis.Redis) -> None:
    sem = client.semaphore("jobs", 3)
    with sem:
        assert int(r.get("jobs")) == 2
        ((member, _score),) = r.zrange("{jobs}:timeout", 0, -1, withscores=True)
        assert len(member) == 16 and member.hex() == sem.permit_id
        assert sem.state == redmutex.LockState.HELD
        assert sem.held == [sem.permit_id]
    assert int(r.get("jobs")) == 3
    assert r.zcard("{jobs}:timeout") == 0
    assert sem.permit_id is None and sem.held == []


def test_acquire_and_release_follow_threading_semaphore(client: redmutex.Client, r: redis.Redis) -> None:
    sem = client.semaphore("pool", 3)
    assert sem.acquire(permits=2)
    assert sem.available() == 1
    assert not sem.acquire(permits=2, blocking=False)
    assert sem.acquire(blocking=False)
    assert not sem.acquire(timeout=0.2)
    first, second = sem.held
    assert first.endswith("*2") and "*" not in second
    sem.release()  # the most recent
    assert sem.held == [first]
    # Released from another thread: a semaphore is not owned by a thread.
    t = threading.Thread(target=sem.release)
    t.start()
    t.join()
    assert sem.held == [] and sem.available() == 3
    with pytest.raises(redmutex.NotOwnedError):
        sem.release()
    with pytest.raises(redmutex.NotOwnedError):
        sem.release("0123456789abcdef0123456789abcdef")


def test_exactly_n_holders_at_once_across_threads(make_client: Callable[..., redmutex.Client]) -> None:
    inside, most, errors = [0], [0], []
    mu = threading.Lock()

    def worker() -> None:
        sem = make_client().semaphore("three", 3)
        for _ in range(40):
            try:
                with sem:
                    with mu:
                        inside[0] += 1
                        most[0] = max(most[0], inside[0])
                    time.sleep(0.001)
                    with mu:
                        inside[0] -= 1
            except Exception as e:  # noqa: BLE001 - collected for the assertion
                errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors
    assert most[0] == 3


@pytest.mark.parametrize(
    "bad",
    [
        lambda c: c.semaphore("bad", 0),
        lambda c: c.semaphore("bad", -2),
        lambda c: c.semaphore("bad", 2.5),
        lambda c: c.semaphore("bad", True),
        lambda c: c.semaphore("", 3),
        lambda c: c.semaphore("bad", 3, lease=math.nan),
        lambda c: c.semaphore("bad", 3, timeout=math.nan),
        lambda c: c.semaphore("bad", 3).acquire(permits=0),
        lambda c: c.semaphore("bad", 3).acquire(permits=-1),
        lambda c: c.semaphore("bad", 3).acquire(permits=4),
        lambda c: c.semaphore("bad", 3).acquire(timeout=math.nan),
        lambda c: c.semaphore("bad", 3).acquire(timeout=-5),
        lambda c: c.semaphore("bad", 3).acquire(blocking=False, timeout=1),
        lambda c: c.semaphore("bad", 3).release("not a permit id"),
        lambda c: c.semaphore("bad", 3).extend(math.nan, permit_id="0123456789abcdef0123456789abcdef"),
    ],
)
def test_bad_input_is_refused_and_changes_nothing(
    client: redmutex.Client, r: redis.Redis, bad: Callable
) -> None:
    with pytest.raises(redmutex.InvalidArgument):
        bad(client)
    assert r.keys("*") == []


def test_another_capacity_is_an_error_unless_resized(client: redmutex.Client, r: redis.Redis) -> None:
    three = client.semaphore("cap", 3)
    assert three.acquire()
    before = (r.get("cap"), r.zrange("{cap}:timeout", 0, -1, withscores=True))
    with pytest.raises(redmutex.InvalidArgument, match="has 3 permits"):
        client.semaphore("cap", 5).acquire()
    assert (r.get("cap"), r.zrange("{cap}:timeout", 0, -1, withscores=True)) == before
    bigger = client.semaphore("cap", 5, resize=True)
    assert bigger.acquire()
    assert bigger.available() == 3
    bigger.release()
    three.release()


def test_a_permit_taken_away_is_reported_lost(
    make_client: Callable[..., redmutex.Client], r: redis.Redis
) -> None:
    client = make_client(watchdog_lease=0.6)
    news: list[tuple[redmutex.LockState, str]] = []
    sem = client.semaphore("gone", 2, on_lost=lambda s, state, permit: news.append((state, permit)))
    with pytest.raises(redmutex.LockLostError), sem:
        permit = sem.permit_id
        r.delete("{gone}:timeout")
        wait_until(lambda: news, what="the lost-permit callback")
    assert news[0] == (redmutex.LockState.LOST, permit)


def test_the_watchdog_keeps_a_permit_past_ten_leases(
    make_client: Callable[..., redmutex.Client], r: redis.Redis
) -> None:
    holder = make_client(watchdog_lease=0.3).semaphore("long", 1)
    other = make_client().semaphore("long", 1)
    with holder:
        end = time.monotonic() + 3.3
        while time.monotonic() < end:
            assert not other.acquire(blocking=False)
            assert holder.state == redmutex.LockState.HELD
            time.sleep(0.05)
    assert other.acquire(blocking=False)
    other.release()


def test_fencing_tokens_grow(client: redmutex.Client) -> None:
    sem = client.semaphore("fenced", 2, fencing=True)
    with sem:
        a = sem.fence
        with sem:
            b = sem.fence
    assert a is not None and b is not None and b > a
    assert sem.fence is None


def test_a_waiter_is_woken_by_a_release(make_client: Callable[..., redmutex.Client]) -> None:
    holder = make_client().semaphore("wake", 1)
    waiter = make_client(wait_backoff_cap=20.0).semaphore("wake", 1)
    got: list[float] = []
    assert holder.acquire()

    def wait() -> None:
        assert waiter.acquire(timeout=30)
        got.append(time.monotonic())
        waiter.release()

    t = threading.Thread(target=wait)
    t.start()
    time.sleep(1.0)
    released = time.monotonic()
    holder.release()
    t.join(30)
    assert got and got[0] - released < 0.7


# ---- latches ------------------------------------------------------------------


def test_latch_counts_down_and_releases_its_waiters(client: redmutex.Client, r: redis.Redis) -> None:
    latch = client.latch("gate")
    assert latch.count == 0 and latch.wait(0)
    assert latch.try_set_count(2)
    assert not latch.try_set_count(7)
    assert int(r.get("gate")) == 2 and latch.count == 2
    assert not latch.wait(0.2)
    done: list[bool] = []
    threads = [threading.Thread(target=lambda: done.append(latch.wait(30))) for _ in range(3)]
    for t in threads:
        t.start()
    latch.count_down()
    assert latch.count == 1
    r.eval(
        "local v = redis.call('decr', KEYS[1]);if v <= 0 then redis.call('del', KEYS[1]) end;"
        "if v == 0 then redis.call(ARGV[2], KEYS[2], ARGV[1]) end;",
        2,
        "gate",
        "redisson_countdownlatch__channel__{gate}",
        0,
        "publish",
    )
    for t in threads:
        t.join(30)
    assert done == [True, True, True]
    assert latch.count == 0 and not r.exists("gate")


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "3"])
def test_latch_bad_counts_are_refused(client: redmutex.Client, r: redis.Redis, bad: object) -> None:
    with pytest.raises(redmutex.InvalidArgument):
        client.latch("bad").try_set_count(bad)  # type: ignore[arg-type]
    with pytest.raises(redmutex.InvalidArgument):
        client.latch("bad").wait(math.nan)
    assert r.keys("*") == []


# ---- multi-locks ------------------------------------------------------------------


def test_multi_lock_holds_all_or_nothing(make_client: Callable[..., redmutex.Client], r: redis.Redis) -> None:
    client, other = make_client(), make_client()
    a, b, c = client.lock("m:a"), client.rlock("m:b"), client.rwlock("m:c").write
    multi = client.multi_lock([a, b, c])
    blocker = other.rlock("m:b")
    assert blocker.acquire()
    assert not multi.acquire(blocking=False)
    assert not r.exists("m:a") and not r.exists("m:c")
    blocker.release()
    with multi:
        assert r.exists("m:a") and r.exists("m:b") and r.exists("m:c")
        assert a.state == b.state == c.state == redmutex.LockState.HELD
        assert not other.lock("m:a").acquire(blocking=False)
    assert r.keys("m:*") == []


def test_multi_locks_in_opposite_orders_never_deadlock(make_client: Callable[..., redmutex.Client]) -> None:
    errors: list[BaseException] = []
    rounds = [0]

    def worker(names: list[str]) -> None:
        c = make_client()
        multi = c.multi_lock([c.lock(n) for n in names], timeout=30)
        try:
            for _ in range(100):
                with multi:
                    rounds[0] += 1
        except BaseException as e:  # noqa: BLE001 - collected for the assertion
            errors.append(e)

    names = ["d:x", "d:y", "d:z"]
    threads = [threading.Thread(target=worker, args=(n,)) for n in (names, names[::-1])]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors and rounds[0] == 200


def test_multi_lock_bad_input(make_client: Callable[..., redmutex.Client], r: redis.Redis) -> None:
    client, other = make_client(), make_client()
    with pytest.raises(redmutex.InvalidArgument):
        client.multi_lock([])
    with pytest.raises(redmutex.InvalidArgument):
        client.multi_lock([client.lock("x"), other.lock("y")])
    with pytest.raises(redmutex.InvalidArgument):
        client.multi_lock([client.lock("x"), client.lock("x")])
    with pytest.raises(redmutex.InvalidArgument):
        client.multi_lock([client.lock("x", owner="a"), client.lock("y", owner="b")])
    with pytest.raises(redmutex.InvalidArgument):
        client.multi_lock(["x"])  # type: ignore[list-item]
    with pytest.raises(redmutex.InvalidArgument):
        client.multi_lock([client.lock("x")]).acquire(timeout=math.nan)
    assert r.keys("*") == []
