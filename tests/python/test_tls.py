"""TLS from Python against a real TLS redis-server: keyword arguments and URL
options, mutual TLS, and clear errors for refused certificates."""

from __future__ import annotations

import os
import pathlib
import ssl
import threading
import time
from typing import Iterator

import pytest
import redis
import redmutex

from conftest import RedisServer, Tls, make_certs
from rmtest_util import channel, wait_until


class TlsServer(RedisServer):
    """A TLS-only redis-server (tests/rmserver.py); the tests look inside through its Unix socket."""

    def __init__(self, workdir: pathlib.Path, certs: pathlib.Path, mutual: bool) -> None:
        super().__init__(workdir, tls=Tls(certs, auth_clients=mutual))
        self.start()
        self.redis = redis.Redis(unix_socket_path=self.socket, socket_timeout=5)

    def stop(self) -> None:
        self.redis.close()
        super().stop()


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture
def tls_server(tmp_path: pathlib.Path, certs: pathlib.Path) -> Iterator[TlsServer]:
    server = TlsServer(tmp_path, certs, mutual=False)
    yield server
    server.stop()


@pytest.fixture
def mtls_server(tmp_path: pathlib.Path, certs: pathlib.Path) -> Iterator[TlsServer]:
    server = TlsServer(tmp_path, certs, mutual=True)
    yield server
    server.stop()


def test_locks_and_waiting_over_tls_with_keyword_arguments(tls_server, certs):
    with redmutex.Client(tls_server.url, ssl_ca_certs=certs / "ca.pem", wait_backoff_cap=5.0) as client:
        lock = client.lock("tls:py")
        assert lock.acquire(blocking=False)
        assert tls_server.redis.exists("tls:py") == 1
        with client.rlock("tls:re") as r, r:
            assert r.hold_count == 2
        woke_at: list[float] = []

        def waiter() -> None:
            with client.lock("tls:py", timeout=10):
                woke_at.append(time.monotonic())

        t = threading.Thread(target=waiter)
        t.start()
        wait_until(lambda: tls_server.redis.pubsub_numsub(channel("tls:py"))[0][1] == 1)
        time.sleep(0.1)  # the waiter is asleep in its wait
        released = time.monotonic()
        lock.release()
        t.join(10)
        assert woke_at and woke_at[0] - released < 1.0  # woken by the release, not the 5 s backoff
    assert tls_server.redis.keys("tls:*") == []


def test_url_query_options(tls_server, certs):
    url = f"{tls_server.url}/0?ssl_ca_certs={certs / 'ca.pem'}&ssl_check_hostname=true"
    with redmutex.Client(url) as client, client.lock("tls:url"):
        assert tls_server.redis.exists("tls:url") == 1


def test_mutual_tls(mtls_server, certs):
    with redmutex.Client(mtls_server.url, ssl_ca_certs=certs / "ca.pem", connect_timeout=1.0) as client:
        started = time.monotonic()
        with pytest.raises(redmutex.ConnectionError, match="client certificate"):
            client.lock("tls:m").acquire(blocking=False)
        assert time.monotonic() - started < 1.5
    with redmutex.Client(
        mtls_server.url,
        ssl_ca_certs=str(certs / "ca.pem"),
        ssl_certfile=str(certs / "client.pem"),
        ssl_keyfile=str(certs / "client.key"),
    ) as client, client.lock("tls:m"):
        assert mtls_server.redis.exists("tls:m") == 1
    assert mtls_server.redis.exists("tls:m") == 0


def test_refused_certificates_and_explicit_opt_outs(tls_server, certs):
    client = redmutex.Client(tls_server.url, ssl_ca_certs=certs / "other_ca.pem")
    with client, pytest.raises(redmutex.ConnectionError, match="unknown CA"):
        client.lock("tls:x").acquire(blocking=False)
    with redmutex.Client(
        tls_server.url, ssl_ca_certs=certs / "ca.pem", ssl_server_hostname="elsewhere.example"
    ) as client, pytest.raises(redmutex.ConnectionError, match="name mismatch"):
        client.lock("tls:x").acquire(blocking=False)
    assert tls_server.redis.keys("*") == []
    for kwargs in (
        {"ssl_cert_reqs": "none"},
        {"ssl_cert_reqs": ssl.CERT_NONE},
        {
            "ssl_ca_certs": certs / "ca.pem",
            "ssl_server_hostname": "elsewhere.example",
            "ssl_check_hostname": False,
        },
    ):
        with redmutex.Client(tls_server.url, **kwargs) as client, client.lock("tls:x"):
            assert tls_server.redis.exists("tls:x") == 1


def test_bad_tls_arguments(certs):
    with pytest.raises(redmutex.InvalidArgument, match="rediss://"):
        redmutex.Client("redis://127.0.0.1:6379", ssl_ca_certs=certs / "ca.pem")
    with pytest.raises(redmutex.InvalidArgument, match="ssl_cert_reqs"):
        redmutex.Client("rediss://127.0.0.1:6379", ssl_cert_reqs="optional")
    with pytest.raises(redmutex.InvalidArgument, match="ssl_check_hostname"):
        redmutex.Client("rediss://127.0.0.1:6379", ssl_check_hostname="no")
    with pytest.raises(redmutex.InvalidArgument, match=r"missing\.pem"):
        redmutex.Client("rediss://127.0.0.1:6379", ssl_ca_certs=os.path.join(certs, "missing.pem"))
    with pytest.raises(redmutex.InvalidArgument, match="does not belong"):
        redmutex.Client(
            "rediss://127.0.0.1:6379",
            ssl_certfile=certs / "client.pem",
            ssl_keyfile=certs / "rogue.key",
        )
