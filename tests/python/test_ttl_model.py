"""A model-based property test of "no hold is cut short" (docs/wire-format.md, the TTL rule).

Hypothesis drives one lock name of one family (plain, reentrant, fair or read-write) through
random sequences of steps by 1-3 owners: acquiring, again through the same or a second handle
with another lease (explicit leases, or none: renewed by the watchdog), extending (adding or
replacing), releasing, letting time pass (watchdog renewals happen meanwhile), and read/write
downgrades and attempted upgrades. A model keeps what every handle holds. After every step:

- every hold whose owner still believes it valid is covered by the lock key's TTL (the TTL rule
  itself), and its validity is no shorter than the model says it must be;
- a second client cannot take the lock (the conflicting side of a read-write lock) while any
  hold is valid;
- as long as no hold ran out unreleased (the model then knows the servers' state exactly):
  every acquisition succeeds or fails as the model predicts, and a lock the model says is free
  (no holds; a read-write lock held only for reading) can be taken by another client.

Time passes only within the validity of the holds with explicit leases, so a hold runs out only
when the machine is too slow; the exact checks then stop for that example, the others go on.

It runs with a fixed derandomized seed in the normal suite: REDMUTEX_MODEL_EXAMPLES examples
(default 20) of REDMUTEX_MODEL_STEPS steps (default 20). The chaos harness's full profile
(tests/chaos/run --full, scenario M1) runs many more, from a random seed that it prints
(REDMUTEX_MODEL_SEED). REDMUTEX_MODEL_SHRINK=1 shrinks a failing example. The servers come from
the model_urls fixture: the test's own redis-server, or REDMUTEX_MODEL_URLS (comma-separated), so
it can be pointed at other deployments.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from dataclasses import dataclass
from typing import Any, ClassVar, Iterator

import pytest
import redis
import redis.cluster
import redmutex

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, Phase, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.stateful import (  # noqa: E402
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

WATCHDOG_LEASE = 1.0  # shorter than the explicit leases: a renewal must not cut them
LEASES = [None, 2.0, 5.0, 30.0]  # None: renewed by the watchdog
EXTENSIONS = [1.0, 5.0, 30.0]
SLEEPS = [0.05, 0.25, 0.8]
MARGIN = 0.05  # a hold this close to the end of its validity is not checked against
SPARE = 0.3  # time passes no closer than this to the end of an explicit lease
# REDMUTEX_MODEL_FAMILIES (comma-separated) narrows the run to some of them.
FAMILIES = [f for f in os.environ.get("REDMUTEX_MODEL_FAMILIES", "lock,rlock,fair_lock,rw").split(",") if f]


def _drift(seconds: float) -> float:
    """The core's clock drift allowance (docs/safety.md): 1 % of the lease plus 2 ms."""
    return seconds * 0.01 + 0.002


@dataclass
class Hold:
    """What one handle holds, as the model sees it."""

    count: int = 0
    lease: float | None = None
    valid_until: float = 0.0  # monotonic lower bound of the validity (explicit leases)


