"""Closing clients: locks released or left, waiting threads, garbage collection."""

from __future__ import annotations

import gc
import threading
import time
import weakref

import redmutex

from rmtest_util import channel, wait_until


def test_close_releases_held_locks(redis_url, r):
    with redmutex.Client(redis_url) as c:
        lock = c.lock("a")
        lock.acquire()
        rl = c.rlock("b")
        rl.acquire()
        rl.acquire()
        assert r.exists("a", "b") == 2
    assert r.exists("a", "b") == 0


def test_leave_locks_on_close(redis_url, r):
    c = redmutex.Client(redis_url, leave_locks_on_close=True, watchdog_lease=5.0)
    lock = c.lock("left")
    lock.acquire()
    c.close()
    assert r.exists("left") == 1
    assert 0 < r.pttl("left") <= 5000


def test_close_while_another_thread_waits(redis_url, r, client):
    holder = client.lock("hold")
    holder.acquire()
    c = redmutex.Client(redis_url)
    waiter = c.lock("hold")
    result = {}

    def wait():
        try:
            result["value"] = waiter.acquire()
        except BaseException as e:  # noqa: BLE001 - the test inspects it
            result["error"] = e

    t = threading.Thread(target=wait)
    t.start()
    wait_until(lambda: r.pubsub_numsub(channel("hold"))[0][1] >= 1, timeout=10)
    start = time.monotonic()
    c.close()
    t.join(10)
    assert not t.is_alive()
    assert time.monotonic() - start < 8  # a waiting slice is at most 5 s
    assert isinstance(result.get("error"), redmutex.ClosedError), result
    assert holder.owned()
    holder.release()


def test_garbage_collected_client_is_closed_and_releases(redis_url, r):
    c = redmutex.Client(redis_url)
    lock = c.lock("gc")
    lock.acquire()
    ref = weakref.ref(c)
    del c, lock
    gc.collect()
    assert ref() is None
    assert r.exists("gc") == 0


def test_lock_keeps_its_client_alive(redis_url, r):
    lock = redmutex.Client(redis_url).lock("alive")
    gc.collect()
    with lock:
        assert r.exists("alive")
    assert not lock.client.closed
    lock.client.close()


def test_many_lock_objects_are_freed(client, r):
    for i in range(2000):
        lk = client.lock(f"many-{i % 10}")
        if i % 100 == 0:
            with lk:
                pass
    gc.collect()
    assert r.keys("many-*") == []


def test_lock_dropped_while_held_stops_renewal(make_client, r):
    c = make_client(watchdog_lease=0.3)
    lk = c.lock("dropped-held")
    lk.acquire()
    del lk
    gc.collect()
    wait_until(lambda: r.exists("dropped-held") == 0, timeout=3, what="expiry")


def test_client_left_open_releases_its_locks_at_interpreter_exit(redis_server, r, tmp_path):
    import subprocess
    import sys

    script = tmp_path / "exit.py"
    script.write_text(
        "import sys, redmutex\n"
        "c = redmutex.Client(sys.argv[1])\n"
        "lock = c.lock('at-exit')\n"
        "lock.acquire()\n"
        "print(c.id)\n"
    )
    out = subprocess.run(
        [sys.executable, str(script), redis_server.url], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    assert r.exists("at-exit") == 0
