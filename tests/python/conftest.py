"""Fixtures: a private redis-server for the session, flushed before every test.

Servers come from tests/rmserver.py, the helper every suite shares: the binary
($REDMUTEX_TEST_SERVER, default Debian's redis-server) on a free loopback port,
without persistence, in a temporary directory, killed at the end (and with
pytest, however it ends). A system Redis is never used. Without a server
binary the tests fail with a message saying what to install; they never skip.
"""

from __future__ import annotations

import os
import sys
from typing import Callable, Iterator

import pytest
import redis
import redmutex

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from rmserver import Server, Tls, free_port, make_certs, server_binary

__all__ = ["RedisServer", "Tls", "free_port", "make_certs", "server_binary"]

# One redis-server on 127.0.0.1:<free port>: RedisServer(workdir).start(*extra_args).
RedisServer = Server


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
