"""Every public method and property of Client, Lock and RLock against a real Redis."""

from __future__ import annotations

import threading
import time

import pytest
import redis
import redmutex
from redmutex import LockState

from rmtest_util import wait_until


def test_client_basics(client, redis_url):
    assert len(client.id) == 36 and client.id.count("-") == 4
    assert client.server_count == 1
    assert not client.closed
    owner = client.thread_owner()
    assert owner.startswith(client.id + ":") and owner.split(":")[1].isdigit()
    assert "open" in repr(client)
    with redmutex.Client([redis_url]) as other:
        assert other.id != client.id
    assert other.closed


def test_plain_lock_acquire_release_is_redis_py_format(client, r):
    lock = client.lock("jobs:nightly")
    assert lock.name == "jobs:nightly"
    assert lock.state is LockState.UNLOCKED
    assert lock.acquire() is True
    assert lock.state is LockState.HELD and not lock.lost
    token = r.get("jobs:nightly")
    assert r.type("jobs:nightly") == b"string" and len(token) == 32
    assert lock.locked() and lock.owned() and lock.hold_count == 1
    lock.release()
    assert r.exists("jobs:nightly") == 0
    assert not lock.locked() and not lock.owned() and lock.hold_count == 0
    assert lock.state is LockState.UNLOCKED


def test_release_when_not_held_raises_not_owned(client):
    lock = client.lock("n")
    with pytest.raises(redmutex.NotOwnedError) as info:
        lock.release()
    assert info.value.code == redmutex.NotOwnedError.code
    assert "'n'" in str(info.value)


def test_nonblocking_and_timed_acquire(client):
    holder = client.lock("busy")
    other = client.lock("busy")
    assert holder.acquire(blocking=False)
    assert other.acquire(blocking=False) is False
    assert other.acquire(timeout=0) is False
    start = time.monotonic()
    assert other.acquire(timeout=0.3) is False
    elapsed = time.monotonic() - start
    assert 0.28 <= elapsed < 2.0
    assert other.locked() and not other.owned()
    holder.release()
    assert other.acquire(blocking=False)
    other.release()


def test_acquire_argument_rules_match_threading(client):
    lock = client.lock("args")
    reference = threading.Lock()
    for kwargs in ({"blocking": False, "timeout": 1}, {"timeout": -2}):
        with pytest.raises(ValueError):
            reference.acquire(**kwargs)
        with pytest.raises(ValueError):
            lock.acquire(**kwargs)
    with pytest.raises(redmutex.InvalidArgument):
        lock.acquire(False, 0.5)
    assert not lock.locked()  # nothing was sent that took it


def test_plain_lock_is_not_reentrant_and_any_thread_may_release(client):
    lock = client.lock("plain")
    assert lock.acquire()
    assert lock.acquire(timeout=0.2) is False  # like threading.Lock: would deadlock
    errors = []

    def release_elsewhere():
        try:
            lock.release()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    t = threading.Thread(target=release_elsewhere)
    t.start()
    t.join()
    assert not errors
    assert not lock.locked()


def test_two_lock_objects_exclude_each_other(client, make_client):
    a = client.lock("shared")
    b = make_client().lock("shared")
    with a:
        assert not b.acquire(blocking=False)
    assert b.acquire(blocking=False)
    b.release()


def test_with_returns_the_lock_and_uses_its_timeout(client):
    holder = client.lock("w")
    with client.lock("w", lease=5.0, timeout=2.0) as held:
        assert isinstance(held, redmutex.Lock)
        assert held.state is LockState.HELD
        assert 4.0 < held.ttl <= 5.0
        assert held.fence is None  # fencing is off
        start = time.monotonic()
        with pytest.raises(redmutex.LockTimeout) as info, client.lock("w", timeout=0.25):
            pytest.fail("acquired a held lock")
        assert 0.2 <= time.monotonic() - start < 2.0
        assert isinstance(info.value, TimeoutError)
        assert "held by another owner" in str(info.value)
        assert not holder.acquire(blocking=False)
    assert holder.acquire(blocking=False)
    holder.release()


def test_with_without_timeout_waits_for_release(client, make_client):
    holder = client.lock("wait")
    holder.acquire()
    waiter = make_client().lock("wait")
    entered = threading.Event()

    def run():
        with waiter:
            entered.set()

    t = threading.Thread(target=run)
    t.start()
    assert not entered.wait(0.3)
    holder.release()
    assert entered.wait(5), "the waiter did not get the released lock"
    t.join(5)


def test_with_releases_when_block_raises(client, r):
    lock = client.lock("boom")
    with pytest.raises(KeyError), lock:
        assert r.exists("boom")
        raise KeyError("inside")
    assert r.exists("boom") == 0
    assert lock.state is LockState.UNLOCKED


