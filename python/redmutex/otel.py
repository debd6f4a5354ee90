"""redmutex metrics for OpenTelemetry (``pip install redmutex[otel]``).

::

    from opentelemetry import metrics
    import redmutex, redmutex.otel

    client = redmutex.Client("redis://127.0.0.1:6379/0")
    redmutex.otel.instrument(client)          # the global MeterProvider, or meter_provider=...

The instruments have the names of docs/observability.md (those of
redmutex.prometheus, which an OpenTelemetry Prometheus exporter exposes
alike): histograms ``redmutex_acquire_wait_seconds`` (kind, outcome),
``redmutex_hold_seconds`` (kind) and ``redmutex_server_round_trip_seconds``
(server), with the C core's bucket bounds as advice; gauges
``redmutex_locks_held`` and ``redmutex_waiters``; counters
``redmutex_renewals_total`` (outcome), ``redmutex_locks_lost_total`` and
``redmutex_server_errors_total`` (server, error).

How the histograms get the core's numbers: the core aggregates them itself
(fixed buckets, no allocation), and the OpenTelemetry API has no
asynchronous histogram. At each collection, before the readers read the
histograms, instrument() records what the core counted since the last
collection: in every bucket as many values as it gained, placed inside the
bucket so that they add up to the sum it gained. Counts, buckets and sums
are therefore the core's own, one collection at a time; single values are
not. ``name_label`` (a function from lock name to label value) instead
records each acquire and release of the client's lock objects as it
happens, with a ``name`` attribute, on the wait and hold histograms.
"""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING, Any, Callable, Iterable, Union

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

from ._stats import BUCKET_BOUNDS, NameObservations

if TYPE_CHECKING:
    from ._async import AsyncClient
    from ._client import Client

AnyClient = Union["Client", "AsyncClient"]

__all__ = ["Instrumentation", "instrument"]

_FINITE = BUCKET_BOUNDS[:-1]


def _histogram(meter: Any, name: str, description: str) -> Any:
    try:
        return meter.create_histogram(
            name, unit="s", description=description, explicit_bucket_boundaries_advisory=list(_FINITE)
        )
    except TypeError:  # an API older than 1.23 takes no advice: the SDK's default buckets (or a View)
        return meter.create_histogram(name, unit="s", description=description)


def _values(gained: list[int], total: float) -> Iterable[tuple[float, int]]:
    """(value, how many) to record so that each bucket gains gained[i] values and they add up to total.

    A bucket holds values above the previous bound and up to its own. Every
    value of a finite bucket is put the same fraction t of the way through
    its bucket, and the +Inf bucket's values as far above the last bound as
    the rest of the total needs.
    """
    lows = [0.0, *_FINITE]
    base = sum(n * lo for n, lo in zip(gained, lows))
    room = sum(n * (hi - lo) for n, lo, hi in zip(gained[:-1], lows, _FINITE))
    rest = total - base
    t = 1.0 if room == 0 else min(1.0, max(rest / room, 1e-9))
    for i, n in enumerate(gained[:-1]):
        if n:
            yield lows[i] + t * (_FINITE[i] - lows[i]), n
    if gained[-1]:
        above = max((rest - t * room) / gained[-1], 1e-9)
        yield _FINITE[-1] + above, gained[-1]


class _Replayed:
    """One histogram series of the core, replayed into an OpenTelemetry histogram."""

    __slots__ = ("buckets", "sum")

    def __init__(self) -> None:
        self.buckets = [0] * len(BUCKET_BOUNDS)
        self.sum = 0.0

    def catch_up(self, instrument: Any, attributes: dict[str, str], h: dict[str, Any]) -> None:
        counts, previous = [], 0
        for cumulative in h["buckets"]:
            counts.append(cumulative - previous)
            previous = cumulative
        gained = [max(0, now - before) for now, before in zip(counts, self.buckets)]
        if any(gained):
            for value, n in _values(gained, h["sum"] - self.sum):
                for _ in range(n):
                    instrument.record(value, attributes)
        self.buckets, self.sum = counts, h["sum"]


