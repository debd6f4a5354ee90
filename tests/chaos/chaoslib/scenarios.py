"""Scenarios S0-S21 of CHAOS.md. Each function runs one scenario in every mode
its profile asks for and returns one report row per mode."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

from .drivers import Driver
from .faults import MonitorTap, Partitions, Starvation, renewals_after_release
from .resp import RespError, text
from .scenario import Env, Row, Run, run_row, skip_row
from .servers import RedisServer, faketime_library

MS = 1_000_000


def keys_of(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i}" for i in range(n)]


def is_full(env: Env) -> bool:
    return env.profile.name == "full"


# ---- shared checks ---------------------------------------------------------------


def call_bounds(run: Run, wait_ms: int, slack_ms: float = 150.0) -> list[str]:
    """Calls must end within their documented worst case: acquire within
    wait + one connection + one command timeout; release within one
    connection + one command timeout (+ slack for a loaded machine)."""
    p = run.p
    acq_bound = wait_ms + p.connect_timeout_ms + p.cmd_timeout_ms + slack_ms
    rel_bound = p.connect_timeout_ms + p.cmd_timeout_ms + slack_ms
    worst = {"acq": 0.0, "rel": 0.0}
    bad = []
    for e in run.events:
        ev = e.get("ev")
        if ev in ("acq_ok", "acq_err"):
            worst["acq"] = max(worst["acq"], e.get("dur_ms", 0))
            if e.get("dur_ms", 0) > acq_bound:
                bad.append(f"{e['p']}: acquire took {e['dur_ms']:.0f} ms (bound {acq_bound:.0f}) {e.get('err', '')}")
        elif ev in ("rel_ok", "rel_err"):
            worst["rel"] = max(worst["rel"], e.get("dur_ms", 0))
            if e.get("dur_ms", 0) > rel_bound:
                bad.append(f"{e['p']}: release took {e['dur_ms']:.0f} ms (bound {rel_bound:.0f}) {e.get('err', '')}")
    run.row.notes.append(f"longest acquire {worst['acq']:.0f} ms, longest release {worst['rel']:.0f} ms")
    return [f"{len(bad)} calls past their bound, e.g. {bad[0]}"] if bad else []


def step_driver_rows(env: Env, scenario: str, mode_name: str, n: int) -> Row:
    def body(run: Run) -> None:
        for lang in ("c", "py"):
            run.start(run.spec(f"{lang}-{mode_name}", lang, mode=mode_name, prefix=f"{scenario.lower()}{lang}:",
                               lease_ms=0))  # fmt: skip
        for d in run.drivers:
            if d.wait_event("steps_done", 60 + 4 * run.p.lease_ms / 1000) is None:
                run.row.fail(f"{d.name} did not finish its steps")
            d.send("exit")
        m = run.finish([f"{scenario.lower()}c:", f"{scenario.lower()}py:"], [], epsilon_ms=100)
        steps = [e for e in run.events if e.get("ev") == "step"]
        run.row.notes.append(f"{len(steps)} steps, {sum(1 for e in steps if e.get('pass') == 1)} as expected")
        if not steps:
            run.row.fail("no step ran")
        if m.c4_violations:
            run.row.fail(f"C4: {m.c4_violations} steps broke ownership")
        if m.c5_orphans:
            run.row.fail(f"C5: {m.c5_orphans} keys left after 3 x lease")

    return run_row(env, scenario, f"{mode_name} N={n}", "SAFE", body, {"n": n})


def pause_rounds(run: Run, drivers: list[Driver], rounds: int, factor: tuple[float, float]) -> list[tuple[str, int, int]]:
    """Pauses a holder mid critical section (after its read, before its
    writes) for factor x lease, once per round. Returns the paused holds."""
    paused = []
    lease = run.p.lease_ms
    for _ in range(rounds):
        victim = run.rng.choice(drivers)
        mark = run.history.mark()
        e = victim.wait_event("cs_read", 10.0, mark)
        if e is None:
            run.row.notes.append(f"{victim.name} never reached a critical section")
            continue
        victim.pause()
        pause_s = run.rng.uniform(*factor) * lease / 1000
        run.fault("pause", victim.name, "begin", hold=f"{e['p']}:{e['w']}:{e['h']}", seconds=round(pause_s, 3))
        time.sleep(pause_s)
        victim.resume()
        run.fault("pause", victim.name, "end")
        paused.append((e["p"], e["w"], e["h"]))
        time.sleep(0.5 + lease / 1000)
    return paused


def losses_reported(run: Run, paused: list[tuple[str, int, int]]) -> list[str]:
    """Every paused hold must learn its loss: release reports ELOST (never ok)."""
    bad = []
    by_id = {(h.proc, h.worker, h.seq): h for h in run.holds}
    via_callback = 0
    for k in paused:
        h = by_id.get(k)
        if h is None:
            continue
        if h.lost_cb_at is not None:
            via_callback += 1
        if h.release_result not in ("ELOST", "ENOTOWNER"):
            bad.append(f"{h.id}: paused past its lease, its release returned {h.release_result}")
    run.row.notes.append(f"{len(paused)} holders paused mid-section; {via_callback} told by the LOST callback")
    return bad


# ---- S0 baseline --------------------------------------------------------------------


def s0(env: Env) -> list[Row]:
    modes = [(1, 1), (1, 5), (1, 1000), (5, 1), (5, 5), (5, 1000)] if is_full(env) else [(1, 5), (5, 5)]
    rows = []
    for n, k in modes:

        def body(run: Run, k: int = k) -> None:
            run.start_many(8, keys=k, prefix="s0:", cs_ms=(1, 5))
            run.wait_started()
            t0 = time.monotonic()
            run.sleep(run.p.duration_s)
            elapsed = time.monotonic() - t0
            m = run.finish(["s0:"], keys_of("s0:", k))
            run.row.notes.append(f"{m.ok / elapsed:.0f} acquisitions/s over 8 clients")
            run.judge()

        rows.append(run_row(env, "S0", f"N={n} keys={k}", "SAFE", body, {"n": n}))
    return rows


# ---- S1 / S2 holder pauses ------------------------------------------------------------


def _pause_scenario(env: Env, sid: str, watchdog: bool) -> list[Row]:
    rows = []
    for n in (1, 5) if is_full(env) else (1,):

        def body(run: Run) -> None:
            lease = run.p.lease_ms
            prefix = f"{sid.lower()}:"
            drivers = run.start_many(4, keys=1, prefix=prefix, lease_ms=0 if watchdog else lease,
                                     cs_ms=(30, 80), wait_ms=4 * lease)  # fmt: skip
            run.wait_started()
            paused = pause_rounds(run, drivers, env.profile.rounds + 1, (1.5, 3.0))
            run.finish([prefix], keys_of(prefix, 1))
            run.judge()
            run.row.fail(*losses_reported(run, paused))

        mode = ("watchdog" if watchdog else "lease") + f" N={n}"
        rows.append(run_row(env, sid, mode, "UNSAFE", body, {"n": n}))
    return rows


def s1(env: Env) -> list[Row]:
    return _pause_scenario(env, "S1", watchdog=False)


def s2(env: Env) -> list[Row]:
    return _pause_scenario(env, "S2", watchdog=True)


# ---- S3 renewal starvation --------------------------------------------------------------


def s3(env: Env) -> list[Row]:
    if not Starvation.available():
        return [skip_row(env, "S3", "stress-ng", "SAFE", "stress-ng or taskset missing (Debian stress-ng, util-linux)")]

    def body(run: Run) -> None:
        lease = run.p.lease_ms
        hog = Starvation(cpu=1, workers=3)
        prefix = "s3c"
        starved = [run.start(run.spec(f"starved{i}", lang, keys=4, prefix=f"{prefix}:", owner_per_hold=True,
                                      cs_ms=(lease // 3, lease), wrapper=hog.wrapper(15)))
                   for i, lang in enumerate(("c", "py"))]  # fmt: skip
        run.start_many(2, names="calm", keys=4, prefix=f"{prefix}:", cs_ms=(5, 20), owner_per_hold=True)
        run.wait_started()
        taps = [MonitorTap(s, prefix) for s in run.cluster.servers]
        for _ in range(env.profile.rounds):
            hog.start()
            for d in starved:
                run.fault("starve", d.name, "begin")
            run.sleep(2 * lease / 1000)
            hog.stop()
            for d in starved:
                run.fault("starve", d.name, "end")
            run.sleep(lease / 1000)
        run.heal()
        run.finish([f"{prefix}:"], keys_of(f"{prefix}:", 4), epsilon_ms=60)
        for t in taps:
            t.stop()
        bad = renewals_after_release(taps, release_times(run))
        run.row.notes.append(f"{sum(len(t.commands) for t in taps)} commands traced; {len(bad)} renewals after release")
        run.judge()
        run.row.fail(*bad[:3])

    return [run_row(env, "S3", "stress-ng nice 15", "SAFE", body, {"n": 5})]


def release_times(run: Run) -> dict[str, float]:
    """Token -> wall-clock time of its release call (MONITOR stamps are wall clock)."""
    offset = time.time() - time.monotonic_ns() / 1e9
    owners = {(e["p"], e["w"], e["h"]): e.get("owner") for e in run.events if e.get("ev") == "acq" and e.get("owner")}
    out = {}
    for e in run.events:
        if e.get("ev") == "rel" and e.get("try") == 0:
            tok = owners.get((e["p"], e["w"], e["h"]))
            if tok:
                out[tok] = e["t"] / 1e9 + offset - 0.001
    return out


# ---- S4 server stall ------------------------------------------------------------------------


def s4(env: Env) -> list[Row]:
    rows = []
    for n, stalled in ((1, 1), (5, 2)):

        def body(run: Run, stalled: int = stalled) -> None:
            lease = run.p.lease_ms
            wait = lease
            run.start_many(4, keys=2, prefix="s4:", cs_ms=(10, 40), wait_ms=wait)
            run.wait_started()
            windows = []
            for _ in range(env.profile.rounds):
                run.sleep(1.0)
                victims = run.rng.sample(run.cluster.servers, stalled)
                t0 = time.monotonic_ns()
                for v in victims:
                    v.pause()
                    run.fault("stall", v.name, "begin")
                run.sleep(1.5 * lease / 1000)
                for v in victims:
                    v.resume()
                    run.fault("stall", v.name, "end")
                windows.append((t0, time.monotonic_ns()))
                run.heal()
            run.sleep(1.0)
            run.finish(["s4:"], keys_of("s4:", 2))
            run.judge()
            run.row.fail(*call_bounds(run, wait))
            if stalled == n:  # every server stopped: no call can have succeeded meanwhile
                false_ok = [e for e in run.events if e.get("ev") in ("acq_ok", "rel_ok")
                            and any(a + 20 * MS < e["t"] - e.get("dur_ms", 0) * MS and e["t"] < b for a, b in windows)]  # fmt: skip
                if false_ok:
                    run.row.fail(f"{len(false_ok)} calls reported ok while every server was stopped")

        rows.append(run_row(env, "S4", f"N={n} stall {stalled}", "SAFE", body, {"n": n}))
    return rows


# ---- S5 / S6 crash and restart ----------------------------------------------------------------


def _crash_scenario(env: Env, sid: str, persistence: str, expect: str) -> Row:
    def body(run: Run) -> None:
        lease = run.p.lease_ms
        prefix = f"{sid.lower()}:"
        drivers = run.start_many(4, keys=1, prefix=prefix, cs_ms=(lease // 2, lease), wait_ms=4 * lease)
        run.wait_started()
        server = run.cluster.servers[0]
        for _ in range(env.profile.rounds + 1):
            mark = run.history.mark()
            if run.history.wait_for(lambda e: e.get("ev") == "cs_read", 10.0, mark) is None:
                run.row.notes.append("nobody reached a critical section")
            run.sleep(run.rng.uniform(0.0, 0.1))
            server.kill()
            server.start(wipe=persistence == "none")
            run.fault("crash_restart", server.name, persistence=persistence)
            run.sleep(1.0 + lease / 1000)
        del drivers
        m = run.finish([prefix], keys_of(prefix, 1))
        run.judge()
        if sid == "S6" and m.c3_token_regressions:
            run.row.fail(f"C3: {m.c3_token_regressions} fencing tokens not above the previous holder's")
        run.row.notes.append(f"{m.c3_token_regressions} token regressions (counter resets)")

    return run_row(env, sid, f"kill -9 + restart, {persistence}", expect, body,
                   {"n": 1, "persistence": persistence})  # fmt: skip


def s5(env: Env) -> list[Row]:
    return [_crash_scenario(env, "S5", "none", "UNSAFE")]


def s6(env: Env) -> list[Row]:
    return [_crash_scenario(env, "S6", "aof", "SAFE")]
