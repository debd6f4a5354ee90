"""Interop with the real Redisson (Java, from Maven Central) on the same lock names.

A small Java program (tests/interop/redisson) drives a RedissonClient line by
line over stdin. It is built with Maven on first use; the tests need `java`
(17+) and `mvn` on the PATH (Debian: default-jdk-headless maven).
"""

from __future__ import annotations

import collections
import contextlib
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest
import redis
import redmutex

from rmtest_util import channel, wait_until

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from rmcluster import Cluster

PEER_DIR = Path(__file__).resolve().parents[1] / "interop" / "redisson"
_build_lock = threading.Lock()


def _build_peer() -> str:
    """Builds the peer (mvn package) unless its jar is newer than its sources; returns its class path."""
    with _build_lock:
        jar = PEER_DIR / "target" / "redisson-peer-1.0.0.jar"
        sources = [PEER_DIR / "pom.xml", *sorted((PEER_DIR / "src").rglob("*.java"))]
        newest = max(p.stat().st_mtime for p in sources)
        if not jar.exists() or jar.stat().st_mtime < newest:
            if not shutil.which("mvn") or not shutil.which("java"):
                raise RuntimeError(
                    "Redisson interop tests need java and mvn: apt-get install openjdk-17-jdk-headless maven"
                )
            subprocess.run(
                ["mvn", "-q", "-B", "clean", "package", "-DskipTests"], cwd=PEER_DIR, check=True, timeout=600
            )
        return f"{jar}{os.pathsep}{PEER_DIR / 'target' / 'lib' / '*'}"


class Peer:
    """A running Java process with a RedissonClient.

    Untagged commands run on one Java thread (which owns their locks); a
    command sent with a tag runs on a Java thread of its own for that tag, so
    one peer can hold several Redisson owners (each a waiter of its own).
    """

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            ["java", "-cp", _build_peer(), "redmutex.interop.RedissonPeer", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self._lines: dict[str, queue.Queue[str]] = collections.defaultdict(queue.Queue)
        threading.Thread(target=self._read_all, daemon=True).start()
        ready = self.answer(60)
        assert ready.startswith("READY "), ready
        self.id = ready.split()[1]

    def _read_all(self) -> None:
        for line in self.proc.stdout:  # type: ignore[union-attr]
            line = line.strip()
            tag, _, rest = line.partition(" ")
            if tag.startswith("@"):
                self._lines[tag].put(rest)
            else:
                self._lines[""].put(line)

    def _take(self, tag: str, timeout: float) -> str:
        try:
            return self._lines[tag].get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"the Redisson peer gave no answer within {timeout} s") from None

    def send(self, command: str, tag: str = "") -> None:
        self.proc.stdin.write((f"{tag} " if tag else "") + command + "\n")  # type: ignore[union-attr]
        self.proc.stdin.flush()  # type: ignore[union-attr]

    def ask(self, command: str, timeout: float = 30, tag: str = "") -> str:
        self.send(command, tag)
        return self._take(tag, timeout)

    def answer(self, timeout: float = 30, tag: str = "") -> str:
        return self._take(tag, timeout)

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


# ---- fair locks: one FIFO for both libraries ---------------------------------