def test_explicit_lease_has_ttl_and_no_watchdog(client, r):
    lock = client.lock("lease", lease=2.0)
    assert lock.acquire()
    assert 0 < r.pttl("lease") <= 2000
    assert 1.0 < lock.validity < 2.0
    assert 1.0 < lock.ttl <= 2.0
    # Not renewed: the key expires on the server.
    wait_until(lambda: r.exists("lease") == 0, timeout=6, what="lease expiry")
    assert lock.ttl is None
    wait_until(lambda: lock.lost, timeout=3, what="local state LOST")
    assert lock.validity == 0.0
    with pytest.raises(redmutex.LockLostError):
        lock.release()
    assert lock.state is LockState.UNLOCKED


def test_watchdog_renews_lock_without_lease(make_client, r):
    c = make_client(watchdog_lease=1.0)
    lock = c.lock("renewed")
    assert lock.acquire()
    # Across several leases the key stays and its TTL keeps being pushed back.
    deadline = time.monotonic() + 3.5
    while time.monotonic() < deadline:
        assert r.exists("renewed") == 1
        assert 0 < r.pttl("renewed") <= 1000
        time.sleep(0.05)
    assert lock.state is LockState.HELD
    lock.release()
    assert r.exists("renewed") == 0


def test_extend_add_and_replace(client, r):
    lock = client.lock("ext", lease=1.0)
    with pytest.raises(redmutex.NotOwnedError):
        lock.extend(1.0)
    lock.acquire()
    lock.extend(10.0)
    assert 10_000 < r.pttl("ext") <= 11_000
    assert lock.validity > 9.0
    lock.extend(2.0, replace=True)
    assert 1_000 < r.pttl("ext") <= 2_000
    lock.release()


def test_max_extensions_caps_extend(client):
    lock = client.lock("cap", lease=5.0, max_extensions=1)
    lock.acquire()
    lock.extend(1.0)
    with pytest.raises(redmutex.LimitError):
        lock.extend(1.0)
    lock.release()


def test_max_hold_stops_the_watchdog(make_client, r):
    c = make_client(watchdog_lease=0.3)
    lost = threading.Event()
    lock = c.lock("maxhold", max_hold=0.4, on_lost=lambda lk, st: st == LockState.LOST and lost.set())
    start = time.monotonic()
    lock.acquire()
    assert lost.wait(5), "on_lost did not report the end of a capped hold"
    assert time.monotonic() - start >= 0.4
    # Local validity ends a drift allowance before the server's TTL does.
    wait_until(lambda: r.exists("maxhold") == 0, timeout=2, what="key expiry")
    with pytest.raises(redmutex.LockLostError):
        lock.release()


def test_force_release_deletes_any_holder(client, make_client, r):
    holder = make_client().lock("force")
    holder.acquire()
    other = client.lock("force")
    assert other.force_release() is True
    assert r.exists("force") == 0
    assert other.force_release() is False
    with pytest.raises(redmutex.LockLostError):
        holder.release()


def test_fencing_tokens_increase(client, r):
    lock = client.lock("fenced", fencing=True)
    assert lock.fencing
    assert lock.fence is None  # not held
    tokens = []
    for _ in range(3):
        with lock:
            tokens.append(lock.fence)
    assert all(isinstance(t, int) for t in tokens)
    assert tokens == sorted(tokens) and len(set(tokens)) == 3
    assert int(r.get("redisson_lock_token:{fenced}")) == tokens[-1]
    other = client.lock("fenced", fencing=True)
    with other:
        assert other.fence > tokens[-1]


def test_rlock_reentrancy_counts(client, r):
    rl = client.rlock("orders:42", fencing=True)
    assert isinstance(rl, redmutex.RLock)
    with rl:
        field = client.thread_owner().encode()
        assert r.type("orders:42") == b"hash"
        assert r.hget("orders:42", field) == b"1"
        fence = rl.fence
        with rl:
            assert rl.hold_count == 2
            assert rl.fence == fence  # reentrant acquires keep the outer token
            assert rl.acquire(blocking=False)
            assert rl.hold_count == 3
            rl.release()
        assert rl.hold_count == 1
    assert rl.hold_count == 0
    assert r.exists("orders:42") == 0


def test_rlock_owner_is_the_thread(client):
    rl = client.rlock("per-thread")
    rl.acquire()
    result = {}

    def other_thread():
        result["try"] = rl.acquire(blocking=False)
        try:
            rl.release()
        except redmutex.NotOwnedError:
            result["release"] = "not owner"
        result["owned"] = rl.owned()

    t = threading.Thread(target=other_thread)
    t.start()
    t.join()
    assert result == {"try": False, "release": "not owner", "owned": False}
    assert rl.owned()
    rl.release()


