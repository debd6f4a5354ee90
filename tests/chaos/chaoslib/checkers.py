"""Checkers C1-C6 of CHAOS.md over a history.

C1 mutual exclusion  believed-held intervals [acquire ok, min(release call,
                     LOST news, validity end)] of different holders of one
                     name never overlap: count and max overlap (ms)
C2 lost updates      final naive counter == completed critical sections; and
                     the CAS register never saw a concurrent writer. The
                     workload never checks its lock before writing, so a
                     holder told LOST (or past its validity) still writes:
                     such late writes are counted, and without them and
                     without C1 overlaps no update can be lost
C3 fences            no stale fenced write accepted (a write of a hold after
                     a write of a later hold); accepted tokens strictly
                     increase; nested acquisitions keep the token
C4 ownership         no release/extend by a non-owner succeeds (step modes),
                     no "ok" release after the lock passed to another holder
C5 liveness          after a heal, an acquisition within the bound; no
                     orphan keys after 3 x lease
C6 lost-lock news    LOST reported no later than validity end + epsilon

Every function takes plain data, so test_checkers.py proves each one fails
on a history that breaks its property.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .history import Event, Hold
from .resource import ResourceState

MS = 1_000_000
INDETERMINATE = {"ECONN", "ESERVER", "EPROTOCOL"}


def percentile(values: list[float], p: float) -> float | None:
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v) - 1, max(0, math.ceil(p / 100 * len(v)) - 1))]


@dataclass
class Metrics:
    attempts: int = 0
    ok: int = 0
    failed: int = 0
    indeterminate: int = 0
    acq_p50: float | None = None
    acq_p99: float | None = None
    c1_overlaps: int = 0
    c1_max_ms: float = 0.0
    c2_completed: int = 0
    c2_lost: int = 0
    c2_cas_fail: int = 0
    c2_late_writes: int = 0  # resource writes made after the writer's belief ended (LOST / validity end)
    c3_stale_accepted: int = 0
    c3_rejected: int = 0
    c3_token_regressions: int = 0
    c3_nested_mismatch: int = 0
    c4_violations: int = 0
    c5_orphans_end: int = 0
    c5_orphans: int = 0
    c5_liveness_violations: int = 0
    c5_recovery_max_ms: float | None = None
    c6_reports: int = 0
    c6_excused: int = 0  # late news from a client process that was itself not scheduled
    c6_late: int = 0
    c6_missing: int = 0
    c6_p99_ms: float | None = None
    c6_max_ms: float | None = None
    examples: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))

    def note(self, checker: str, text: str) -> None:
        if len(self.examples[checker]) < 5:
            self.examples[checker].append(text)


# ---- acquisitions ----------------------------------------------------------------


def count_attempts(events: Iterable[Event], m: Metrics) -> None:
    durations = []
    for e in events:
        ev = e.get("ev")
        if ev == "acq":
            m.attempts += 1
        elif ev == "acq_ok":
            m.ok += 1
            durations.append(e.get("dur_ms", 0.0))
        elif ev == "acq_err":
            if e.get("err") in INDETERMINATE:
                m.indeterminate += 1
            else:
                m.failed += 1
    m.acq_p50 = percentile(durations, 50)
    m.acq_p99 = percentile(durations, 99)


# ---- C1 ----------------------------------------------------------------------------


def check_mutual_exclusion(holds: list[Hold], horizon: int, m: Metrics) -> None:
    by_key: dict[str, list[tuple[int, int, Hold]]] = defaultdict(list)
    for h in holds:
        by_key[h.key].append((h.start, h.believed_end(horizon), h))
    for key, intervals in by_key.items():
        intervals.sort(key=lambda x: x[0])
        active: list[tuple[int, Hold]] = []
        for start, end, h in intervals:
            active = [(e, a) for e, a in active if e > start]
            for e, a in active:
                if (a.proc, a.worker) == (h.proc, h.worker):
                    continue
                overlap = min(e, end) - start
                if overlap > 0:
                    m.c1_overlaps += 1
                    m.c1_max_ms = max(m.c1_max_ms, overlap / MS)
                    m.note(
                        "C1",
                        f"{key}: {a.id} (fence {a.fence}) and {h.id} (fence {h.fence}) "
                        f"both believed they held it for {overlap / MS:.1f} ms",
                    )
            if end > start:
                active.append((end, h))


# ---- C2 ----------------------------------------------------------------------------


def check_lost_updates(events: Iterable[Event], resource: dict[str, ResourceState], m: Metrics) -> None:
    completed: dict[str, int] = defaultdict(int)
    for e in events:
        if e.get("ev") == "cset" and e.get("ok") == 1:
            completed[e["key"]] += 1
        elif e.get("ev") == "cas" and e.get("ok") == 0:
            m.c2_cas_fail += 1
            m.note("C2", f"{e['key']}: CAS by {e['p']}:{e['w']}:{e['h']} found the register changed under it")
    for key, n in completed.items():
        m.c2_completed += n
        final = resource.get(key, ResourceState()).counter
        if final < n:
            m.c2_lost += n - final
            m.note("C2", f"{key}: {n} critical sections completed, counter reads {final}")


def count_late_writes(holds: list[Hold], m: Metrics) -> None:
    for h in holds:
        ends = [x for x in (h.lost_at, h.validity_end) if x is not None]
        if not ends:
            continue
        end = min(ends)
        late = [w for w in h.writes if w.get("ev") in ("cset", "cas") and w["t"] > end]
        if late:
            m.c2_late_writes += len(late)
            m.note(
                "C2",
                f"{h.id} wrote {len(late)} time(s) after its lock was lost or its validity ended "
                f"({(late[0]['t'] - end) / MS:.0f} ms after)",
            )


# ---- C3 ----------------------------------------------------------------------------


def check_fences(holds: list[Hold], resource: dict[str, ResourceState], m: Metrics) -> None:
    start_of = {h.id: h.start for h in holds}
    for key, st in resource.items():
        m.c3_rejected += len(st.rejected)
        newest_start, last_token = -1, -1
        for token, hold_id in st.accepted:
            started = start_of.get(hold_id)
            if token <= last_token:
                m.c3_stale_accepted += 1
                m.note("C3", f"{key}: register accepted token {token} after {last_token}")
            if started is not None and started < newest_start:
                m.c3_stale_accepted += 1
                m.note(
                    "C3", f"{key}: write of {hold_id} (token {token}) accepted after a write of a later hold"
                )
            newest_start = max(newest_start, started if started is not None else -1)
            last_token = max(last_token, token)
    by_key: dict[str, list[Hold]] = defaultdict(list)
    for h in holds:
        by_key[h.key].append(h)
        if any(f != h.fence for f in h.nested_fences):
            m.c3_nested_mismatch += 1
            m.note("C3", f"{h.id}: nested acquisitions reported tokens {h.nested_fences}, outer {h.fence}")
    for hs in by_key.values():
        hs.sort(key=lambda h: h.start)
        for prev, cur in zip(hs, hs[1:]):
            if cur.fence and prev.fence and cur.fence <= prev.fence:
                m.c3_token_regressions += 1


# ---- C4 ----------------------------------------------------------------------------


def check_ownership(events: Iterable[Event], holds: list[Hold], m: Metrics) -> None:
    for e in events:
        if e.get("ev") == "step" and e.get("pass") == 0:
            m.c4_violations += 1
            m.note(
                "C4",
                f"{e['p']}: step '{e['name']}' got {e.get('err', 'false')} "
                f"(expected {e.get('expect', 'true')}) {e.get('msg', '')}".rstrip(),
            )
    by_key: dict[str, list[Hold]] = defaultdict(list)
    for h in holds:
        by_key[h.key].append(h)
    for key, hs in by_key.items():
        starts = sorted((h.start, h) for h in hs)
        for h in hs:
            if h.release_result != "OK" or h.validity_end is None or h.release_call is None:
                continue
            if h.release_call <= h.validity_end:
                continue
            for s, other in starts:
                if h.validity_end < s < h.release_call and (other.proc, other.worker) != (h.proc, h.worker):
                    m.c4_violations += 1
                    m.note(
                        "C4",
                        f"{key}: {h.id}'s release returned ok although {other.id} "
                        f"acquired the lock after {h.id}'s validity ended",
                    )
                    break


# ---- C5 ----------------------------------------------------------------------------


def check_liveness(events: list[Event], bound_ms: float, m: Metrics) -> None:
    heals = [e["t"] for e in events if e.get("p") == "harness" and e.get("ev") == "heal"]
    oks = sorted(e["t"] for e in events if e.get("ev") == "acq_ok")
    tries = sorted(e["t"] for e in events if e.get("ev") == "acq")
    worst = None
    for t in heals:
        first = next((x for x in oks if x > t), None)
        tried = any(x > t for x in tries)
        if not tried:
            continue
        delay = (first - t) / MS if first is not None else math.inf
        worst = delay if worst is None else max(worst, delay)
        if delay > bound_ms:
            m.c5_liveness_violations += 1
            m.note("C5", f"no acquisition within {bound_ms:.0f} ms of the heal at {t} (took {delay:.0f} ms)")
    m.c5_recovery_max_ms = worst


# ---- C6 ----------------------------------------------------------------------------


def paused_windows(events: Iterable[Event]) -> dict[str, list[tuple[int, int]]]:
    """Windows in which the harness had a process stopped or starved."""
    out: dict[str, list[tuple[int, int]]] = defaultdict(list)
    open_: dict[str, int] = {}
    for e in events:
        if e.get("p") != "harness" or e.get("ev") != "fault" or e.get("kind") not in ("pause", "starve"):
            continue
        target = e["target"]
        if e.get("phase") == "begin":
            open_[target] = e["t"]
        elif e.get("phase") == "end" and target in open_:
            out[target].append((open_.pop(target), e["t"]))
    for target, t in open_.items():
        out[target].append((t, 2**62))
    return out


def starved(wakeups: list[tuple[int, float]], start: int, end: int, need_ms: float) -> bool:
    """Whether the process went unscheduled for at least need_ms while [start, end] ran: a
    late wake-up logged at t, ms late, means the process did not run during [t - ms, t]."""
    return any(ms >= need_ms and t - ms * MS <= end and t >= start for t, ms in wakeups)


def check_lost_news(holds: list[Hold], events: list[Event], epsilon_ms: float, m: Metrics) -> None:
    pauses = paused_windows(events)
    wakeups: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for e in events:
        if e.get("ev") == "late_wakeup":
            wakeups[e["p"]].append((e["t"], float(e["ms"])))
    latencies = []
    for h in holds:
        end = h.lost_cb_at or h.release_call or 2**62
        if any(a < end and b > h.start for a, b in pauses.get(h.proc, [])):
            continue  # a stopped process cannot report anything in time
        v = h.failing_validity_end or h.validity_end
        if v is None:
            continue
        if h.release_call is not None and h.release_call <= v:
            # The owner released before validity ended: from then on it no longer
            # believes it holds the lock, so news of a loss is not owed in time
            # (a LOST that follows, once the release call returns, is informational).
            continue
        if h.lost_cb_at is not None and h.lost_cb_at >= h.start:
            lat = (h.lost_cb_at - v) / MS
            latencies.append(lat)
            m.c6_reports += 1
            if lat > epsilon_ms and starved(wakeups[h.proc], v, h.lost_cb_at + 50 * MS, lat - epsilon_ms):
                m.c6_excused += 1
            elif lat > epsilon_ms:
                m.c6_late += 1
                m.note("C6", f"{h.id} ({h.key}): LOST reported {lat:.0f} ms after its validity ended")
        elif h.release_call is not None and h.release_call > v + epsilon_ms * MS and h.release_result != "OK":
            if starved(wakeups[h.proc], v, h.release_call + 50 * MS, (h.release_call - v) / MS - epsilon_ms):
                m.c6_excused += 1
                continue
            m.c6_missing += 1
            m.note(
                "C6",
                f"{h.id} ({h.key}): validity ended {(h.release_call - v) / MS:.0f} ms before the "
                f"release call, which got {h.release_result}, with no LOST news",
            )
    m.c6_p99_ms = percentile(latencies, 99)
    m.c6_max_ms = max(latencies) if latencies else None


# ---- all -----------------------------------------------------------------------------


def analyze(
    events: list[Event],
    holds: list[Hold],
    resource: dict[str, ResourceState],
    *,
    orphans_end: int = 0,
    orphans_late: int = 0,
    liveness_bound_ms: float = math.inf,
    epsilon_ms: float = 100.0,
) -> Metrics:
    m = Metrics()
    horizon = events[-1]["t"] if events else 0
    drivers = [e for e in events if e.get("p") not in ("harness", "proxy")]
    count_attempts(drivers, m)
    check_mutual_exclusion(holds, horizon, m)
    check_lost_updates(drivers, resource, m)
    count_late_writes(holds, m)
    check_fences(holds, resource, m)
    check_ownership(drivers, holds, m)
    check_liveness(events, liveness_bound_ms, m)
    check_lost_news(holds, events, epsilon_ms, m)
    m.c5_orphans_end = orphans_end
    m.c5_orphans = orphans_late
    return m


def safe_failures(m: Metrics, *, c6: bool = True) -> list[str]:
    """Why a SAFE expectation failed (empty: it held)."""
    bad = []
    if m.c1_overlaps:
        bad.append(f"C1: {m.c1_overlaps} overlapping holds (max {m.c1_max_ms:.1f} ms)")
    if (m.c2_lost or m.c2_cas_fail) and not m.c2_late_writes:
        # Lost updates need overlapping critical sections: either beliefs overlapped
        # (C1) or a holder wrote after it was told LOST. Neither: the harness is wrong.
        bad.append(f"C2: {m.c2_lost} lost updates, {m.c2_cas_fail} CAS conflicts, with no late write")
    if m.c3_stale_accepted or m.c3_nested_mismatch:
        bad.append(
            f"C3: {m.c3_stale_accepted} stale fenced writes accepted, {m.c3_nested_mismatch} token changes"
        )
    if m.c4_violations:
        bad.append(f"C4: {m.c4_violations} ownership violations")
    if m.c5_orphans or m.c5_liveness_violations:
        bad.append(
            f"C5: {m.c5_orphans} orphan keys after 3 x lease, {m.c5_liveness_violations} slow recoveries"
        )
    if c6 and (m.c6_late or m.c6_missing):
        bad.append(f"C6: {m.c6_late} late LOST reports, {m.c6_missing} missing")
    return bad


def unsafe_failures(m: Metrics) -> list[str]:
    """Why an UNSAFE expectation failed: no violation seen without fencing, or fencing let one through."""
    bad = []
    if not (m.c1_overlaps or m.c2_lost or m.c2_cas_fail):
        bad.append("no violation observed without fencing (the fault did not bite)")
    if m.c3_stale_accepted:
        bad.append(f"C3: fencing accepted {m.c3_stale_accepted} stale writes")
    if m.c4_violations:
        bad.append(f"C4: {m.c4_violations} ownership violations")
    if m.c5_orphans:
        bad.append(f"C5: {m.c5_orphans} orphan keys after 3 x lease")
    return bad


def summary(m: Metrics) -> dict[str, Any]:
    d = {k: v for k, v in m.__dict__.items() if k != "examples"}
    d["examples"] = dict(m.examples)
    return d