class TTLMachine(RuleBasedStateMachine):
    urls: ClassVar[list[str]] = []
    cluster: ClassVar[bool] = False  # the servers are one Redis Cluster (read with a cluster client)
    raw_url: ClassVar[str] = ""  # where the checks read the keys (a cluster: one of its nodes)

    def __init__(self) -> None:
        super().__init__()
        self.raw: Any = (
            redis.cluster.RedisCluster.from_url(self.raw_url, socket_timeout=10)
            if self.cluster
            else redis.Redis.from_url(self.urls[0], socket_timeout=10)
        )
        self.name = f"model:{uuid.uuid4().hex[:12]}"
        self.family = "lock"
        self.clients: list[redmutex.Client] = []
        self.probe_client: redmutex.Client | None = None
        self.handles: dict[tuple[int, str, float | None], Any] = {}
        self.holds: dict[tuple[int, str, float | None], Hold] = {}
        self.exact = True  # no hold ran out unreleased: the servers' state is the model's
        self.log: list[str] = []  # the steps so far, for the failure message

    # -- set-up ------------------------------------------------------------------------

    # The kinds whose key carries several holds come up more often than the plain lock.
    @initialize(
        family=st.sampled_from([f for f in FAMILIES for _ in range(1 if f == "lock" else 2)]),
        owners=st.integers(1, 3),
    )
    def start(self, family: str, owners: int) -> None:
        self.family = family
        for _ in range(owners):
            self.clients.append(redmutex.Client(self.urls, watchdog_lease=WATCHDOG_LEASE))
        self.probe_client = redmutex.Client(self.urls)

    def teardown(self) -> None:
        for c in [*self.clients, self.probe_client]:
            if c is not None:
                c.close()
        keys = [self.name, *self.raw.scan_iter(match=f"*{{{self.name}}}*")]
        for key in keys:  # one by one: a cluster client refuses a multi-key DEL across nodes
            self.raw.delete(key)
        self.raw.close()

    def _side(self, side: str) -> str:
        return side if self.family == "rw" else self.family

    def _handle(self, owner: int, side: str, lease: float | None) -> Any:
        key = (owner % len(self.clients), self._side(side), lease)
        if key not in self.handles:
            c = self.clients[key[0]]
            if self.family == "rw":
                rw = c.rwlock(self.name, lease=lease)
                self.handles[key] = rw.read if key[1] == "read" else rw.write
            else:
                self.handles[key] = getattr(c, self.family)(self.name, lease=lease)
            self.holds[key] = Hold(lease=lease)
        return key, self.handles[key]

    def _held(self) -> list[tuple[int, str, float | None]]:
        return sorted((k for k, h in self.holds.items() if h.count > 0), key=repr)

    def _owners_holding(self, side: str | None = None) -> set[int]:
        return {k[0] for k in self._held() if side is None or k[1] == side}

    # -- what the servers must answer -----------------------------------------------------

    def _predict_acquire(self, key: tuple[int, str, float | None]) -> bool:
        owner, side, _ = key
        if side == "lock":
            return not self._held()  # anonymous holders: every handle is another one
        if side in ("rlock", "fair_lock"):
            return not (self._owners_holding() - {owner})
        if side == "read":
            return not (self._owners_holding("write") - {owner})
        # write: a free lock, or this owner's writer again (a reader cannot upgrade)
        return not self._held() or owner in self._owners_holding("write")

    # -- steps ---------------------------------------------------------------------------

    @rule(owner=st.integers(0, 2), side=st.sampled_from(["read", "write"]), lease=st.sampled_from(LEASES))
    def acquire(self, owner: int, side: str, lease: float | None) -> None:
        key, lock = self._handle(owner, side, lease)
        want = self._predict_acquire(key)
        sent = time.monotonic()
        try:
            got = lock.acquire(blocking=False)
            self._note(f"acquire {key}: {got}")
        except redmutex.LockLostError:
            self._note(f"acquire {key}: LockLostError")
            assert not self.exact, f"acquire {key}: an earlier hold was lost, yet none ran out"
            return
        if self.exact:
            assert got == want, f"acquire {key}: {'took' if got else 'refused'}, the model says {want}"
        if got:
            self._granted(key, sent, lease)

    def _granted(self, key: tuple[int, str, float | None], sent: float, seconds: float | None) -> None:
        h = self.holds[key]
        h.count += 1
        if seconds is not None:
            h.valid_until = max(h.valid_until, sent + seconds - _drift(seconds))

    # Every draw is independent of the state (which depends on time when a hold runs out):
    # `pick` chooses among the holds there are, and a step that finds none does nothing.

    def _pick(self, pick: int) -> tuple[int, str, float | None] | None:
        held = self._held()
        return held[pick % len(held)] if held else None

    @rule(pick=st.integers(0, 5), lease=st.sampled_from(LEASES))
    def reenter(self, pick: int, lease: float | None) -> None:
        """An owner that holds takes the same side again: the same handle, or a second one
        with another lease."""
        key = self._pick(pick)
        if key is not None:
            self.acquire(key[0], key[1], lease)

    @rule(pick=st.integers(0, 5))
    def release(self, pick: int) -> None:
        key = self._pick(pick)
        if key is not None:
            self._release(key)

    def _release(self, key: tuple[int, str, float | None]) -> None:
        h = self.holds[key]
        self._note(f"release {key}")
        try:
            self.handles[key].release()
        except redmutex.LockLostError as e:
            assert not self.exact, f"release {key}: {e!r}, yet no hold ran out"
            h.count -= 1  # released, and reported lost
        except redmutex.NotOwnedError as e:
            assert not self.exact, f"release {key}: {e!r}, yet no hold ran out"
            h.count = 0  # the handle forgot its lost hold: nothing left to release
        else:
            h.count -= 1
        if h.count == 0:
            h.valid_until = 0.0  # a later hold through this handle starts afresh

    @rule(pick=st.integers(0, 5), seconds=st.sampled_from(EXTENSIONS), replace=st.booleans())
    def extend(self, pick: int, seconds: float, replace: bool) -> None:
        key = self._pick(pick)
        if key is None:
            return
        h = self.holds[key]
        sent = time.monotonic()
        self._note(f"extend {key} {seconds} replace={replace}")
        try:
            self.handles[key].extend(seconds, replace=replace)
        except (redmutex.LockLostError, redmutex.NotOwnedError) as e:
            assert not self.exact, f"extend {key}: {e!r}, yet no hold ran out"
            return
        if h.lease is not None:
            end = sent + seconds - _drift(seconds)
            # replace sets the hold's validity; add only lengthens it
            h.valid_until = end if replace else max(h.valid_until, end)

    @precondition(lambda self: self.family == "rw")
    @rule(lease=st.sampled_from(LEASES), give_up_writing=st.booleans())
    def downgrade(self, lease: float | None, give_up_writing: bool) -> None:
        """The writer reads too; then, maybe, gives up writing and keeps its read hold."""
        if not self._owners_holding("write"):
            return
        owner = min(self._owners_holding("write"))
        self.acquire(owner, "read", lease)
        writes = [k for k in self._held() if k[0] == owner and k[1] == "write"]
        if give_up_writing and writes:
            self._release(writes[0])

    @precondition(lambda self: self.family == "rw")
    @rule(lease=st.sampled_from(LEASES))
    def upgrade(self, lease: float | None) -> None:
        """A reader asks for the write side: only its own writer may come in again."""
        if not self._owners_holding("read"):
            return
        owner = min(self._owners_holding("read"))
        self.acquire(owner, "write", lease)

    @rule(seconds=st.sampled_from(SLEEPS))
    def time_passes(self, seconds: float) -> None:
        """Watchdog renewals happen meanwhile; explicit leases are not let run out."""
        ends = [self.handles[k].validity for k in self._held() if self.holds[k].lease is not None]
        dt = max(0.0, min([seconds, *(v - SPARE for v in ends)]))
        self._note(f"sleep {dt:.3f}")
        time.sleep(dt)

    # -- after every step -------------------------------------------------------------------

    @invariant()
    def holds_are_covered_and_exclusive(self) -> None:
        if not self.clients:
            return
        valid: list[tuple[tuple[int, str, float | None], float]] = []
        t1 = time.monotonic()
        for key in self._held():
            lock, h = self.handles[key], self.holds[key]
            v = lock.validity
            if h.lease is not None and self.exact:
                need = h.valid_until - t1
                assert v >= need - 0.02, f"{key}: valid for {v:.3f} s, the model says at least {need:.3f} s"
            if v <= 0 or lock.lost:
                self.exact = False  # ran out unreleased (a slow machine): the servers may differ now
            elif v > MARGIN:
                valid.append((key, v))
        if valid:
            pttl = self.raw.pttl(self.name)
            t2 = time.monotonic()
            longest = max(v for _, v in valid)
            assert pttl >= 0 and pttl / 1000 + (t2 - t1) + 0.002 >= longest, (
                f"the key's TTL is {pttl} ms while {max(valid, key=lambda x: x[1])[0]} "
                f"is valid for {longest * 1000:.0f} ms; holds: {self._describe()}"
            )
        self._probe(valid)

    def _probe(self, valid: list[tuple[tuple[int, str, float | None], float]]) -> None:
        """Another client's try: refused while a hold is valid, granted when the model says free."""
        assert self.probe_client is not None
        sides = {k[1] for k, _ in valid}
        if self.family == "rw":
            rw = self.probe_client.rwlock(self.name, lease=5.0)
            probes = [(rw.write, bool(sides), not self._held())]
            probes.append((rw.read, "write" in sides, not self._owners_holding("write")))
        else:
            lock = getattr(self.probe_client, self.family)(self.name, lease=5.0)
            probes = [(lock, bool(sides), not self._held())]
        for lock, must_fail, free in probes:
            got = lock.acquire(blocking=False)
            if got:
                lock.release()
            assert not (got and must_fail), (
                f"another client took {lock!r} while holds are valid: {self._describe()}"
            )
            if self.exact and free:
                assert got, f"the model says {lock!r} is free, yet another client could not take it"

    def _note(self, what: str) -> None:
        self.log.append(f"{time.monotonic():.3f} {what} -> pttl {self.raw.pttl(self.name)}")

    def _describe(self) -> str:
        now = time.monotonic()
        parts = []
        for k in self._held():
            h = self.holds[k]
            valid = self.handles[k].validity
            model = "watchdog" if h.lease is None else f"lease {h.lease}, model {h.valid_until - now:.3f} s"
            parts.append(f"{k} x{h.count} (valid {valid:.3f} s, {model})")
        return ("; ".join(parts) or "none") + "\n  " + "\n  ".join(self.log[-40:])


