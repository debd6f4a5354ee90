"""The fault proxy does what the scenarios rely on, against a real redis-server."""

from __future__ import annotations

import socket
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from chaoslib.faults import Straggler
from chaoslib.proxy import ProxyControl
from chaoslib.resp import Resp
from chaoslib.servers import RedisServer


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = RedisServer("r1", tmp_path_factory.mktemp("proxy")).start()
    yield s
    s.stop()


@pytest.fixture
def proxy(server, tmp_path):
    p = ProxyControl(tmp_path, seed=7)
    p.add("r1", server.port)
    yield p
    p.close()


def conn(proxy: ProxyControl, timeout: float = 2.0) -> Resp:
    return Resp("127.0.0.1", proxy.ports["r1"], timeout=timeout)


def timed(fn) -> tuple[object, float]:
    t0 = time.monotonic()
    out = fn()
    return out, (time.monotonic() - t0) * 1000


def test_passes_commands_through(proxy):
    with conn(proxy) as r:
        assert r.call("SET", "pt:a", "1") == "OK"
        assert r.call("GET", "pt:a") == b"1"


def test_delay_and_jitter_on_replies(proxy):
    proxy.set("r1", delay_ms=120, jitter_ms=20)
    with conn(proxy) as r:
        _, ms = timed(lambda: r.call("PING"))
    assert 95 <= ms < 1000
    proxy.reset()
    with conn(proxy) as r:
        _, ms = timed(lambda: r.call("PING"))
    assert ms < 80


def test_hold_delivers_one_request_late_while_other_connections_flow(proxy, server):
    proxy.hold("r1", "pt:late", 400)
    late, other = conn(proxy), conn(proxy)
    late.send("SET", "pt:late", "held")
    time.sleep(0.05)
    # Another connection is not held up, and the held write has not happened yet.
    assert other.call("GET", "pt:late") is None
    assert other.call("SET", "pt:late", "first") == "OK"
    assert late.read() == "OK"  # delivered after ~400 ms, so it overwrote "first"
    assert server.call("GET", "pt:late") == b"held"
    # Only one request is held: the next one on the same name passes at once.
    _, ms = timed(lambda: late.call("SET", "pt:late", "again"))
    assert ms < 100
    late.close()
    other.close()


def test_blackhole_holds_traffic_and_delivers_on_heal(proxy):
    with conn(proxy, timeout=0.3) as r:
        proxy.set("r1", blackhole=True)
        r.send("PING")
        with pytest.raises(TimeoutError):
            r.read()
        proxy.reset()
        r.sock.settimeout(2.0)
        assert r.read() == "PONG"


def test_refuse_cuts_live_connections_and_new_ones(proxy):
    r = conn(proxy)
    assert r.call("PING") == "PONG"
    proxy.set("r1", refuse=True)
    with pytest.raises((ConnectionError, OSError)):
        r.call("PING")
    with pytest.raises((ConnectionError, OSError)):
        conn(proxy).call("PING")
    proxy.reset()
    with conn(proxy) as r2:
        assert r2.call("PING") == "PONG"


def test_close_mid_reply_cuts_a_reply(proxy, server):
    server.call("SET", "pt:big", "x" * 20000)
    proxy.set("r1", close_mid_reply=1.0)
    with conn(proxy) as r, pytest.raises((ConnectionError, OSError)):
        r.call("GET", "pt:big")


def test_drop_kills_connections(proxy):
    proxy.set("r1", drop=1.0)
    with conn(proxy) as r, pytest.raises((ConnectionError, OSError)):
        r.call("PING")
    assert sum(proxy.stats()["r1"]["stats"].get(k, 0) for k in ("drop_request", "drop_reply")) >= 1


def test_mask_run_id_hides_a_restart(proxy, server):
    def run_id() -> str:
        with conn(proxy) as r:
            info = r.call("INFO", "server").decode()
        return next(line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("run_id:"))

    proxy.set("r1", mask_run_id=True)
    masked = run_id()
    assert masked != server.run_id()
    server.restart()
    assert run_id() == masked
    proxy.set("r1", mask_run_id=False)
    assert run_id() == server.run_id()


def test_straggler_slows_every_client_of_the_server(server):
    with server.conn() as r:
        base = min(timed(lambda: r.call("PING"))[1] for _ in range(5))
        st = Straggler(server, busy_ms=20, gap_ms=1).start()
        slow = 0.0
        try:
            # A PING that lands in a busy script waits for its end; sample until one
            # does (the straggler thread may need a moment on a loaded machine).
            deadline = time.monotonic() + 5
            while slow <= base + 5 and time.monotonic() < deadline:
                slow = max(slow, timed(lambda: r.call("PING"))[1])
        finally:
            st.stop()
    assert st.scripts > 0
    assert slow > base + 5


def test_proxy_survives_abrupt_clients(proxy):
    for _ in range(20):
        s = socket.create_connection(("127.0.0.1", proxy.ports["r1"]))
        s.sendall(b"*1\r\n$4\r\nPI")
        s.close()
    with conn(proxy) as r:
        assert r.call("PING") == "PONG"


def test_concurrent_control_requests(proxy):
    errors = []

    def poke():
        try:
            for _ in range(20):
                proxy.set("r1", delay_ms=1)
                proxy.stats()
        except Exception as e:  # noqa: BLE001 - collected and asserted below
            errors.append(e)

    threads = [threading.Thread(target=poke) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
