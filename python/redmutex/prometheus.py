"""redmutex metrics for prometheus_client (``pip install redmutex[prometheus]``).

::

    from prometheus_client import REGISTRY, start_http_server
    import redmutex, redmutex.prometheus

    client = redmutex.Client("redis://127.0.0.1:6379/0")
    REGISTRY.register(redmutex.prometheus.Collector(client))
    start_http_server(9100)

Each scrape reads the client's counters (client.stats(): no I/O, no lock)
and exposes the metrics of docs/observability.md:

========================================  =========  ==================================
name                                      type       labels
========================================  =========  ==================================
redmutex_acquire_wait_seconds             histogram  kind, outcome (acquired, timeout,
                                                     interrupted, error)
redmutex_hold_seconds                     histogram  kind
redmutex_locks_held                       gauge
redmutex_waiters                          gauge
redmutex_renewals_total                   counter    outcome (renewed, failed, lost)
redmutex_locks_lost_total                 counter
redmutex_server_round_trip_seconds        histogram  server
redmutex_server_errors_total              counter    server, error
========================================  =========  ==================================

Lock names are not labels unless asked for: ``name_label`` is a function
from a lock name to a label value (or None for "no name"), e.g. the part
before the first colon. With it, the two histograms carry a ``name`` label
and are counted in Python around acquire and release of this client's lock
objects (from the Collector's creation on); the rest is unchanged. Keep the
number of values small: every value is a series.

Several clients: pass them as a list (one Collector per registry); each
series then has a ``client`` label, the client's id.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Union

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from ._stats import BUCKET_BOUNDS, NameObservations

if TYPE_CHECKING:
    from ._async import AsyncClient
    from ._client import Client

AnyClient = Union["Client", "AsyncClient"]

__all__ = ["Collector"]

_DOC = {
    "redmutex_acquire_wait_seconds": "Time acquisitions of locks waited, by how they ended.",
    "redmutex_hold_seconds": "Time locks were held, from acquisition to release or loss.",
    "redmutex_locks_held": "Locks this process holds now (not lost, not released).",
    "redmutex_waiters": "Acquisitions waiting for a lock now.",
    "redmutex_renewals_total": "Renewals of held locks by the watchdog, by outcome.",
    "redmutex_locks_lost_total": "Held locks found lost (lease ran out or key gone).",
    "redmutex_server_round_trip_seconds": "Round trips of requests to each Redis server.",
    "redmutex_server_errors_total": "Failed requests to each Redis server, by class of error.",
}


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(float(bound))


def _buckets(h: dict[str, Any]) -> list[tuple[str, float]]:
    return [(_le(b), float(n)) for b, n in zip(BUCKET_BOUNDS, h["buckets"])]


class Collector:
    """A prometheus_client collector of one client's (or several clients') metrics.

    ``client`` is a redmutex.Client, a redmutex.asyncio.AsyncClient, or a
    list of them. ``name_label`` (optional): a function from lock name to
    label value for a ``name`` label on the wait and hold histograms.
    Register it with ``REGISTRY.register(collector)``; ``close()`` stops the
    per-name counting (the collector may then be unregistered).
    """

    def __init__(
        self,
        client: AnyClient | list[AnyClient] | tuple[AnyClient, ...],
        name_label: Callable[[Any], str | None] | None = None,
    ) -> None:
        clients = list(client) if isinstance(client, (list, tuple)) else [client]
        if not clients:
            raise ValueError("Collector needs at least one client")
        for c in clients:
            if not hasattr(c, "stats"):
                raise TypeError(f"not a redmutex client: {c!r}")
        self._clients = clients
        self._labelled = len(clients) > 1
        self._names: list[NameObservations | None] = []
        for c in clients:
            if name_label is None:
                self._names.append(None)
                continue
            obs = NameObservations(name_label)
            c._add_observer(obs)
            self._names.append(obs)

    def close(self) -> None:
        """Stops counting per name (nothing to do without name_label)."""
        for c, obs in zip(self._clients, self._names):
            if obs is not None:
                c._remove_observer(obs)

    def describe(self) -> Iterable[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        extra = ["client"] if self._labelled else []
        by_name = any(obs is not None for obs in self._names)
        wait = HistogramMetricFamily(
            "redmutex_acquire_wait_seconds",
            _DOC["redmutex_acquire_wait_seconds"],
            labels=["kind", "outcome", *(["name"] if by_name else []), *extra],
        )
        hold = HistogramMetricFamily(
            "redmutex_hold_seconds",
            _DOC["redmutex_hold_seconds"],
            labels=["kind", *(["name"] if by_name else []), *extra],
        )
        held = GaugeMetricFamily("redmutex_locks_held", _DOC["redmutex_locks_held"], labels=extra)
        waiters = GaugeMetricFamily("redmutex_waiters", _DOC["redmutex_waiters"], labels=extra)
        renewals = CounterMetricFamily(
            "redmutex_renewals", _DOC["redmutex_renewals_total"], labels=["outcome", *extra]
        )
        lost = CounterMetricFamily("redmutex_locks_lost", _DOC["redmutex_locks_lost_total"], labels=extra)
        rtt = HistogramMetricFamily(
            "redmutex_server_round_trip_seconds",
            _DOC["redmutex_server_round_trip_seconds"],
            labels=["server", *extra],
        )
        errors = CounterMetricFamily(
            "redmutex_server_errors", _DOC["redmutex_server_errors_total"], labels=["server", "error", *extra]
        )
        for c, obs in zip(self._clients, self._names):
            s = c.stats()
            cl = [c.id] if self._labelled else []
            if obs is None:
                for kind, outcomes in s["acquire_wait_seconds"].items():
                    for outcome, h in outcomes.items():
                        if h["count"]:
                            wait.add_metric([kind, outcome, *cl], _buckets(h), h["sum"])
                for kind, h in s["hold_seconds"].items():
                    if h["count"]:
                        hold.add_metric([kind, *cl], _buckets(h), h["sum"])
            else:
                waits, holds = obs.snapshot()
                for (kind, outcome, name), h in sorted(waits.items()):
                    wait.add_metric([kind, outcome, name, *cl], _buckets(h), h["sum"])
                for (kind, name), h in sorted(holds.items()):
                    hold.add_metric([kind, name, *cl], _buckets(h), h["sum"])
            held.add_metric(cl, s["locks_held"])
            waiters.add_metric(cl, s["waiters"])
            for outcome, n in s["renewals"].items():
                renewals.add_metric([outcome, *cl], n)
            lost.add_metric(cl, s["locks_lost"])
            for server, sv in s["servers"].items():
                rtt.add_metric(
                    [server, *cl], _buckets(sv["round_trip_seconds"]), sv["round_trip_seconds"]["sum"]
                )
                for error, n in sv["errors"].items():
                    errors.add_metric([server, error, *cl], n)
        yield from (wait, hold, held, waiters, renewals, lost, rtt, errors)