def test_explicit_owner_lets_another_thread_release(client, r):
    owner = f"{client.id}:task-7"
    rl = client.rlock("tasks", owner=owner)
    assert rl.owner == owner.encode()
    rl.acquire()
    assert r.hget("tasks", owner) == b"1"
    t = threading.Thread(target=client.rlock("tasks", owner=owner).release)
    t.start()
    t.join()
    assert r.exists("tasks") == 0

    plain = client.lock("plain-owned", owner=b"token-123")
    plain.acquire()
    assert r.get("plain-owned") == b"token-123"
    assert client.lock("plain-owned", owner="token-123").owned()
    client.lock("plain-owned", owner="token-123").release()
    assert r.exists("plain-owned") == 0


def test_bytes_and_unicode_names(client, r):
    with client.lock("zürich-ключ") as a:
        assert r.exists("zürich-ключ".encode()) == 1
        assert a.name == "zürich-ключ"
    with client.lock(b"\xffraw") as b:
        assert r.exists(b"\xffraw") == 1
        assert b.name == b"\xffraw"


def test_wrong_type_key(client, r):
    r.hset("h", "f", "v")
    with pytest.raises(redmutex.WrongTypeError):
        client.lock("h").acquire()
    r.set("s", "v")
    with pytest.raises(redmutex.WrongTypeError):
        client.rlock("s").acquire(blocking=False)
    assert r.get("s") == b"v"


def test_synchronized_decorator(client, r):
    seen = []

    @client.synchronized("deco", timeout=5.0)
    def work(x):
        """Docstring kept."""
        seen.append(r.exists("deco"))
        return x * 2

    assert work(21) == 42
    assert work.__name__ == "work" and work.__doc__ == "Docstring kept."
    assert seen == [1] and r.exists("deco") == 0

    @client.synchronized("deco-r", reentrant=True)
    def fact(n):
        return 1 if n <= 1 else n * fact(n - 1)

    assert fact(5) == 120

    with client.lock("deco"):

        @client.synchronized("deco", timeout=0.2)
        def blocked():
            pytest.fail("ran without the lock")

        with pytest.raises(redmutex.LockTimeout):
            blocked()

    with pytest.raises(redmutex.InvalidArgument):
        client.synchronized("")
    with pytest.raises(TypeError):

        @client.synchronized("x")
        async def coro():
            pass


def test_connection_error(make_client):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    c = redmutex.Client(f"redis://127.0.0.1:{port}", connect_timeout=0.5)
    try:
        with pytest.raises(redmutex.ConnectionError) as info:
            c.lock("x").acquire()
        assert isinstance(info.value, ConnectionError)
        assert str(port) in str(info.value)
    finally:
        c.close()


def test_gil_is_released_while_waiting(client, make_client):
    holder = client.lock("gil")
    holder.acquire()
    waiter = make_client().lock("gil")
    done = threading.Event()
    t = threading.Thread(target=lambda: (waiter.acquire(timeout=1.0), done.set()))
    t.start()
    # While the other thread waits inside C, this thread keeps running Python.
    count = 0
    while not done.is_set():
        count += 1
    t.join()
    assert count > 10_000
    holder.release()


def test_redis_auth_and_db_from_url(redis_server, r):
    r.config_set("requirepass", "s3cret")
    try:
        bad = redmutex.Client(redis_server.url + "/0")
        with pytest.raises(redmutex.AuthError):
            bad.lock("a").acquire()
        bad.close()
        good = redmutex.Client(f"redis://:s3cret@127.0.0.1:{redis_server.port}/3")
        with good.lock("in-db-3"):
            r2 = redis.Redis(port=redis_server.port, password="s3cret", db=3)
            assert r2.exists("in-db-3") == 1
        good.close()
        assert "s3cret" not in repr(good)
    finally:
        redis.Redis(port=redis_server.port, password="s3cret").config_set("requirepass", "")


def test_explicit_owners_let_asyncio_tasks_on_one_thread_exclude_each_other(client):
    import asyncio

    order = []

    async def task(n):
        owner = f"{client.id}:task:{n}"
        lock = client.rlock("asyncio", owner=owner)
        # Both tasks run on the event loop's thread: the default (per-thread)
        # owner would let the second one in; explicit owners do not.
        while not lock.acquire(blocking=False):
            await asyncio.sleep(0.01)
        order.append(("in", n))
        await asyncio.sleep(0.05)
        order.append(("out", n))
        lock.release()

    async def main():
        await asyncio.gather(task(1), task(2))

    asyncio.run(main())
    assert len(order) == 4
    assert order[0][0] == "in" and order[1] == ("out", order[0][1])
    assert order[2][0] == "in" and order[3] == ("out", order[2][1])
