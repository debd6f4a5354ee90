"""A redis-py Lock and a redmutex plain lock on the same key exclude each other."""

from __future__ import annotations

import threading
import time

import pytest
from redis.lock import Lock as RedisPyLock

from rmtest_util import wait_until


def test_redispy_holder_blocks_redmutex(client, r):
    theirs = RedisPyLock(r, "shared", timeout=30)
    assert theirs.acquire(blocking=False)
    ours = client.lock("shared")
    assert ours.acquire(blocking=False) is False
    assert ours.acquire(timeout=0.3) is False
    assert ours.locked() and not ours.owned()
    assert 0 < ours.ttl <= 30
    theirs.release()
    assert ours.acquire(blocking=False)
    ours.release()


def test_redmutex_holder_blocks_redispy(client, r):
    ours = client.lock("shared")
    ours.acquire()
    theirs = RedisPyLock(r, "shared", timeout=30, blocking_timeout=0.3)
    assert theirs.acquire() is False
    assert theirs.locked()
    ours.release()
    assert theirs.acquire()
    assert not ours.acquire(blocking=False)
    theirs.release()


def test_redispy_can_extend_and_release_only_its_own(client, r):
    ours = client.lock("shared", lease=5.0)
    ours.acquire()
    theirs = RedisPyLock(r, "shared", timeout=30)
    assert not theirs.owned()
    # redis-py's lock with our token (same wire format) may act on it.
    token = r.get("shared")
    same = RedisPyLock(r, "shared", timeout=30)
    same.local.token = token
    assert same.owned()
    same.extend(10)
    assert r.pttl("shared") > 10_000
    ours.release()


@pytest.mark.parametrize("lease", [None, 2.0])
def test_waiter_gets_the_lock_soon_after_redispy_releases(make_client, r, lease):
    # redis-py does not publish its releases: the waiter notices within the backoff cap.
    cap = 0.1
    c = make_client(wait_backoff_cap=cap)
    theirs = RedisPyLock(r, "handoff", timeout=None)  # redis-py's default: no TTL at all
    theirs.acquire()
    ours = c.lock("handoff", lease=lease)
    got = {}

    def wait():
        ok = ours.acquire(timeout=20)
        got["at"] = time.monotonic()
        got["ok"] = ok

    t = threading.Thread(target=wait)
    t.start()
    time.sleep(0.5)  # let the waiter settle into its capped backoff
    assert "ok" not in got
    released_at = time.monotonic()
    theirs.release()
    t.join(20)
    assert got["ok"]
    assert got["at"] - released_at <= cap + 0.5  # the default 1 s cap would take longer
    ours.release()


def test_waiter_gets_the_lock_when_the_redispy_ttl_runs_out(client, r):
    theirs = RedisPyLock(r, "expiring", timeout=0.6)
    theirs.acquire()
    start = time.monotonic()
    ours = client.lock("expiring")
    assert ours.acquire(timeout=10)
    waited = time.monotonic() - start
    # It retries when the holder's TTL ends, not a backoff cap later.
    assert 0.5 <= waited <= 0.6 + 0.3
    ours.release()


def test_redispy_waiter_gets_the_lock_after_redmutex_releases(client, r):
    ours = client.lock("reverse")
    ours.acquire()
    theirs = RedisPyLock(r, "reverse", timeout=30, sleep=0.01, thread_local=False)
    got = threading.Event()
    t = threading.Thread(target=lambda: theirs.acquire(blocking_timeout=10) and got.set())
    t.start()
    assert not got.wait(0.2)
    ours.release()
    assert got.wait(5)
    t.join()
    wait_until(lambda: theirs.owned(), timeout=1)
    theirs.release()
