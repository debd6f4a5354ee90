"""Mutual exclusion across threads and processes, and a killed holder."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import redis
import redmutex

from rmtest_util import wait_until

# A read-modify-write with a pause in the middle: without the lock, concurrent
# increments are lost almost every time.
INCREMENTS = 25


def unsafe_increment(conn: redis.Redis, key: str) -> None:
    value = int(conn.get(key) or 0)
    time.sleep(0.001)
    conn.set(key, value + 1)


def test_unprotected_increments_do_lose_updates(redis_server, r):
    # Proves the workload detects a broken lock.
    def worker():
        conn = redis.Redis(port=redis_server.port)
        for _ in range(INCREMENTS):
            unsafe_increment(conn, "counter")

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert int(r.get("counter")) < 8 * INCREMENTS


@pytest.mark.parametrize("kind", ["lock", "rlock"])
def test_eight_threads_sharing_one_client_stay_exact(client, redis_server, r, kind):
    errors = []

    def worker():
        conn = redis.Redis(port=redis_server.port)
        try:
            for _ in range(INCREMENTS):
                with getattr(client, kind)("counter-lock", timeout=30):
                    unsafe_increment(conn, "counter")
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert int(r.get("counter")) == 8 * INCREMENTS
    assert r.exists("counter-lock") == 0


def test_threads_sharing_one_plain_lock_object(client, redis_server, r):
    lock = client.lock("one-object")
    errors = []

    def worker():
        conn = redis.Redis(port=redis_server.port)
        try:
            for _ in range(INCREMENTS):
                with lock:
                    unsafe_increment(conn, "counter")
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert int(r.get("counter")) == 8 * INCREMENTS


WORKER = textwrap.dedent(
    """
    import sys, time, redis, redmutex
    url, port, n, kind = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    conn = redis.Redis(port=port)
    with redmutex.Client(url) as client:
        for _ in range(n):
            with getattr(client, kind)("proc-lock", timeout=60):
                value = int(conn.get("counter") or 0)
                time.sleep(0.001)
                conn.set("counter", value + 1)
    """
)


@pytest.mark.parametrize("kind", ["lock", "rlock"])
def test_four_processes_stay_exact(redis_server, r, tmp_path, kind):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), redis_server.url, str(redis_server.port), str(INCREMENTS), kind]
        )
        for _ in range(4)
    ]
    for p in procs:
        assert p.wait(120) == 0
    assert int(r.get("counter")) == 4 * INCREMENTS


def _forked_worker(url: str, port: int) -> None:
    conn = redis.Redis(port=port)
    with redmutex.Client(url) as client:
        for _ in range(INCREMENTS):
            with client.lock("fork-lock", timeout=60):
                unsafe_increment(conn, "counter")


def test_four_forked_processes_stay_exact(redis_server, r, client):
    import multiprocessing

    # A client (with its threads) exists in the parent while it forks.
    with client.lock("parent-holds-this"):
        ctx = multiprocessing.get_context("fork")
        procs = [
            ctx.Process(target=_forked_worker, args=(redis_server.url, redis_server.port)) for _ in range(4)
        ]
        for p in procs:
            p.start()
        for p in procs:
            p.join(120)
            assert p.exitcode == 0
    assert int(r.get("counter")) == 4 * INCREMENTS


HOLDER = textwrap.dedent(
    """
    import sys, time, redmutex
    client = redmutex.Client(sys.argv[1], watchdog_lease=float(sys.argv[2]))
    lock = client.lock("killed")
    lock.acquire()
    print("held", flush=True)
    time.sleep(3600)
    """
)


def test_holder_killed_with_sigkill_frees_the_lock_after_its_lease(redis_server, r, tmp_path, client):
    script = tmp_path / "holder.py"
    script.write_text(HOLDER)
    lease = 1.0
    p = subprocess.Popen(
        [sys.executable, str(script), redis_server.url, str(lease)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert p.stdout.readline().strip() == "held"
        # The watchdog keeps it alive well past one lease while the holder lives.
        lock = client.lock("killed")
        assert lock.acquire(timeout=lease * 1.5) is False
        os.kill(p.pid, signal.SIGKILL)
        p.wait(10)
        killed_at = time.monotonic()
        assert lock.acquire(timeout=10), "the lock of a killed holder was never freed"
        waited = time.monotonic() - killed_at
        assert waited <= lease + 1.0
        lock.release()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_forked_child_cannot_release_the_parents_lock(client, r):
    lock = client.lock("parent-lock")
    lock.acquire()
    pid = os.fork()
    if pid == 0:  # child
        code = 1
        try:
            try:
                lock.release()
            except redmutex.ForkedError:
                # The child can still use the inherited client for its own locks.
                with client.lock("child-lock", timeout=5):
                    code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert lock.owned()
    lock.release()


def test_sigkill_of_a_waiter_does_not_disturb_the_holder(redis_server, r, tmp_path, client):
    holder = client.lock("w-killed")
    holder.acquire()
    script = tmp_path / "waiter.py"
    script.write_text("import sys, redmutex\nredmutex.Client(sys.argv[1]).lock('w-killed').acquire()\n")
    p = subprocess.Popen([sys.executable, str(script), redis_server.url])
    wait_until(
        lambda: r.pubsub_numsub("redisson_lock__channel:{w-killed}")[0][1] >= 1,
        timeout=10,
        what="the waiter to subscribe",
    )
    p.kill()
    p.wait(10)
    assert holder.owned()
    holder.release()
