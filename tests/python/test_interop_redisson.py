"""Interop with the real Redisson (Java, from Maven Central) on the same lock names.

A small Java program (tests/interop/redisson) drives a RedissonClient line by
line over stdin. It is built with Maven on first use; the tests need `java`
(17+) and `mvn` on the PATH (Debian: default-jdk-headless maven).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest
import redis

from rmtest_util import channel, wait_until

PEER_DIR = Path(__file__).resolve().parents[1] / "interop" / "redisson"
_build_lock = threading.Lock()


def _build_peer() -> str:
    """Builds the peer once (mvn package) and returns its class path."""
    with _build_lock:
        jar = PEER_DIR / "target" / "redisson-peer-1.0.0.jar"
        if not jar.exists():
            if not shutil.which("mvn") or not shutil.which("java"):
                raise RuntimeError(
                    "Redisson interop tests need java and mvn: apt-get install openjdk-17-jdk-headless maven"
                )
            subprocess.run(
                ["mvn", "-q", "-B", "package", "-DskipTests"], cwd=PEER_DIR, check=True, timeout=600
            )
        return f"{jar}{os.pathsep}{PEER_DIR / 'target' / 'lib' / '*'}"


class Peer:
    """A running Java process with a RedissonClient; one Java thread owns its locks."""

    def __init__(self, url: str) -> None:
        self.proc = subprocess.Popen(
            ["java", "-cp", _build_peer(), "redmutex.interop.RedissonPeer", url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        ready = self._read_line(60)
        assert ready.startswith("READY "), ready
        self.id = ready.split()[1]

    def _read_line(self, timeout: float) -> str:
        box: list[str] = []
        reader = threading.Thread(target=lambda: box.append(self.proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
        reader.start()
        reader.join(timeout)
        if not box:
            raise AssertionError(f"the Redisson peer gave no answer within {timeout} s")
        return box[0].strip()

    def send(self, command: str) -> None:
        self.proc.stdin.write(command + "\n")  # type: ignore[union-attr]
        self.proc.stdin.flush()  # type: ignore[union-attr]

    def ask(self, command: str, timeout: float = 30) -> str:
        self.send(command)
        return self._read_line(timeout)

    def answer(self, timeout: float = 30) -> str:
        return self._read_line(timeout)

    def close(self) -> None:
        with contextlib.suppress(AssertionError, OSError):  # it is killed next anyway
            self.ask("quit", 30)
        self.proc.kill()
        self.proc.wait(10)


@pytest.fixture
def peer(redis_url: str) -> Iterator[Peer]:
    p = Peer(redis_url)
    yield p
    p.close()


def test_redisson_holder_excludes_redmutex_and_wakes_it_on_unlock(
    peer: Peer, make_client, r: redis.Redis
) -> None:
    client = make_client(wait_backoff_cap=5.0)  # only the release message explains a prompt wake-up
    assert peer.ask("lock orders:1") == "OK"
    # Redisson's format: a hash field "<its uuid>:<its thread id>" with a count.
    fields = r.hgetall("orders:1")
    assert len(fields) == 1
    ((field, count),) = fields.items()
    assert field.decode().startswith(peer.id + ":") and count == b"1"
    rlock = client.rlock("orders:1")
    assert rlock.acquire(blocking=False) is False
    assert rlock.locked()
    got: list[float] = []
    done = threading.Event()

    def wait_then_release() -> None:
        # A reentrant lock belongs to the thread that took it: this one.
        if rlock.acquire(timeout=10):
            got.append(time.monotonic())
            done.wait(30)
            rlock.release()

    waiter = threading.Thread(target=wait_then_release)
    waiter.start()
    wait_until(lambda: r.pubsub_numsub(channel("orders:1"))[0][1] >= 1, what="redmutex subscribed")
    unlocked_at = time.monotonic()
    assert peer.ask("unlock orders:1") == "OK"
    wait_until(lambda: got, timeout=15, what="redmutex to get the lock after Redisson unlocked it")
    assert got[0] - unlocked_at < 2.0, "woke only at the backoff cap, not on Redisson's release message"
    # Now redmutex holds it in Redisson's format: Redisson sees it locked by someone else.
    state = peer.ask("state orders:1")
    assert state.startswith("LOCKED true HELD false COUNT 0"), state
    assert peer.ask("trylock orders:1 0").startswith("BUSY")
    done.set()
    waiter.join(15)
    assert not r.exists("orders:1")


def test_redmutex_holder_excludes_redisson_and_wakes_it_on_release(
    peer: Peer, make_client, r: redis.Redis
) -> None:
    client = make_client()
    rlock = client.rlock("jobs:sync")
    assert rlock.acquire()
    assert rlock.acquire()  # reentrant: count 2
    assert peer.ask("trylock jobs:sync 0").startswith("BUSY")
    state = peer.ask("state jobs:sync")
    assert state.startswith("LOCKED true HELD false"), state
    ttl = int(state.split()[-1])
    assert ttl > 20000  # the watchdog lease (30 s)
    peer.send("trylock jobs:sync 20000")  # Redisson waits on its subscription
    wait_until(lambda: r.pubsub_numsub(channel("jobs:sync"))[0][1] >= 1, what="Redisson subscribed")
    rlock.release()
    assert rlock.locked()  # still held once
    released_at = time.monotonic()
    rlock.release()
    answer = peer.answer(25)
    waited_ms = int(answer.split()[1])
    assert answer.startswith("OK"), answer
    # Redisson's waiter would otherwise sleep until the 30 s TTL: the release message woke it.
    assert time.monotonic() - released_at < 3.0, f"Redisson took {waited_ms} ms in all"
    assert rlock.acquire(blocking=False) is False
    assert peer.ask("unlock jobs:sync") == "OK"
    assert rlock.acquire(blocking=False) is True
    rlock.release()


def test_redisson_and_redmutex_fencing_tokens_share_one_counter(
    peer: Peer, make_client, r: redis.Redis
) -> None:
    client = make_client()
    lock = client.rlock("fenced:res", fencing=True)
    tokens = []
    for _ in range(3):
        answer = peer.ask("fence fenced:res")
        assert answer.startswith("TOKEN "), answer
        tokens.append(int(answer.split()[1]))
        assert peer.ask("funlock fenced:res") == "OK"
        with lock:
            tokens.append(lock.fence)
    assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens), tokens
    assert int(r.get("redisson_lock_token:{fenced:res}")) == tokens[-1]