def _settings(examples: int | None = None) -> settings:
    if examples is None:
        examples = int(os.environ.get("REDMUTEX_MODEL_EXAMPLES", "20"))
    seed = os.environ.get("REDMUTEX_MODEL_SEED")
    return settings(
        max_examples=examples,
        stateful_step_count=int(os.environ.get("REDMUTEX_MODEL_STEPS", "20")),
        derandomize=seed is None,
        database=None,
        deadline=None,
        print_blob=True,
        report_multiple_bugs=False,
        # Shrinking replays steps whose timing differs run to run: slow, and often "flaky".
        # The failure message lists the steps that led to it anyway.
        phases=[Phase.explicit, Phase.reuse, Phase.generate]
        + ([Phase.shrink] if os.environ.get("REDMUTEX_MODEL_SHRINK") else []),
        suppress_health_check=list(HealthCheck),
    )


@pytest.fixture
def model_urls(redis_url: str) -> Iterator[list[str]]:
    """The servers the model runs against: REDMUTEX_MODEL_URLS (comma-separated), or the test's own."""
    env = os.environ.get("REDMUTEX_MODEL_URLS")
    yield [u.strip() for u in env.split(",")] if env else [redis_url]


def test_no_hold_is_cut_short_and_none_is_shared(model_urls: list[str]) -> None:
    TTLMachine.urls = model_urls
    TTLMachine.cluster = False
    TTLMachine.raw_url = model_urls[0]
    _run_model()


@pytest.fixture(scope="module")
def cluster_urls() -> Iterator[tuple[str, str]]:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    from rmcluster import Cluster

    with Cluster(masters=3, replicas=1) as cl:
        yield cl.url, f"redis://127.0.0.1:{cl.any_port()}/0"


def test_no_hold_is_cut_short_on_a_cluster(cluster_urls: tuple[str, str]) -> None:
    # The same model where every key of a lock lives in its name's slot on one of three
    # masters: the scripts' TTL rule holds when they run there (and renewals go per slot).
    TTLMachine.urls = [cluster_urls[0]]
    TTLMachine.cluster = True
    TTLMachine.raw_url = cluster_urls[1]
    _run_model(examples=int(os.environ.get("REDMUTEX_MODEL_CLUSTER_EXAMPLES", "8")))


def _run_model(examples: int | None = None) -> None:
    def machine() -> TTLMachine:
        return TTLMachine()

    seed = os.environ.get("REDMUTEX_MODEL_SEED")
    if seed is not None:  # a random run that the seed reproduces (the chaos profile)
        machine = hypothesis.seed(int(seed))(machine)
    run_state_machine_as_test(machine, settings=_settings(examples))
