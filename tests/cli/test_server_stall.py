"""redmutex run against a server that stalls (a long script, a fork, swap): waits ride it out."""

from __future__ import annotations

import os
import signal
import time
from typing import Iterator

import pytest

from conftest import Cli, RedisServer, wait_for_subscribers


@pytest.fixture
def own_server(tmp_path: object) -> Iterator[RedisServer]:
    """A server of the test's own: it is stopped and continued."""
    d = os.path.join(str(tmp_path), "redis-stall")
    os.mkdir(d)
    s = RedisServer(d)
    s.start()
    yield s
    if s.proc is not None:
        os.kill(s.proc.pid, signal.SIGCONT)
    s.stop()


def stall(server: RedisServer, seconds: float) -> None:
    assert server.proc is not None
    os.kill(server.proc.pid, signal.SIGSTOP)
    try:
        time.sleep(seconds)
    finally:
        os.kill(server.proc.pid, signal.SIGCONT)


@pytest.mark.parametrize("wait", [[], ["--wait", "60"]], ids=["forever", "wait 60"])
def test_a_waiting_run_rides_out_a_server_stall(cli: Cli, own_server: RedisServer, wait: list[str]) -> None:
    r = own_server.client()
    r.cmd("SET", "job", "someone-else", "PX", 4000)
    p = cli.start("run", "-u", own_server.url, *wait, "job", "--", "touch", "ran")
    wait_for_subscribers(r, "job", 1)
    stall(own_server, 2.5)
    _, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    assert os.path.exists(os.path.join(cli.cwd, "ran"))
    r.close()


def test_a_wait_that_ends_during_a_stall_exits_69(cli: Cli, own_server: RedisServer) -> None:
    r = own_server.client()
    r.cmd("SET", "job", "someone-else", "PX", 60000)
    assert own_server.proc is not None
    os.kill(own_server.proc.pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        res = cli.run("run", "-u", own_server.url, "--wait", "2", "job", "--", "touch", "ran")
        elapsed = time.monotonic() - t0
    finally:
        os.kill(own_server.proc.pid, signal.SIGCONT)
    assert res.returncode == 69, res.stderr
    assert 2.0 <= elapsed < 6.0, "tried until the wait ended, then one attempt's budget at most"
    assert not os.path.exists(os.path.join(cli.cwd, "ran"))
    r.close()


def test_nonblock_during_a_stall_exits_69_after_one_attempt(cli: Cli, own_server: RedisServer) -> None:
    assert own_server.proc is not None
    os.kill(own_server.proc.pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        res = cli.run("run", "-u", own_server.url, "-n", "job", "--", "touch", "ran")
        elapsed = time.monotonic() - t0
    finally:
        os.kill(own_server.proc.pid, signal.SIGCONT)
    assert res.returncode == 69, res.stderr
    assert elapsed < 4.0
    assert not os.path.exists(os.path.join(cli.cwd, "ran"))


def test_a_signal_ends_a_wait_for_unreachable_servers(cli: Cli, own_server: RedisServer) -> None:
    assert own_server.proc is not None
    os.kill(own_server.proc.pid, signal.SIGSTOP)
    try:
        p = cli.start("run", "-u", own_server.url, "job", "--", "touch", "ran")
        assert p.stderr is not None
        line = p.stderr.readline()  # the first attempt failed: redmutex says so, and retries
        assert "trying again" in line, line
        t0 = time.monotonic()
        p.send_signal(signal.SIGTERM)
        p.communicate(timeout=10)
    finally:
        os.kill(own_server.proc.pid, signal.SIGCONT)
    assert p.returncode == -signal.SIGTERM
    assert time.monotonic() - t0 < 3.0
    assert not os.path.exists(os.path.join(cli.cwd, "ran"))