def test_redisson_and_redmutex_fair_waiters_are_served_in_one_fifo(
    peer: Peer, make_client, r: redis.Redis
) -> None:
    client = make_client(wait_backoff_cap=5.0)  # hand-offs, not timers, move the queue
    name = "fifo:mixed"
    queue_key = "redisson_lock_queue:{fifo:mixed}"
    holder = client.fair_lock(name)
    assert holder.acquire()
    got: queue.Queue[str] = queue.Queue()
    release: dict[str, threading.Event] = {}

    def redmutex_waiter(label: str) -> None:
        with client.fair_lock(name):  # each thread is its own owner
            got.put(label)
            release[label].wait(30)

    # Waiters arrive one at a time, alternating between the libraries.
    arrivals = []
    threads = []
    for k, side in enumerate(["java", "py", "java", "py", "java", "py"]):
        label = f"{side}{k}"
        if side == "java":
            peer.send(f"fairlock {name}", tag=f"@{label}")
        else:
            release[label] = threading.Event()
            threads.append(threading.Thread(target=redmutex_waiter, args=(label,)))
            threads[-1].start()
        arrivals.append(label)
        wait_until(lambda n=k + 1: r.llen(queue_key) == n, timeout=15, what=f"{label} to join the queue")

    holder.release()
    order = []
    for _ in arrivals:
        label = _next_holder(peer, got, [a for a in arrivals if a.startswith("java") and a not in order])
        assert r.hlen(name) == 1, "two owners at once"
        order.append(label)
        if label.startswith("java"):
            assert peer.ask(f"fairunlock {name}", tag=f"@{label}") == "OK"
        else:
            release[label].set()
    for t in threads:
        t.join(15)
    assert order == arrivals
    wait_until(lambda: not r.exists(name, queue_key, "redisson_lock_timeout:{fifo:mixed}"), what="keys gone")


