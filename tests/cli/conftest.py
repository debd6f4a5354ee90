"""Fixtures for the redmutex command-line tests.

The binary under test is $REDMUTEX_CLI (ctest sets it to the one it built).
Servers come from tests/rmserver.py, the helper every suite shares: Debian's
redis-server (or $REDMUTEX_TEST_SERVER) on free loopback ports without
persistence, in temporary directories, killed afterwards; a system Redis is
never used, and without a server binary the tests fail (never skip). The tests
need only pytest: Redis is spoken to with the small RESP client below.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Callable, Iterator

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from rmserver import Server, Tls, free_port, make_certs

__all__ = ["Cli", "Redis", "RedisServer", "Tls", "free_port", "make_certs"]


def cli_path() -> str:
    path = os.environ.get("REDMUTEX_CLI", "")
    if not path or not os.access(path, os.X_OK):
        pytest.exit("set REDMUTEX_CLI to the redmutex binary to test (ctest does)", returncode=2)
    return path


def wait_until(predicate: Callable[[], object], timeout: float, what: str) -> object:
    """Polls predicate until it returns a true value; fails the test at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.1f} s waiting for {what}")
        time.sleep(0.01)


def alive(pid: int) -> bool:
    """Whether a process exists and is not a zombie (PID 1 in a container may never reap it)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def runs(pid: int, program: str) -> bool:
    """Whether process pid has become program (a forked child has exec'd it)."""
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip() == program
    except FileNotFoundError:
        return False


class RespError(Exception):
    """An error reply from Redis."""


class Redis:
    """A minimal RESP2 client: enough for the tests to look at and change keys."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.buf = b""

    def close(self) -> None:
        self.sock.close()

    def send(self, *args: object) -> None:
        parts = [b"*%d\r\n" % len(args)]
        for a in args:
            b = a if isinstance(a, bytes) else str(a).encode()
            parts.append(b"$%d\r\n%s\r\n" % (len(b), b))
        self.sock.sendall(b"".join(parts))

    def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("redis closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n: int) -> bytes:
        while len(self.buf) < n + 2:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("redis closed the connection")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n + 2 :]
        return data

    def reply(self) -> object:
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RespError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self._exact(n).decode("utf-8", "replace")
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.reply() for _ in range(n)]
        raise ConnectionError(f"unexpected reply {line!r}")

    def cmd(self, *args: object) -> object:
        self.send(*args)
        return self.reply()


def wait_for_subscribers(r: Redis, name: str, n: int) -> None:
    """Waits until n clients listen on lock `name`'s release channel (waiters subscribe to it)."""
    channel = f"redisson_lock__channel:{{{name}}}"
    wait_until(lambda: r.cmd("PUBSUB", "NUMSUB", channel)[1] >= n, 10, f"{n} subscribers of {channel}")  # type: ignore[index]


class RedisServer(Server):
    """One redis-server on 127.0.0.1:<free port> (tests/rmserver.py): RedisServer(workdir).start(*args)."""

    def client(self) -> Redis:
        return Redis(self.port)


@pytest.fixture(scope="session")
def redmutex_bin() -> str:
    return cli_path()


@pytest.fixture(scope="session")
def session_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(str(tmp_path_factory.mktemp("redis")))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def server(session_server: RedisServer) -> RedisServer:
    """The session's server, emptied before the test."""
    c = session_server.client()
    c.cmd("FLUSHALL")
    c.close()
    return session_server


@pytest.fixture
def r(server: RedisServer) -> Iterator[Redis]:
    c = server.client()
    yield c
    c.close()


@pytest.fixture
def trio(tmp_path: object) -> Iterator[list[RedisServer]]:
    """Three independent servers for Redlock tests (function-scoped: tests kill them)."""
    servers = []
    for i in range(3):
        d = os.path.join(str(tmp_path), f"redis{i}")
        os.mkdir(d)
        s = RedisServer(d)
        s.start()
        servers.append(s)
    yield servers
    for s in servers:
        s.stop()


def kill_session(sid: int) -> None:
    """SIGKILLs every process of a session: redmutex, CMD's process group and what CMD started."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(entry), signal.SIGKILL)


def default_signals(then: Callable[[], None] | None) -> None:
    """In the child, before exec: the signals the tests send get their default
    disposition, whatever the runner's (a CI runner or `scripts/test.sh &`
    may ignore SIGINT, and redmutex rightly keeps an inherited SIG_IGN); then
    the test's own preparation, which may ignore one again on purpose."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_DFL)
    if then is not None:
        then()


class Cli:
    """Runs the binary against one server (REDMUTEX_URL), in a scratch directory.

    Every redmutex starts in a session of its own with stdin from /dev/null:
    it never sees the terminal pytest may run in, and whatever it and CMD
    leave behind is found and killed afterwards.
    """

    def __init__(self, path: str, url: str, cwd: str, sanitizer_dir: str) -> None:
        self.path = path
        self.cwd = cwd
        self.env = dict(os.environ, REDMUTEX_URL=url)
        self.started: list[subprocess.Popen[str]] = []
        # In sanitizer builds, reports go to files that the fixture checks
        # afterwards: an exit status alone could be mistaken for redmutex's own.
        self.sanitizer_dir = sanitizer_dir
        for var in ("ASAN_OPTIONS", "UBSAN_OPTIONS", "TSAN_OPTIONS"):
            opts = self.env.get(var, "")
            self.env[var] = (opts + ":" if opts else "") + f"log_path={sanitizer_dir}/report"

    def sanitizer_reports(self) -> str:
        return "".join(
            open(os.path.join(self.sanitizer_dir, f)).read() for f in sorted(os.listdir(self.sanitizer_dir))
        )

    def run(
        self, *args: str, timeout: float = 30, env: dict[str, str] | None = None, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        p = self.start(*args, env=env, stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL)
        out, err = p.communicate(input, timeout=timeout)
        return subprocess.CompletedProcess(p.args, p.returncode, out, err)

    def start(
        self,
        *args: str,
        env: dict[str, str] | None = None,
        stdin: int = subprocess.DEVNULL,
        preexec_fn: Callable[[], None] | None = None,
    ) -> subprocess.Popen[str]:
        p = subprocess.Popen(
            [self.path, *args],
            cwd=self.cwd,
            env=env or self.env,
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            preexec_fn=lambda: default_signals(preexec_fn),
        )
        self.started.append(p)
        return p

    def stop_all(self) -> None:
        for p in self.started:
            kill_session(p.pid)
            p.communicate(timeout=10)


@pytest.fixture
def cli(redmutex_bin: str, server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cli]:
    c = Cli(
        redmutex_bin, server.url, str(tmp_path_factory.mktemp("work")), str(tmp_path_factory.mktemp("san"))
    )
    yield c
    c.stop_all()
    reports = c.sanitizer_reports()
    assert not reports, reports