class Instrumentation:
    """What instrument() returns: close() stops reporting the client."""

    def __init__(self, client: AnyClient, meter: Any, name_label: Callable[[Any], str | None] | None) -> None:
        self._client = weakref.ref(client)
        self._mu = threading.Lock()
        self._last: dict[str, Any] | None = None
        self._series: dict[tuple[str, tuple[tuple[str, str], ...]], _Replayed] = {}
        self._closed = False
        self._wait = _histogram(meter, "redmutex_acquire_wait_seconds", "Time acquisitions of locks waited.")
        self._hold = _histogram(meter, "redmutex_hold_seconds", "Time locks were held.")
        self._rtt = _histogram(
            meter, "redmutex_server_round_trip_seconds", "Round trips to each Redis server."
        )
        self._names: NameObservations | None = None
        if name_label is not None:
            self._names = NameObservations(name_label, self._record_named)
            client._add_observer(self._names)
        # The first asynchronous instrument's callback takes the snapshot and
        # replays the histograms; the SDK runs every callback before it reads
        # any instrument, so the replayed values are in this collection.
        meter.create_observable_gauge(
            "redmutex_locks_held", callbacks=[self._held], description="Locks this process holds now."
        )
        meter.create_observable_gauge(
            "redmutex_waiters", callbacks=[self._waiters], description="Acquisitions waiting now."
        )
        meter.create_observable_counter(
            "redmutex_renewals_total", callbacks=[self._renewals], description="Watchdog renewals by outcome."
        )
        meter.create_observable_counter(
            "redmutex_locks_lost_total", callbacks=[self._lost], description="Held locks found lost."
        )
        meter.create_observable_counter(
            "redmutex_server_errors_total",
            callbacks=[self._errors],
            description="Failed requests to each Redis server, by class of error.",
        )

    def close(self) -> None:
        """Stops reporting (the instruments stay with the meter, silent)."""
        with self._mu:
            self._closed = True
        client = self._client()
        if client is not None and self._names is not None:
            client._remove_observer(self._names)

    def _record_named(self, metric: str, attributes: dict[str, str], seconds: float) -> None:
        (self._wait if metric == "acquire_wait" else self._hold).record(seconds, attributes)

    def _replay(self, instrument: Any, key: str, attributes: dict[str, str], h: dict[str, Any]) -> None:
        series = self._series.setdefault((key, tuple(sorted(attributes.items()))), _Replayed())
        series.catch_up(instrument, attributes, h)

    def _snapshot(self) -> dict[str, Any] | None:
        client = self._client()
        with self._mu:
            if self._closed or client is None:
                self._last = None
                return None
            s = self._last = client.stats()
            if self._names is None:
                for kind, outcomes in s["acquire_wait_seconds"].items():
                    for outcome, h in outcomes.items():
                        self._replay(self._wait, "wait", {"kind": kind, "outcome": outcome}, h)
                for kind, h in s["hold_seconds"].items():
                    self._replay(self._hold, "hold", {"kind": kind}, h)
            for server, sv in s["servers"].items():
                self._replay(self._rtt, "rtt", {"server": server}, sv["round_trip_seconds"])
            return s

    def _held(self, options: CallbackOptions) -> Iterable[Observation]:
        s = self._snapshot()
        return [] if s is None else [Observation(s["locks_held"])]

    def _waiters(self, options: CallbackOptions) -> Iterable[Observation]:
        s = self._last
        return [] if s is None else [Observation(s["waiters"])]

    def _renewals(self, options: CallbackOptions) -> Iterable[Observation]:
        s = self._last
        return [] if s is None else [Observation(n, {"outcome": o}) for o, n in s["renewals"].items()]

    def _lost(self, options: CallbackOptions) -> Iterable[Observation]:
        s = self._last
        return [] if s is None else [Observation(s["locks_lost"])]

    def _errors(self, options: CallbackOptions) -> Iterable[Observation]:
        s = self._last
        if s is None:
            return []
        return [
            Observation(n, {"server": server, "error": error})
            for server, sv in s["servers"].items()
            for error, n in sv["errors"].items()
        ]


def instrument(
    client: AnyClient,
    meter_provider: Any | None = None,
    name_label: Callable[[Any], str | None] | None = None,
) -> Instrumentation:
    """Reports a redmutex.Client's (or AsyncClient's) metrics through OpenTelemetry.

    ``meter_provider``: the MeterProvider to use (default: the global one).
    ``name_label``: a function from lock name to label value, for a ``name``
    attribute on the wait and hold histograms (keep its values few).
    Returns an Instrumentation; its close() stops the reporting. The client
    is not kept alive by it.
    """
    if not hasattr(client, "stats"):
        raise TypeError(f"not a redmutex client: {client!r}")
    provider = meter_provider if meter_provider is not None else metrics.get_meter_provider()
    from . import __version__

    meter = provider.get_meter("redmutex", __version__)
    return Instrumentation(client, meter, name_label)
