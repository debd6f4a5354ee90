"""The CHAOS.md report table: one row per scenario and mode."""

from __future__ import annotations

from .scenario import Row

HEADER = (
    "| scenario | mode | expect | result | seed | dur s | attempts/ok/failed/indet | faults "
    "| C1 overlaps (max ms) | C2 lost (CAS; late writes) | C3 stale acc/rej | C4 | C5 orphans end/3xlease "
    "| C6 LOST p99 ms | acquire p50/p99 ms |"
)
RULE = "|" + "|".join(["---"] * (HEADER.count("|") - 1)) + "|"


def _num(x: float | None, digits: int = 1) -> str:
    if x is None:
        return "-"
    return f"{x:.{digits}f}"


def table_row(r: Row) -> str:
    m = r.metrics
    result = r.verdict
    if m is None:
        cells = ["-"] * 9
    else:
        cells = [
            f"{m.attempts}/{m.ok}/{m.failed}/{m.indeterminate}",
            str(r.faults),
            f"{m.c1_overlaps} ({_num(m.c1_max_ms)})",
            f"{m.c2_lost} ({m.c2_cas_fail}; {m.c2_late_writes})",
            f"{m.c3_stale_accepted}/{m.c3_rejected}",
            str(m.c4_violations),
            f"{m.c5_orphans_end}/{m.c5_orphans}",
            _num(m.c6_p99_ms, 0),
            f"{_num(m.acq_p50)}/{_num(m.acq_p99)}",
        ]
    row = [r.scenario, r.mode, r.expect, result, str(r.seed), f"{r.duration_s:.0f}", *cells]
    return "| " + " | ".join(c.replace("|", "\\|") for c in row) + " |"


def table(rows: list[Row]) -> str:
    return "\n".join([HEADER, RULE, *(table_row(r) for r in rows)])


def details(rows: list[Row]) -> str:
    """Why rows failed or were skipped, what they noted, and the checkers' examples."""
    out = []
    for r in rows:
        lines = []
        label = {"SKIP": "skip", "XFAIL": "known gap, failed", "XPASS": "known gap, passed"}.get(
            r.verdict, "fail"
        )
        for why in r.reasons:
            lines.append(f"  {label}: {why}")
        for n in r.notes:
            lines.append(f"  note: {n}")
        if r.metrics and (r.verdict in ("FAIL", "XFAIL") or r.expect != "SAFE"):
            for checker, examples in sorted(r.metrics.examples.items()):
                for ex in examples[:3]:
                    lines.append(f"  {checker}: {ex}")
        if lines:
            out.append(f"{r.scenario} [{r.mode}] {r.verdict}")
            out.extend(lines)
    return "\n".join(out)
