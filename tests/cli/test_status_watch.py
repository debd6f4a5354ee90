"""redmutex status --watch: the lock read again and again, until Ctrl-C or SIGTERM."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import time

from conftest import Cli, Redis


def next_line(p: subprocess.Popen[str], timeout: float = 10) -> dict:
    """The next JSON line of a watch (with a deadline)."""
    assert p.stdout is not None
    ready, _, _ = select.select([p.stdout], [], [], timeout)
    assert ready, f"no refresh within {timeout} s"
    line = p.stdout.readline()
    assert line, "the watch ended"
    return json.loads(line)


def line_where(p: subprocess.Popen[str], pred, what: str, timeout: float = 10) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        doc = next_line(p, max(0.1, deadline - time.monotonic()))
        if pred(doc):
            return doc
        assert time.monotonic() < deadline, f"no refresh showed {what}; last: {doc}"


def test_watch_json_prints_one_line_per_refresh_and_follows_the_lock(cli: Cli, r: Redis) -> None:
    p = cli.start("status", "--watch", "--json", "--interval", "0.1", "job")
    first = next_line(p)
    assert first["name"] == "job" and first["held"] is False
    r.cmd("SET", "job", "c0ffee00deadbeef", "PX", 60000)
    held = line_where(p, lambda d: d["held"], "the lock held")
    assert held["kind"] == "lock" and held["owner"] == "c0ffee00" and 0 < held["ttl_ms"] <= 60000
    r.cmd("DEL", "job")
    r.cmd("HSET", "job", "c0ffee:7", 2)
    r.cmd("PEXPIRE", "job", 30000)
    r.cmd("RPUSH", "redisson_lock_queue:{job}", "c0ffee:8", "c0ffee:9")
    fair = line_where(p, lambda d: d.get("queue") == 2, "the fair queue")
    assert fair["kind"] == "fair" and fair["owner"] == "c0ffee:7" and fair["holds"] == 2
    os.kill(p.pid, signal.SIGINT)
    out, err = p.communicate(timeout=10)
    assert p.returncode == 0, err
    for line in out.splitlines():  # whatever came meanwhile is whole lines of JSON
        json.loads(line)


def test_watch_survives_an_unreachable_server_and_says_so(cli: Cli) -> None:
    env = dict(cli.env, REDMUTEX_URL="redis://127.0.0.1:1")
    p = cli.start("status", "--watch", "--json", "--interval", "0.1", "job", env=env)
    first = next_line(p)
    second = next_line(p)
    assert first["name"] == second["name"] == "job" and "127.0.0.1:1" in first["error"]
    os.kill(p.pid, signal.SIGTERM)
    p.communicate(timeout=10)
    assert p.returncode == 0


def test_watch_redraws_in_place_on_a_terminal(cli: Cli, r: Redis) -> None:
    r.cmd("SET", "job", "c0ffee00deadbeef", "PX", 60000)
    pid, fd = pty.fork()
    if pid == 0:
        try:
            os.chdir(cli.cwd)
            argv = [cli.path, "status", "--watch", "--interval", "0.1", "job"]
            os.execve(argv[0], argv, cli.env)
        finally:
            os._exit(127)
    buf = b""
    deadline = time.monotonic() + 10
    while buf.count(b"\x1b[H\x1b[2J") < 3:  # three refreshes, each from the top of a cleared screen
        assert time.monotonic() < deadline, f"no three refreshes within 10 s; got {buf!r}"
        ready, _, _ = select.select([fd], [], [], 1)
        if ready:
            buf += os.read(fd, 4096)
    screens = buf.split(b"\x1b[H\x1b[2J")[1:-1]
    assert all(b"job: held" in s and b"Ctrl-C to stop" in s for s in screens), screens
    os.kill(pid, signal.SIGINT)
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def test_interval_needs_watch_and_a_sane_number(cli: Cli) -> None:
    for args in (
        ("--interval", "1", "job"),
        ("--watch", "--interval", "0", "job"),
        ("--watch", "--interval", "x", "job"),
    ):
        res = cli.run("status", *args)
        assert res.returncode == 64 and "--interval" in res.stderr, (args, res.stderr)
    res = cli.run("release", "--force", "--watch", "job")
    assert res.returncode == 64
