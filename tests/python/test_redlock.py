"""A client made with several URLs runs every lock on all of them (Redlock)."""

from __future__ import annotations

import os
import signal
import threading

import pytest
import redis
import redmutex
from redmutex import LockState

from conftest import RedisServer


@pytest.fixture(scope="module")
def three_servers(tmp_path_factory):
    servers = []
    try:
        for i in range(3):
            s = RedisServer(str(tmp_path_factory.mktemp(f"redlock{i}")))
            s.start()
            servers.append(s)
        yield servers
    finally:
        for s in servers:
            s.stop()


@pytest.fixture
def conns(three_servers):
    cs = [redis.Redis(port=s.port) for s in three_servers]
    for c in cs:
        c.flushall()
    return cs


def test_lock_is_taken_on_every_server(three_servers, conns):
    with redmutex.Client([s.url for s in three_servers]) as c:
        assert c.server_count == 3
        with c.lock("quorum", fencing=True) as lock:
            values = [r.get("quorum") for r in conns]
            assert values[0] and values.count(values[0]) == 3
            assert lock.fence >= 1
            assert lock.locked() and lock.owned()
        assert all(r.exists("quorum") == 0 for r in conns)


def test_majority_is_enough_and_minority_is_not(three_servers, conns):
    urls = [s.url for s in three_servers]
    with redmutex.Client(urls) as c:
        conns[0].set("split", "someone-else")
        with c.lock("split", timeout=1.0):
            assert conns[1].exists("split") and conns[2].exists("split")
        conns[1].set("split", "someone-else")
        lock = c.lock("split")
        assert lock.acquire(timeout=0.3) is False
        # A failed attempt cleans up what it took on the one server that said yes.
        assert conns[2].exists("split") == 0


def test_duplicate_endpoint_is_refused(three_servers):
    url = three_servers[0].url
    with pytest.raises(redmutex.DuplicateEndpointError):
        redmutex.Client([url, url.replace("127.0.0.1", "localhost"), three_servers[1].url])


def test_renewal_failing_then_recovered_is_reported(tmp_path):
    server = RedisServer(str(tmp_path))
    server.start()
    try:
        states = []
        failing = threading.Event()
        recovered = threading.Event()

        def on_lost(lock, state):
            states.append(state)
            if state == LockState.RENEWAL_FAILING:
                failing.set()
            elif state == LockState.HELD and failing.is_set():
                recovered.set()

        with redmutex.Client(server.url, watchdog_lease=2.0, command_timeout=0.1) as c:
            lock = c.lock("stalled", on_lost=on_lost)
            lock.acquire()
            os.kill(server.proc.pid, signal.SIGSTOP)
            try:
                assert failing.wait(5), "a stalled server did not turn the hold RENEWAL_FAILING"
                assert lock.state in (LockState.RENEWAL_FAILING, LockState.HELD)
            finally:
                os.kill(server.proc.pid, signal.SIGCONT)
            assert recovered.wait(5), states
            assert lock.state is LockState.HELD
            lock.release()
    finally:
        server.stop()