def _next_holder(peer: Peer, got: queue.Queue[str], java_waiting: list[str], timeout: float = 20) -> str:
    """The label of whoever gets the fair lock next: a redmutex thread or a Redisson thread."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            return got.get(timeout=0.01)
        except queue.Empty:
            pass
        for label in java_waiting:
            try:
                answer = peer.answer(0.001, tag=f"@{label}")
            except AssertionError:
                continue
            assert answer == "OK", answer
            return label
    raise AssertionError("nobody got the fair lock")


# ---- read-write locks: shared readers, exclusive writers across libraries -----


def test_redisson_and_redmutex_readers_share_and_writers_exclude_both(
    peer: Peer, make_client, r: redis.Redis
) -> None:
    client = make_client(wait_backoff_cap=5.0)  # only release messages explain prompt wake-ups
    rw = client.rwlock("catalog")
    assert peer.ask("readlock catalog") == "OK"
    assert rw.read.acquire(blocking=False)  # shares with Redisson's reader
    assert r.hget("catalog", "mode") == b"read" and r.hlen("catalog") == 3
    assert not rw.write.acquire(blocking=False)  # readers on both sides exclude writers
    assert peer.ask("writetry catalog 0").startswith("BUSY")
    rw.read.release()
    assert not rw.write.acquire(blocking=False)  # Redisson's reader is still in

    # Redisson's read unlock wakes a waiting redmutex writer.
    def unlock_when_waited_for() -> None:
        wait_until(
            lambda: r.pubsub_numsub("redisson_rwlock:{catalog}")[0][1] >= 1, what="redmutex subscribed"
        )
        assert peer.ask("readunlock catalog") == "OK"

    helper = threading.Thread(target=unlock_when_waited_for)
    helper.start()
    start = time.monotonic()
    assert rw.write.acquire(timeout=10)
    assert time.monotonic() - start < 3.0
    helper.join(10)
    assert r.hget("catalog", "mode") == b"write"

    # A redmutex writer excludes Redisson's readers and writers; its release wakes them.
    assert peer.ask("readtry catalog 0").startswith("BUSY")
    assert peer.ask("writetry catalog 0").startswith("BUSY")
    peer.send("readlock catalog", tag="@reader")
    wait_until(lambda: r.pubsub_numsub("redisson_rwlock:{catalog}")[0][1] >= 1, what="Redisson subscribed")
    released = time.monotonic()
    rw.write.release()
    assert peer.answer(10, tag="@reader") == "OK"
    assert time.monotonic() - released < 3.0
    assert rw.read.acquire(blocking=False)  # and shares with it
    rw.read.release()

    # A Redisson writer excludes redmutex readers; its unlock ("1") wakes them.
    assert peer.ask("readunlock catalog", tag="@reader") == "OK"
    assert peer.ask("writelock catalog") == "OK"
    assert not rw.read.acquire(blocking=False)
    assert not rw.write.acquire(blocking=False)
    got = []
    reader = threading.Thread(
        target=lambda: got.append(rw.read.acquire(timeout=10) and rw.read.release() is None)
    )
    reader.start()
    wait_until(lambda: r.pubsub_numsub("redisson_rwlock:{catalog}")[0][1] >= 1, what="redmutex subscribed")
    released = time.monotonic()
    assert peer.ask("writeunlock catalog") == "OK"
    reader.join(10)
    assert got == [True]
    assert time.monotonic() - released < 3.0
    wait_until(lambda: not r.exists("catalog"), what="the lock to be gone")


# ---- Redisson in cluster mode (useClusterServers) on a real Redis Cluster -----


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with Cluster(masters=3, replicas=0) as cl:
        yield cl


@pytest.fixture
def cpeer(cluster: Cluster) -> Iterator[Peer]:
    p = Peer(",".join(f"redis://127.0.0.1:{n.port}" for n in cluster.nodes), "cluster")
    yield p
    p.close()


def _names_over_every_master(cluster: Cluster, prefix: str, count: int = 9) -> list[str]:
    names = [f"{prefix}:{k}" for k in range(count)]
    assert len({cluster.owner(n) for n in names}) == 3, "the names must span every master"
    return names


def _shard_subscribers(cluster: Cluster, name: str, chan: str) -> int:
    """Sharded channels like chan (a fair waiter's own channel is chan + ":<owner>") on name's master."""
    return len(cluster.command(cluster.owner(name), "PUBSUB", "SHARDCHANNELS", chan + "*"))


def test_redisson_cluster_mode_and_redmutex_exclude_each_other_with_every_kind(
    cpeer: Peer, cluster: Cluster
) -> None:
    import redmutex

    with redmutex.Client(cluster.url) as client:
        for name in _names_over_every_master(cluster, "rsc:re"):
            assert cpeer.ask(f"lock {name}") == "OK"
            assert cluster.command(cluster.owner(name), "HLEN", name) == 1  # on its slot's master
            assert client.rlock(name).acquire(blocking=False) is False
            assert cpeer.ask(f"unlock {name}") == "OK"
            with client.rlock(name):
                assert cpeer.ask(f"trylock {name} 0").startswith("BUSY")
        for name in _names_over_every_master(cluster, "rsc:fair", 6):
            assert cpeer.ask(f"fairlock {name}") == "OK"
            assert client.fair_lock(name).acquire(blocking=False) is False
            assert cpeer.ask(f"fairunlock {name}") == "OK"
            with client.fair_lock(name):
                assert cpeer.ask(f"fairtry {name} 0").startswith("BUSY")
        for name in _names_over_every_master(cluster, "rsc:rw", 6):
            rw = client.rwlock(name)
            assert cpeer.ask(f"writelock {name}") == "OK"
            assert not rw.read.acquire(blocking=False) and not rw.write.acquire(blocking=False)
            assert cpeer.ask(f"writeunlock {name}") == "OK"
            with rw.write:
                assert cpeer.ask(f"readtry {name} 0").startswith("BUSY")
            assert cpeer.ask(f"readlock {name}") == "OK"
            with rw.read:  # readers of both libraries share
                assert cpeer.ask(f"writetry {name} 0").startswith("BUSY")
            assert cpeer.ask(f"readunlock {name}") == "OK"
        for name in ("rsc:re:0", "rsc:fair:0", "rsc:rw:0"):
            wait_until(lambda n=name: not cluster.command(cluster.owner(n), "EXISTS", n), what=f"{name} gone")


def test_a_redisson_cluster_waiter_is_woken_by_a_redmutex_release_over_sharded_pubsub(
    cpeer: Peer, cluster: Cluster
) -> None:
    import redmutex

    with redmutex.Client(cluster.url) as client:
        for name, take, answer_tag, chan in (
            ("rsc:wake:re", "trylock {} 20000", "@re", channel("rsc:wake:re")),
            ("rsc:wake:fair", "fairtry {} 20000", "@fair", channel("rsc:wake:fair")),
            ("rsc:wake:rw", "writetry {} 20000", "@rw", "redisson_rwlock:{rsc:wake:rw}"),
        ):
            held = (
                client.rwlock(name).read
                if name.endswith(":rw")
                else (client.fair_lock(name) if name.endswith(":fair") else client.rlock(name))
            )
            assert held.acquire()
            cpeer.send(take.format(name), tag=answer_tag)
            wait_until(
                lambda n=name, c=chan: _shard_subscribers(cluster, n, c) >= 1, what="Redisson subscribed"
            )
            released = time.monotonic()
            held.release()
            answer = cpeer.answer(25, tag=answer_tag)
            assert answer.startswith("OK"), answer
            # Otherwise it would sleep until the 30 s lease ran out: the sharded message woke it.
            assert time.monotonic() - released < 3.0, f"{name}: Redisson took {answer}"
            unlock = {"@re": "unlock", "@fair": "fairunlock", "@rw": "writeunlock"}[answer_tag]
            assert cpeer.ask(f"{unlock} {name}", tag=answer_tag) == "OK"


def test_a_redmutex_waiter_is_woken_by_a_redisson_cluster_release_over_sharded_pubsub(
    cpeer: Peer, cluster: Cluster
) -> None:
    import redmutex

    with redmutex.Client(cluster.url, wait_backoff_cap=5.0) as client:  # only a message wakes it quickly
        for name, take, give, chan in (
            ("rsc:back:re", "lock", "unlock", channel("rsc:back:re")),
            ("rsc:back:fair", "fairlock", "fairunlock", channel("rsc:back:fair")),
            ("rsc:back:rw", "writelock", "writeunlock", "redisson_rwlock:{rsc:back:rw}"),
        ):
            assert cpeer.ask(f"{take} {name}") == "OK"
            lock = (
                client.rwlock(name).read
                if name.endswith(":rw")
                else (client.fair_lock(name) if name.endswith(":fair") else client.rlock(name))
            )
            got: list[float] = []

            def wait(lk=lock, got: list[float] = got) -> None:
                if lk.acquire(timeout=15):
                    got.append(time.monotonic())
                    lk.release()

            waiter = threading.Thread(target=wait)
            waiter.start()
            wait_until(
                lambda n=name, c=chan: _shard_subscribers(cluster, n, c) >= 1, what="redmutex subscribed"
            )
            time.sleep(0.1)  # let it settle into its wait, past its first attempts
            released = time.monotonic()
            assert cpeer.ask(f"{give} {name}") == "OK"
            waiter.join(20)
            assert got, f"{name}: redmutex never got the lock"
            assert got[0] - released < 2.0, f"{name}: woken after {got[0] - released:.2f} s"


# ---- semaphores, latches, multi-locks ---------------------------------------------


def test_redisson_and_redmutex_permits_count_against_one_capacity(
    peer: Peer, make_client, r: redis.Redis
) -> None:
    client = make_client(wait_backoff_cap=10.0)  # only a release message explains a prompt wake-up
    sem = client.semaphore("pool", 3)
    assert sem.acquire(permits=2)
    # Redisson sees the semaphore redmutex made (3 permits, 2 taken), and takes the third.
    assert peer.ask("semset pool 3") == "SET false"
    assert peer.ask("semavail pool") == "AVAIL 1"
    java = peer.ask("semtry pool 0 30000")
    assert java.startswith("PERMIT "), java
    java_id = java.split()[1]
    assert peer.ask("semtry pool 0 30000") == "NONE"
    assert not sem.acquire(blocking=False)
    assert sem.available() == 0
    # Redisson's release (its permit id) wakes a redmutex waiter at once.
    got: list[float] = []
    waiter = threading.Thread(target=lambda: got.append(sem.acquire(timeout=30) and time.monotonic()))
    waiter.start()
    wait_until(lambda: r.pubsub_numsub("redisson_sc:{pool}")[0][1] >= 1, what="redmutex subscribed")
    time.sleep(1.0)  # past its first backoffs
    released = time.monotonic()
    assert peer.ask(f"semrelease pool {java_id}") == "OK"
    waiter.join(30)
    assert got and got[0] - released < 2.0
    # redmutex's releases free permits for Redisson; a redmutex permit id is Redisson's too.
    sem.release()
    sem.release()
    assert peer.ask("semavail pool") == "AVAIL 3"
    assert sem.acquire()
    assert peer.ask(f"semrelease pool {sem.permit_id}") == "OK"
    assert sem.available() == 3
    with pytest.raises(redmutex.NotOwnedError):
        sem.release()


def test_a_redisson_semaphore_made_first_sets_the_capacity_redmutex_checks(
    peer: Peer, make_client, r: redis.Redis
) -> None:
    assert peer.ask("semset jobs 2") == "SET true"
    client = make_client()
    with pytest.raises(redmutex.InvalidArgument, match="has 2 permits"):
        client.semaphore("jobs", 5).acquire(blocking=False)
    assert r.get("jobs") == b"2"
    sem = client.semaphore("jobs", 2)
    with sem:
        assert peer.ask("semavail jobs") == "AVAIL 1"


LATCH_CHANNEL = "redisson_countdownlatch__channel__{start}"


def test_a_latch_counted_down_by_redisson_releases_redmutex_and_back(
    peer: Peer, make_client, r: redis.Redis
) -> None:
    client = make_client(wait_backoff_cap=10.0)
    latch = client.latch("start")
    assert peer.ask("latchset start 2") == "SET true"
    assert latch.count == 2 and not latch.try_set_count(5)
    got: list[bool] = []
    waiter = threading.Thread(target=lambda: got.append(latch.wait(30)))
    waiter.start()
    wait_until(lambda: r.pubsub_numsub(LATCH_CHANNEL)[0][1] >= 1, what="redmutex subscribed")
    time.sleep(1.0)
    assert peer.ask("latchdown start") == "OK"
    assert latch.count == 1
    released = time.monotonic()
    assert peer.ask("latchdown start") == "OK"
    waiter.join(30)
    assert got == [True] and time.monotonic() - released < 2.0
    # The other way: redmutex counts down a latch a Redisson service awaits.
    assert latch.try_set_count(1)
    assert peer.ask("latchcount start") == "COUNT 1"
    peer.send("latchawait start 20000", tag="@waiter")
    wait_until(lambda: r.pubsub_numsub(LATCH_CHANNEL)[0][1] >= 1, what="Redisson subscribed")
    latch.count_down()
    answer = peer.answer(20, tag="@waiter")
    assert answer.startswith("DONE true"), answer


def test_redisson_multilock_and_redmutex_multi_lock_exclude_each_other(
    peer: Peer, make_client, r: redis.Redis
) -> None:
    client = make_client()
    multi = client.multi_lock([client.rlock("m:a"), client.rlock("m:b"), client.rlock("m:c")])
    # A RedissonMultiLock over two of the names: redmutex gets none of the three.
    assert peer.ask("multilock 1000 m:a m:b").startswith("OK")
    assert not multi.acquire(blocking=False)
    assert not r.exists("m:c")
    assert peer.ask("multiunlock m:a m:b") == "OK"
    # redmutex holds all three: Redisson's multi-lock over any of them waits and fails, holding nothing.
    with multi:
        answer = peer.ask("multilock 300 m:c m:b")
        assert answer.startswith("BUSY"), answer
        assert peer.ask("trylock m:c 0").startswith("BUSY")
        assert len(r.hgetall("m:c")) == 1
    assert peer.ask("multilock 1000 m:c m:b").startswith("OK")
    assert peer.ask("multiunlock m:c m:b") == "OK"
    assert r.keys("m:*") == []
