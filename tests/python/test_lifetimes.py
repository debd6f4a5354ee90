"""Lifetimes: finalizers never block, on_lost may drop its lock, garbage-collected locks are
released by close(), no Python code on the core's watchdog thread."""

from __future__ import annotations

import gc
import signal
import threading
import time
import weakref

import pytest
import redmutex
from redmutex import LockState

from conftest import RedisServer
from rmtest_util import wait_until


def test_on_lost_dropping_the_last_reference_to_its_lock_does_not_stall_anything(make_client, r):
    # A registry that forgets a lock when it is lost: the callable drops the
    # last reference, so the lock object is collected on the thread running it.
    c = make_client(watchdog_lease=0.9, shutdown_timeout=2.0)
    registry = {}
    dropped = threading.Event()

    def forget(lock, state):
        if state is LockState.LOST:
            registry.pop(lock.name)
            dropped.set()

    registry["victim"] = c.lock("victim", on_lost=forget)
    registry["victim"].acquire()
    ref = weakref.ref(registry["victim"])
    other = c.lock("other")
    other.acquire()
    r.delete("victim")
    assert dropped.wait(5)
    gc.collect()
    assert "victim" not in registry
    wait_until(lambda: ref() is None, timeout=2, what="the lock object to be collected")
    # The other lock keeps being renewed: nothing is stuck (a stuck watchdog
    # would let it expire within one lease).
    deadline = time.monotonic() + 2.7
    while time.monotonic() < deadline:
        assert r.pttl("other") > 0
        time.sleep(0.02)
    start = time.monotonic()
    c.close()
    assert time.monotonic() - start < 1.5
    assert r.exists("other") == 0


def test_garbage_collected_held_lock_is_released_by_close(make_client, r):
    c = make_client()  # watchdog lease 30 s: without the close the key would stay that long
    lk = c.lock("collected-held")
    lk.acquire()
    rl = c.rlock("collected-rheld")
    rl.acquire()
    del lk, rl
    gc.collect()
    assert r.exists("collected-held", "collected-rheld") == 2  # not released by the collection
    c.close()
    assert r.exists("collected-held", "collected-rheld") == 0


def test_client_and_lock_collected_together_release_in_the_background(redis_url, r):
    c = redmutex.Client(redis_url)
    lk = c.lock("together")
    lk.acquire()
    start = time.monotonic()
    del c, lk
    gc.collect()
    assert time.monotonic() - start < 0.5
    wait_until(lambda: r.exists("together") == 0, timeout=5, what="the background close")


def test_finalizers_never_block_with_a_stopped_server(tmp_path):
    server = RedisServer(str(tmp_path))
    server.start()
    try:
        c = redmutex.Client(server.url, command_timeout=2.0, shutdown_timeout=5.0)
        locks = [c.lock(f"held-{i}") for i in range(3)]
        for lk in locks:
            lk.acquire()
        watched = c.lock("watched", on_lost=lambda lock, state: None)  # starts the event thread
        watched.acquire()
        server.proc.send_signal(signal.SIGSTOP)
        try:
            time.sleep(0.1)
            start = time.monotonic()
            del locks, watched, c
            gc.collect()
            took = time.monotonic() - start
        finally:
            server.proc.send_signal(signal.SIGCONT)
        # A blocking close would take up to the 5 s shutdown timeout here (at
        # least a 2 s command timeout); the bound leaves room for a loaded machine.
        assert took < 1.0, took
    finally:
        server.stop()


def test_no_event_thread_without_on_lost(make_client, r):
    before = {t.name for t in threading.enumerate()}
    c = make_client(watchdog_lease=0.3)
    lk = c.lock("quiet")
    lk.acquire()
    r.delete("quiet")
    wait_until(lambda: lk.lost, timeout=5, what="the loss")
    started = {t.name for t in threading.enumerate()} - before
    assert not any(n.startswith("redmutex-events-") for n in started), started
    with pytest.raises(redmutex.LockLostError):
        lk.release()


def test_on_lost_runs_on_one_event_thread_per_client(make_client, r):
    c = make_client(watchdog_lease=0.3)
    names = []
    lost = threading.Event()

    def record(lock, state):
        names.append(threading.current_thread().name)
        if len(names) == 2:
            lost.set()

    a = c.lock("ev-a", on_lost=record)
    b = c.rlock("ev-b", on_lost=record)
    a.acquire()
    b.acquire()
    r.delete("ev-a", "ev-b")
    assert lost.wait(5)
    assert len(set(names)) == 1 and names[0].startswith("redmutex-events-")
    assert threading.current_thread().name not in names


def test_lock_lost_error_is_a_not_owned_error(make_client, r):
    assert issubclass(redmutex.LockLostError, redmutex.NotOwnedError)
    c = make_client()
    lk = c.lock("taken-over", lease=0.2)
    lk.acquire()
    wait_until(lambda: r.exists("taken-over") == 0, timeout=3, what="the lease to end")
    r.set("taken-over", "another owner's token")
    # Code written for redis-py catches "not owned" here.
    with pytest.raises(redmutex.NotOwnedError) as info:
        lk.release()
    assert isinstance(info.value, redmutex.LockLostError)
    assert info.value.code == redmutex.LockLostError.code
