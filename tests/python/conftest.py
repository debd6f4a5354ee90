"""Fixtures: a private redis-server for the session, flushed before every test.

The server is the Debian package's binary started on a free loopback port,
without persistence, in a temporary directory; it is killed at the end. A
system Redis is never used.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from typing import Callable, Iterator

import pytest
import redis
import redmutex

# $REDMUTEX_TEST_SERVER runs the suite against another server binary (a
# valkey-server: scripts/valkey.sh), as the C tests do.
REDIS_SERVER = (
    os.environ.get("REDMUTEX_TEST_SERVER") or shutil.which("redis-server") or "/usr/bin/redis-server"
)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """One redis-server process on 127.0.0.1:<free port>."""

    def __init__(self, workdir: str) -> None:
        self.workdir = workdir
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def start(self) -> None:
        if not os.path.exists(REDIS_SERVER):
            pytest.skip("redis-server is not installed (apt-get install redis-server)")
        last_error: Exception = RuntimeError("redis-server did not start")
        for _ in range(5):  # another process may grab the port between probe and bind
            self.port = free_port()
            self.proc = subprocess.Popen(
                [
                    REDIS_SERVER,
                    "--port",
                    str(self.port),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--dir",
                    self.workdir,
                    "--daemonize",
                    "no",
                    "--logfile",
                    os.path.join(self.workdir, f"redis-{self.port}.log"),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    if redis.Redis(port=self.port, socket_timeout=1).ping():
                        return
                except redis.exceptions.ConnectionError as e:
                    last_error = e
                time.sleep(0.02)
            self.stop()
        raise RuntimeError(f"could not start redis-server: {last_error}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(str(tmp_path_factory.mktemp("redis")))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def r(redis_server: RedisServer) -> Iterator[redis.Redis]:
    """A redis-py connection to the test server, flushed before the test."""
    conn = redis.Redis(port=redis_server.port, socket_timeout=10)
    conn.flushall()
    yield conn
    conn.close()


@pytest.fixture
def redis_url(redis_server: RedisServer, r: redis.Redis) -> str:
    return redis_server.url


@pytest.fixture
def make_client(redis_url: str) -> Iterator[Callable[..., redmutex.Client]]:
    """Makes clients for the test server (keyword arguments as Client's); all closed afterwards."""
    made: list[redmutex.Client] = []

    def make(**kwargs: object) -> redmutex.Client:
        c = redmutex.Client(redis_url, **kwargs)  # type: ignore[arg-type]
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


@pytest.fixture
def client(make_client: Callable[..., redmutex.Client]) -> redmutex.Client:
    return make_client()
