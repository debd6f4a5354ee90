"""client.stats(), redmutex.prometheus, redmutex.otel and the `redmutex` logger.

Scripted scenarios with exact expectations against a real redis-server: N
uncontended acquisitions give N acquisitions and N hold samples, K timeouts
K timeout outcomes, a key deleted under the watchdog one loss (and a
WARNING), a stopped server errors for that server only. The Prometheus
exposition is read back with prometheus_client's own parser, OpenTelemetry
through the SDK's in-memory reader: every surface shows the same numbers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from typing import Any

import pytest
import redis
import redmutex
import redmutex.asyncio

from conftest import RedisServer
from rmtest_util import wait_until


def acquired(stats: dict[str, Any], kind: str = "lock", outcome: str = "acquired") -> int:
    return stats["acquire_wait_seconds"][kind][outcome]["count"]


# ---- client.stats() -----------------------------------------------------------


def test_n_uncontended_acquisitions_give_n_acquisitions_and_n_hold_samples(client: redmutex.Client) -> None:
    before = client.stats()
    assert before["counting"] is True and acquired(before) == 0
    assert before["bucket_bounds"][0] == pytest.approx(1e-4) and math.isinf(before["bucket_bounds"][-1])
    n = 12
    for _ in range(n):
        with client.lock("py-pairs"):
            assert client.stats()["locks_held"] == 1
    s = client.stats()
    assert acquired(s) == n and s["hold_seconds"]["lock"]["count"] == n
    h = s["hold_seconds"]["lock"]
    assert h["buckets"][-1] == n and h["sum"] > 0 and h["buckets"] == sorted(h["buckets"])  # cumulative
    assert s["locks_held"] == 0 and s["waiters"] == 0 and s["locks_lost"] == 0
    assert (
        sum(acquired(s, k, o) for k in s["acquire_wait_seconds"] for o in ("timeout", "interrupted", "error"))
        == 0
    )
    (server,) = s["servers"].values()
    assert server["reachable"] and server["round_trip_seconds"]["count"] >= 2 * n
    assert set(server["errors"]) == {"timeout", "connection", "protocol", "auth", "reply", "duplicate"}
    assert not any(server["errors"].values())


def test_k_timeouts_give_k_timeout_outcomes(make_client: Any) -> None:
    holder, c = make_client(), make_client()
    held = holder.rlock("py-busy")
    held.acquire()
    k = 3
    lock = c.rlock("py-busy")
    for i in range(k):
        assert lock.acquire(timeout=0.02 if i else 0) is False
    with pytest.raises(redmutex.LockTimeout), c.rlock("py-busy", timeout=0.02):
        pass
    s = c.stats()
    assert acquired(s, "rlock", "timeout") == k + 1 and acquired(s, "rlock") == 0 and s["waiters"] == 0
    held.release()
    assert holder.stats()["hold_seconds"]["rlock"]["count"] == 1


def test_counting_off_reports_zeros(make_client: Any) -> None:
    c = make_client(count_stats=False)
    with c.lock("py-off"):
        pass
    s = c.stats()
    assert s["counting"] is False and acquired(s) == 0 and s["hold_seconds"]["lock"]["count"] == 0


def test_a_lock_deleted_under_the_watchdog_counts_one_loss_and_logs_it(
    make_client: Any, r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="redmutex")
    c = make_client(watchdog_lease=0.4, command_timeout=0.2)
    lock = c.lock("py-deleted")
    lock.acquire()
    wait_until(lambda: c.stats()["renewals"]["renewed"] >= 1, what="a renewal")
    assert r.delete("py-deleted") == 1
    wait_until(lambda: lock.lost, what="the loss")
    s = c.stats()
    assert s["locks_lost"] == 1 and s["renewals"]["lost"] == 1 and s["locks_held"] == 0
    assert s["hold_seconds"]["lock"]["count"] == 1
    lost = wait_until(
        lambda: [rec for rec in caplog.records if "is lost" in rec.getMessage()], what="the WARNING"
    )
    assert len(lost) == 1 and lost[0].levelno == logging.WARNING and lost[0].name == "redmutex"
    assert lost[0].redmutex_lock == "py-deleted" and lost[0].redmutex_server is None
    with pytest.raises(redmutex.LockLostError):
        lock.release()
    assert c.stats()["locks_lost"] == 1


def test_a_stopped_server_counts_errors_for_that_server_only(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="redmutex")
    servers = [RedisServer(str(tmp_path)) for _ in range(3)]
    for s in servers:
        s.start()
    try:
        c = redmutex.Client([s.url for s in servers], command_timeout=0.5)
        with c.lock("py-redlock"):
            pass
        before = {addr: sv["round_trip_seconds"]["count"] for addr, sv in c.stats()["servers"].items()}
        servers[1].stop()
        n = 4
        for _ in range(n):
            with c.lock("py-redlock"):
                pass
        stats = c.stats()["servers"]
        dead = f"{servers[1].url}/0"
        assert list(stats) == [f"{s.url}/0" for s in servers]
        for addr, sv in stats.items():
            if addr == dead:
                # At once for each acquisition (unless the live two decided first: not waited for,
                # not counted); releases went only where the lock was.
                assert 1 <= sv["errors"]["connection"] == sum(sv["errors"].values()) <= n
                assert not sv["reachable"] and sv["round_trip_seconds"]["count"] == before[addr]
            else:
                assert not any(sv["errors"].values()) and sv["reachable"]
                assert sv["round_trip_seconds"]["count"] == before[addr] + 2 * n
        c.close()
        warnings = wait_until(
            lambda: [rec for rec in caplog.records if "unreachable" in rec.getMessage()], what="the WARNING"
        )
        assert len(warnings) == 1 and warnings[0].redmutex_server == dead
    finally:
        for s in servers:
            s.stop()


def test_async_client_reports_the_same_numbers(redis_url: str) -> None:
    async def main() -> dict[str, Any]:
        async with redmutex.asyncio.AsyncClient(redis_url) as c:
            for _ in range(5):
                async with c.lock("py-async"):
                    pass
            holder = c.lock("py-async-busy")
            await holder.acquire()
            assert await c.lock("py-async-busy").acquire(timeout=0.05) is False  # a pollable wait
            await holder.release()
            return c.stats()

    s = asyncio.run(main())
    assert acquired(s) == 6 and acquired(s, "lock", "timeout") == 1
    assert s["hold_seconds"]["lock"]["count"] == 6 and s["waiters"] == 0


# ---- Prometheus ---------------------------------------------------------------------


def _exposition(collector: Any) -> dict[str, Any]:
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    registry = CollectorRegistry()
    registry.register(collector)
    text = generate_latest(registry).decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def _sample(family: Any, suffix: str, **labels: str) -> float:
    values = [
        s.value
        for s in family.samples
        if s.name == family.name + suffix and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    assert len(values) == 1, (family.name + suffix, labels, family.samples)
    return values[0]


def test_prometheus_exposition_parses_and_matches_stats(make_client: Any) -> None:
    import redmutex.prometheus

    c = make_client()
    for _ in range(7):
        with c.lock("py-prom"):
            pass
    assert c.lock("py-prom-t").acquire(blocking=False) is True
    assert make_client().lock("py-prom-t").acquire(blocking=False) is False
    families = _exposition(redmutex.prometheus.Collector(c))
    s = c.stats()
    assert {
        "redmutex_acquire_wait_seconds",
        "redmutex_hold_seconds",
        "redmutex_locks_held",
        "redmutex_waiters",
        "redmutex_renewals",
        "redmutex_locks_lost",
        "redmutex_server_round_trip_seconds",
        "redmutex_server_errors",
    } <= set(families)
    wait = families["redmutex_acquire_wait_seconds"]
    assert wait.type == "histogram"
    assert _sample(wait, "_count", kind="lock", outcome="acquired") == acquired(s) == 8
    assert _sample(wait, "_bucket", kind="lock", outcome="acquired", le="+Inf") == 8
    assert _sample(wait, "_sum", kind="lock", outcome="acquired") == pytest.approx(
        s["acquire_wait_seconds"]["lock"]["acquired"]["sum"]
    )
    assert _sample(families["redmutex_hold_seconds"], "_count", kind="lock") == 7
    assert _sample(families["redmutex_locks_held"], "") == 1
    assert families["redmutex_renewals"].type == "counter"
    assert _sample(families["redmutex_renewals"], "_total", outcome="renewed") == s["renewals"]["renewed"]
    (server,) = s["servers"]
    assert _sample(families["redmutex_server_errors"], "_total", server=server, error="timeout") == 0
    rtt = families["redmutex_server_round_trip_seconds"]
    assert _sample(rtt, "_count", server=server) == s["servers"][server]["round_trip_seconds"]["count"]


def test_prometheus_name_label_is_opt_in_and_user_defined(make_client: Any) -> None:
    import redmutex.prometheus

    c = make_client()
    collector = redmutex.prometheus.Collector(c, name_label=lambda name: name.split(":")[0])
    for name in ("jobs:1", "jobs:2", "mail:1"):
        lock = c.rlock(name)
        with lock, lock:  # nested: one hold
            pass
    assert c.lock("jobs:busy").acquire() and make_client().lock("jobs:busy").acquire(blocking=False) is False
    families = _exposition(collector)
    wait, hold = families["redmutex_acquire_wait_seconds"], families["redmutex_hold_seconds"]
    assert _sample(wait, "_count", kind="rlock", outcome="acquired", name="jobs") == 4
    assert _sample(wait, "_count", kind="rlock", outcome="acquired", name="mail") == 2
    assert _sample(hold, "_count", kind="rlock", name="jobs") == 2
    assert _sample(hold, "_count", kind="rlock", name="mail") == 1
    assert {s.labels["name"] for s in wait.samples} == {"jobs", "mail"}
    collector.close()
    with c.rlock("jobs:3"):
        pass
    assert _sample(_exposition(collector)["redmutex_hold_seconds"], "_count", kind="rlock", name="jobs") == 2
    # Without the label function there is no name label at all.
    plain = _exposition(redmutex.prometheus.Collector(c))
    assert all("name" not in s.labels for s in plain["redmutex_acquire_wait_seconds"].samples)


# ---- OpenTelemetry ----------------------------------------------------------------------


def _otel_points(reader: Any) -> dict[str, list[Any]]:
    data = reader.get_metrics_data()
    out: dict[str, list[Any]] = {}
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                out.setdefault(m.name, []).extend(m.data.data_points)
    return out


def _point(points: list[Any], **attributes: str) -> Any:
    found = [p for p in points if all(p.attributes.get(k) == v for k, v in attributes.items())]
    assert len(found) == 1, (attributes, points)
    return found[0]


def test_opentelemetry_in_memory_reader_sees_the_same_numbers(make_client: Any, r: redis.Redis) -> None:
    import redmutex.otel
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    c = make_client()
    inst = redmutex.otel.instrument(c, meter_provider=provider)
    for _ in range(9):
        with c.lock("py-otel"):
            pass
    points = _otel_points(reader)
    s = c.stats()
    wait = _point(points["redmutex_acquire_wait_seconds"], kind="lock", outcome="acquired")
    core = s["acquire_wait_seconds"]["lock"]["acquired"]
    assert wait.count == core["count"] == 9
    assert wait.sum == pytest.approx(core["sum"], rel=1e-6)
    assert list(wait.explicit_bounds) == s["bucket_bounds"][:-1]
    per_bucket = [b - a for a, b in zip([0, *core["buckets"]], core["buckets"])]
    assert list(wait.bucket_counts) == per_bucket  # the core's own buckets
    assert _point(points["redmutex_hold_seconds"], kind="lock").count == 9
    assert _point(points["redmutex_locks_held"]).value == 0
    assert _point(points["redmutex_renewals_total"], outcome="renewed").value == s["renewals"]["renewed"]
    (server,) = s["servers"]
    rtt = _point(points["redmutex_server_round_trip_seconds"], server=server)
    assert rtt.count == s["servers"][server]["round_trip_seconds"]["count"]
    # A second collection adds only what happened since (cumulative, no double counting).
    with c.lock("py-otel"):
        pass
    points = _otel_points(reader)
    assert _point(points["redmutex_acquire_wait_seconds"], kind="lock", outcome="acquired").count == 10
    inst.close()


def test_opentelemetry_name_label(make_client: Any) -> None:
    import redmutex.otel
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    c = make_client()
    inst = redmutex.otel.instrument(
        c, meter_provider=MeterProvider(metric_readers=[reader]), name_label=lambda n: n.split("/")[0]
    )
    for name in ("a/1", "a/2", "b/1"):
        with c.lock(name):
            pass
    points = _otel_points(reader)
    assert _point(points["redmutex_acquire_wait_seconds"], name="a", outcome="acquired").count == 2
    assert _point(points["redmutex_hold_seconds"], name="b", kind="lock").count == 1
    inst.close()


def test_metrics_modules_are_not_imported_by_the_package() -> None:
    import subprocess
    import sys

    code = (
        "import sys, redmutex, redmutex.asyncio\n"
        "prefixes = ('prometheus_client', 'opentelemetry', 'redmutex.prometheus', 'redmutex.otel')\n"
        "print(sorted(m for m in sys.modules if m.startswith(prefixes)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_grafana_dashboard_and_the_docs_use_the_exposed_metric_names(make_client: Any) -> None:
    import json
    import os
    import re

    import redmutex.prometheus

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    c = make_client()
    with c.lock("py-names"):
        pass
    exposed = set()
    for family in _exposition(redmutex.prometheus.Collector(c)).values():
        exposed |= {s.name for s in family.samples}
    with open(os.path.join(root, "docs", "grafana", "redmutex-dashboard.json")) as f:
        dashboard = json.load(f)
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    used = {name for e in exprs for name in re.findall(r"\bredmutex_[a-z_]+", e)}
    assert used and used <= exposed, used - exposed
    with open(os.path.join(root, "docs", "observability.md")) as f:
        documented = set(re.findall(r"^\| `(redmutex_[a-z_]+)` \|", f.read(), re.M))
    base = {re.sub(r"_(bucket|count|sum)$", "", n) for n in exposed}
    assert documented == base, documented ^ base


def test_a_forked_child_logs_through_its_own_thread(make_client: Any, tmp_path: Any) -> None:
    import os
    import sys

    make_client()  # the parent's log thread runs
    out = tmp_path / "child.log"
    pid = os.fork()
    if pid == 0:  # the child: a message of its own reaches its own `redmutex` logger
        code = 1
        try:
            handler = logging.FileHandler(str(out))
            logging.getLogger("redmutex").addHandler(handler)
            dead = redmutex.Client("redis://127.0.0.1:1")
            with contextlib.suppress(redmutex.ConnectionError):
                dead.lock("py-child").acquire(blocking=False)
            wait_until(lambda: out.exists() and "unreachable" in out.read_text(), what="the child's log")
            code = 0
        finally:
            sys.stdout.flush()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
