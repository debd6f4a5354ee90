"""The numbers behind ``client.stats()``, ``redmutex.prometheus`` and ``redmutex.otel``.

Every number comes from the C core's snapshot (redmutex_client_stats), so
the dict, the Prometheus exposition and OpenTelemetry report the same
counts. The one exception is opt-in: a per-name label (``name_label=``)
needs the lock's name with each observation, which the per-client C
snapshot does not keep (names are unbounded; the snapshot is fixed-size and
allocation-free). Those observations are recorded here, in Python, around
each acquire and release of the client's lock objects (sync and asyncio),
only while such a label function is installed; see NameObservations.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Any, Callable, Dict

from ._errors import check
from ._redmutex_cffi import ffi, lib

#: Label values, indexed as the C enums.
KINDS: tuple[str, ...] = ("lock", "rlock", "fair", "read", "write")
OUTCOMES: tuple[str, ...] = ("acquired", "timeout", "interrupted", "error")
RENEWAL_OUTCOMES: tuple[str, ...] = ("renewed", "failed", "lost")
ERROR_CLASSES: tuple[str, ...] = ("timeout", "connection", "protocol", "auth", "reply", "duplicate")

_NS = 1e9

Histogram = Dict[str, Any]  # {"count": int, "sum": float seconds, "buckets": [cumulative count per bound]}


def _bounds(s: Any) -> list[float]:
    return [math.inf if b == 2**64 - 1 else b / _NS for b in s.bucket_bounds_ns]


def _hist(h: Any) -> Histogram:
    cumulative, total = [], 0
    for i in range(lib.REDMUTEX_STATS_BUCKETS):
        total += h.buckets[i]
        cumulative.append(total)
    return {"count": int(h.count), "sum": h.sum_ns / _NS, "buckets": cumulative}


def snapshot(client_ptr: Any) -> dict[str, Any]:
    """client.stats(): the C snapshot as a dict (see Client.stats)."""
    s = ffi.new("redmutex_stats *")
    s.version = lib.REDMUTEX_STATS_VERSION
    check(lib.redmutex_client_stats(client_ptr, s))
    out: dict[str, Any] = {
        "counting": bool(s.counting),
        "bucket_bounds": _bounds(s),
        "acquire_wait_seconds": {
            kind: {outcome: _hist(s.acquire_wait[k][o]) for o, outcome in enumerate(OUTCOMES)}
            for k, kind in enumerate(KINDS)
        },
        "hold_seconds": {kind: _hist(s.hold[k]) for k, kind in enumerate(KINDS)},
        "locks_held": int(s.locks_held),
        "waiters": int(s.waiters),
        "renewals": {outcome: int(s.renewals[o]) for o, outcome in enumerate(RENEWAL_OUTCOMES)},
        "locks_lost": int(s.locks_lost),
        "servers": {},
    }
    sv = ffi.new("redmutex_server_stats *")
    for i in range(s.server_count):
        sv.version = lib.REDMUTEX_STATS_VERSION
        check(lib.redmutex_client_server_stats(client_ptr, i, sv))
        out["servers"][ffi.string(sv.address).decode("utf-8", "replace")] = {
            "reachable": bool(sv.reachable),
            "round_trip_seconds": _hist(sv.round_trip),
            "errors": {name: int(sv.errors[e]) for e, name in enumerate(ERROR_CLASSES)},
        }
    return out


#: The upper bounds of every histogram's buckets, in seconds (the last is +Inf): redmutex.h's.
BUCKET_BOUNDS: tuple[float, ...] = (
    1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0, 300.0, 3600.0, math.inf,
)  # fmt: skip


# ---- per-name observations (opt-in) -------------------------------------------------


class _Hist:
    """A histogram with the C core's buckets, kept in Python (per-name series)."""

    __slots__ = ("buckets", "count", "sum")

    _bounds = BUCKET_BOUNDS

    def __init__(self) -> None:
        self.count = 0
        self.sum = 0.0
        self.buckets = [0] * len(self._bounds)

    def observe(self, seconds: float) -> None:
        seconds = max(0.0, seconds)
        i = 0
        while seconds > self._bounds[i]:
            i += 1
        self.buckets[i] += 1
        self.count += 1
        self.sum += seconds

    def as_dict(self) -> Histogram:
        cumulative, total = [], 0
        for n in self.buckets:
            total += n
            cumulative.append(total)
        return {"count": self.count, "sum": self.sum, "buckets": cumulative}


def outcome_of(exc: BaseException | None, acquired: bool) -> str:
    """The `outcome` label of an acquire that returned `acquired` or raised `exc`."""
    if exc is None:
        return "acquired" if acquired else "timeout"
    from ._errors import ClosedError, InterruptedWait, LockTimeout

    if isinstance(exc, LockTimeout):
        return "timeout"
    if (
        isinstance(exc, (KeyboardInterrupt, InterruptedWait, ClosedError))
        or type(exc).__name__ == "CancelledError"
    ):
        return "interrupted"
    return "error"


class NameObservations:
    """Acquire waits and holds per lock name, for a label function given by the user.

    Installed on a client by a Collector or instrument() made with
    ``name_label=``; the lock objects report each acquire and release here
    while it is installed. ``label(name)`` maps a lock name (str or bytes, as
    given) to the label value, or None to leave the name out (its
    observations then carry name=""). Holds are timed from the acquire that
    made the owner's outermost hold to the release that ended it.
    ``sink(metric, labels, seconds)``, when given, receives each observation
    as it is made (OpenTelemetry records it there).
    """

    def __init__(
        self,
        label: Callable[[Any], str | None],
        sink: Callable[[str, dict[str, str], float], None] | None = None,
    ) -> None:
        if not callable(label):
            raise TypeError("name_label must be a function from lock name to label value")
        self._label = label
        self._sink = sink
        self._mu = threading.Lock()
        self.wait: dict[tuple[str, str, str], _Hist] = {}
        self.hold: dict[tuple[str, str], _Hist] = {}
        self._holds: dict[tuple[int, Any], tuple[float, int]] = {}

    def _name(self, name: Any) -> str:
        value = self._label(name)
        return "" if value is None else str(value)

    def acquired(self, lock: Any, owner: Any, kind: int, outcome: str, seconds: float) -> None:
        label = self._name(lock.name)
        kind_name = KINDS[kind]
        with self._mu:
            self.wait.setdefault((kind_name, outcome, label), _Hist()).observe(seconds)
            if outcome == "acquired":
                key = (id(lock), owner)
                start, depth = self._holds.get(key, (time.monotonic(), 0))
                self._holds[key] = (start, depth + 1)
        if self._sink is not None:
            self._sink("acquire_wait", {"kind": kind_name, "outcome": outcome, "name": label}, seconds)

    def released(self, lock: Any, owner: Any, kind: int) -> None:
        key = (id(lock), owner)
        with self._mu:
            held = self._holds.get(key)
            if held is None:
                return
            start, depth = held
            if depth > 1:
                self._holds[key] = (start, depth - 1)
                return
            del self._holds[key]
            seconds = time.monotonic() - start
            label = self._name(lock.name)
            self.hold.setdefault((KINDS[kind], label), _Hist()).observe(seconds)
        if self._sink is not None:
            self._sink("hold", {"kind": KINDS[kind], "name": label}, seconds)

    def snapshot(self) -> tuple[dict[tuple[str, str, str], Histogram], dict[tuple[str, str], Histogram]]:
        with self._mu:
            return (
                {k: h.as_dict() for k, h in self.wait.items()},
                {k: h.as_dict() for k, h in self.hold.items()},
            )
