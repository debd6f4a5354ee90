"""Scenarios S0-S22 of CHAOS.md. Each function runs one scenario in every mode
its profile asks for and returns one report row per mode."""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import checkers
from .drivers import Driver
from .faults import MonitorTap, Partitions, Starvation, renewals_after_release
from .resp import RespError, text
from .scenario import EPSILON_MS, TIME_SCALE, Env, Row, Run, run_row, skip_row
from .servers import RedisServer, faketime_library

MS = 1_000_000


# Scheduling slack allowed on top of a documented time bound: the machine has 2 cores,
# shared with builds and other test suites while the harness runs.
SLACK_MS = 100.0 * TIME_SCALE


def attempt_budget(run: Run) -> int:
    """One acquisition attempt's budget, T in the header: max(connect, command timeout)."""
    return max(run.p.connect_timeout_ms, run.p.cmd_timeout_ms)


def keys_of(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i}" for i in range(n)]


def is_full(env: Env) -> bool:
    return env.profile.name == "full"


# ---- shared checks ---------------------------------------------------------------


def call_bounds(run: Run, wait_ms: int, slack_ms: float = SLACK_MS) -> list[str]:
    """Calls must end within the worst case the header states: acquire within
    wait_ms + T, T = max(connect_timeout, command_timeout); release within 2 x T
    (its own request after a renewal of the same hold in flight), + slack for
    scheduling on a loaded 2-core machine."""
    acq_bound = wait_ms + attempt_budget(run) + slack_ms
    rel_bound = 2 * attempt_budget(run) + slack_ms
    worst = {"acq": 0.0, "rel": 0.0}
    bad = []
    for e in run.events:
        ev = e.get("ev")
        if ev in ("acq_ok", "acq_err"):
            worst["acq"] = max(worst["acq"], e.get("dur_ms", 0))
            if e.get("dur_ms", 0) > acq_bound:
                bad.append(
                    f"{e['p']}: acquire took {e['dur_ms']:.0f} ms (bound {acq_bound:.0f}) {e.get('err', '')}"
                )
        elif ev in ("rel_ok", "rel_err"):
            worst["rel"] = max(worst["rel"], e.get("dur_ms", 0))
            if e.get("dur_ms", 0) > rel_bound:
                bad.append(
                    f"{e['p']}: release took {e['dur_ms']:.0f} ms (bound {rel_bound:.0f}) {e.get('err', '')}"
                )
    run.row.notes.append(f"longest acquire {worst['acq']:.0f} ms, longest release {worst['rel']:.0f} ms")
    return [f"{len(bad)} calls past their bound, e.g. {bad[0]}"] if bad else []


def step_driver_rows(env: Env, scenario: str, mode_name: str, n: int) -> Row:
    def body(run: Run) -> None:
        for lang in ("c", "py"):
            run.start(
                run.spec(
                    f"{lang}-{mode_name}",
                    lang,
                    mode=mode_name,
                    prefix=f"{scenario.lower()}{lang}:",
                    lease_ms=0,
                    # Step modes judge semantics, not timing: generous timeouts on a loaded machine.
                    cmd_timeout_ms=1000,
                    connect_timeout_ms=1000,
                )
            )
        for d in run.drivers:
            if d.wait_event("steps_done", 60 + 4 * run.p.lease_ms / 1000) is None:
                run.row.fail(f"{d.name} did not finish its steps")
            d.send("exit")
        m = run.finish([f"{scenario.lower()}c:", f"{scenario.lower()}py:"], [])
        steps = [e for e in run.events if e.get("ev") == "step"]
        for e in run.events:
            if e.get("ev") == "observe":
                extra = ", ".join(
                    f"{k}={v}" for k, v in e.items() if k not in ("t", "p", "w", "h", "ev", "name")
                )
                run.row.notes.append(f"{e['p']}: {e['name']}: {extra}")
        run.row.notes.append(f"{len(steps)} steps, {sum(1 for e in steps if e.get('pass') == 1)} as expected")
        if not steps:
            run.row.fail("no step ran")
        if m.c4_violations:
            run.row.fail(f"C4: {m.c4_violations} steps broke ownership")
        if m.c5_orphans:
            run.row.fail(f"C5: {m.c5_orphans} keys left after 3 x lease")

    return run_row(env, scenario, f"{mode_name} N={n}", "SAFE", body, {"n": n})


def pause_rounds(
    run: Run, drivers: list[Driver], rounds: int, factor: tuple[float, float]
) -> list[tuple[str, int, int]]:
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
        paused_at = time.monotonic_ns()
        pause_s = run.rng.uniform(*factor) * lease / 1000
        run.fault(
            "pause", victim.name, "begin", hold=f"{e['p']}:{e['w']}:{e['h']}", seconds=round(pause_s, 3)
        )
        time.sleep(pause_s)
        victim.resume()
        run.fault("pause", victim.name, "end")
        # The stop lands a little after the read was seen; count the hold only if its
        # release had not been called by then (the pause really fell inside the section).
        key = (e["p"], e["w"], e["h"])
        if any(
            x.get("ev") == "rel" and x["t"] < paused_at and (x["p"], x["w"], x["h"]) == key
            for x in list(run.history.events)
        ):
            run.row.notes.append(f"a pause of {victim.name} landed after its critical section")
        else:
            paused.append(key)
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
    run.row.notes.append(
        f"{len(paused)} holders paused mid-section; {via_callback} told by the LOST callback"
    )
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
            drivers = run.start_many(
                4,
                keys=1,
                prefix=prefix,
                lease_ms=0 if watchdog else lease,
                cs_ms=(100, 300),
                wait_ms=4 * lease,
            )
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
        return [
            skip_row(
                env, "S3", "stress-ng", "SAFE", "stress-ng or taskset missing (Debian stress-ng, util-linux)"
            )
        ]

    def body(run: Run) -> None:
        lease = run.p.lease_ms
        hog = Starvation(cpu=1, workers=3)
        prefix = "s3c"
        starved = [
            run.start(
                run.spec(
                    f"starved{i}",
                    lang,
                    keys=4,
                    prefix=f"{prefix}:",
                    owner_per_hold=True,
                    cs_ms=(lease // 3, lease),
                    wrapper=hog.wrapper(15),
                )
            )
            for i, lang in enumerate(("c", "py"))
        ]
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
        run.finish([f"{prefix}:"], keys_of(f"{prefix}:", 4), epsilon_ms=EPSILON_MS)
        for t in taps:
            t.stop()
        bad = renewals_after_release(taps, release_times(run))
        run.row.notes.append(
            f"{sum(len(t.commands) for t in taps)} commands traced; {len(bad)} renewals after release"
        )
        run.judge()
        run.row.fail(*bad[:3])

    return [run_row(env, "S3", "stress-ng nice 15", "SAFE", body, {"n": 5})]


def release_times(run: Run) -> dict[str, float]:
    """Token -> wall-clock time of its release call (MONITOR stamps are wall clock)."""
    offset = time.time() - time.monotonic_ns() / 1e9
    owners = {
        (e["p"], e["w"], e["h"]): e.get("owner")
        for e in run.events
        if e.get("ev") == "acq" and e.get("owner")
    }
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

        def body(run: Run, n: int = n, stalled: int = stalled) -> None:
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
                windows.append((t0, time.monotonic_ns()))  # before SIGCONT
                for v in victims:
                    v.resume()
                    run.fault("stall", v.name, "end")
                run.heal()
            run.sleep(1.0)
            run.finish(["s4:"], keys_of("s4:", 2))
            run.judge()
            run.row.fail(*call_bounds(run, wait))
            if stalled == n:  # every server stopped: no call can have succeeded meanwhile
                false_ok = [
                    e
                    for e in run.events
                    if e.get("ev") in ("acq_ok", "rel_ok")
                    and any(a + 20 * MS < e["t"] - e.get("dur_ms", 0) * MS and e["t"] < b for a, b in windows)
                ]
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

    return run_row(
        env, sid, f"kill -9 + restart, {persistence}", expect, body, {"n": 1, "persistence": persistence}
    )


def s5(env: Env) -> list[Row]:
    return [_crash_scenario(env, "S5", "none", "UNSAFE")]


def s6(env: Env) -> list[Row]:
    return [_crash_scenario(env, "S6", "aof", "SAFE")]


# ---- S7 / S8 / S10: a holder on a bare majority loses one of its servers ---------------------

UNBLOCK = "if redis.call('GET', KEYS[1]) == 'blocker' then return redis.call('DEL', KEYS[1]) end return 0"


def bare_majority_rounds(run: Run, key: str, rounds: int, fault: Callable[[Run, RedisServer], None]) -> None:
    """Each round: r4 and r5 are blocked, so the next holder wins exactly
    {r1, r2, r3}; once it is in its critical section they are unblocked and
    `fault` strikes r3. A contender can then win {r3, r4, r5}."""
    servers = run.cluster.servers
    r3, blockers = servers[2], servers[3:5]
    exact = 0
    for _ in range(rounds):
        try:
            exact += _bare_majority_round(run, key, servers, r3, blockers, fault)
        finally:
            for s in blockers:  # whatever happened, no blocker outlives its round
                with contextlib.suppress(OSError, ConnectionError, RespError):
                    s.call("EVAL", UNBLOCK, 1, key)
        run.sleep(2 * run.p.lease_ms / 1000)
    run.row.notes.append(f"{exact} of {rounds} rounds had the holder on exactly 3 servers when r3 was struck")


def _bare_majority_round(
    run: Run,
    key: str,
    servers: list[RedisServer],
    r3: RedisServer,
    blockers: list[RedisServer],
    fault: Callable[[Run, RedisServer], None],
) -> bool:
    """One round; True when the holder had exactly {r1, r2, r3} when r3 was struck."""
    planted: set[str] = set()
    deadline = time.monotonic() + 10 + 3 * run.p.lease_ms / 1000
    while len(planted) < 2 and time.monotonic() < deadline:
        for s in blockers:
            with contextlib.suppress(OSError, ConnectionError, RespError):
                if (
                    s.name not in planted
                    and s.call("SET", key, "blocker", "NX", "PX", 4 * run.p.lease_ms) == "OK"
                ):
                    planted.add(s.name)
        time.sleep(0.003)
    if len(planted) < 2:
        run.row.notes.append("could not block r4 and r5 in time")
        return False
    mark = run.history.mark()
    ok = run.history.wait_for(lambda e: e.get("ev") == "acq_ok", 10.0, mark)
    if ok is None:
        return False
    inside = run.history.wait_for(
        lambda e: e.get("ev") == "cs_read" and e["p"] == ok["p"] and e["h"] == ok["h"], 5.0, mark
    )
    owner = next(
        (
            e.get("owner")
            for e in reversed(run.history.events)
            if e.get("ev") == "acq" and e["p"] == ok["p"] and e["h"] == ok["h"] and e["w"] == ok["w"]
        ),
        None,
    )
    held_on = sum(1 for s in servers if owner and _get(s, key) == owner)
    for s in blockers:
        with contextlib.suppress(OSError, ConnectionError, RespError):
            s.call("EVAL", UNBLOCK, 1, key)
    if inside is not None:
        fault(run, r3)
    return held_on == 3


def _get(s: RedisServer, key: str) -> str | None:
    try:
        return text(s.call("GET", key))
    except (OSError, ConnectionError, RespError):
        return None


def _bare_majority_scenario(
    env: Env,
    sid: str,
    mode: str,
    expect: str,
    fault: Callable[[Run, RedisServer], None],
    cluster: dict[str, Any],
    after: Callable[[Run], None] | None = None,
) -> Row:
    def body(run: Run) -> None:
        lease = run.p.lease_ms
        prefix = f"{sid.lower()}:"
        run.start_many(
            4, keys=1, prefix=prefix, owner_per_hold=True, cs_ms=(lease, 2 * lease), wait_ms=4 * lease
        )
        run.wait_started()
        bare_majority_rounds(run, f"{prefix}0", env.profile.rounds + 2, fault)
        run.heal()
        run.sleep(1.0)
        run.finish([prefix], keys_of(prefix, 1))
        run.judge()
        if after:
            after(run)

    return run_row(env, sid, mode, expect, body, cluster)


def crash_and_restart(delay_s: Callable[[Run], float]) -> Callable[[Run, RedisServer], None]:
    def fault(run: Run, server: RedisServer) -> None:
        server.kill()
        run.fault("crash", server.name, "begin")
        run.sleep(delay_s(run))
        server.start(wipe=True)
        run.fault("crash", server.name, "end", down_ms=round(delay_s(run) * 1000))

    return fault


def s7(env: Env) -> list[Row]:
    rows = []
    for mode, mask in (("run_id check", False), ("run_id masked", True)):

        def fault(run: Run, server: RedisServer, mask: bool = mask) -> None:
            if mask and run.cluster.proxy:
                run.cluster.proxy.set("*", mask_run_id=True)
            crash_and_restart(lambda run: 0.0)(run, server)

        rows.append(
            _bare_majority_scenario(
                env, "S7", mode, "SAFE" if not mask else "UNSAFE", fault, {"n": 5, "proxy": True}
            )
        )
    return rows


def s8(env: Env) -> list[Row]:
    fault = crash_and_restart(lambda run: (run.p.lease_ms + 300) / 1000)
    return [_bare_majority_scenario(env, "S8", "restart after max lease", "SAFE", fault, {"n": 5})]


# ---- S10 / S11 server clocks --------------------------------------------------------------------


def _no_faketime(env: Env, sid: str, mode: str, expect: str) -> Row | None:
    if faketime_library() is None:
        return skip_row(env, sid, mode, expect, "libfaketime missing (Debian package faketime)")
    if not env.tools.malloc_shim.exists():
        return skip_row(env, sid, mode, expect, f"{env.tools.malloc_shim} was not built")
    return None


def s10(env: Env) -> list[Row]:
    rows = []
    skipped = _no_faketime(env, "S10", "N=1 jump +2 x lease", "UNSAFE")
    if skipped:
        return [skipped]

    def single(run: Run) -> None:
        lease = run.p.lease_ms
        server = run.cluster.servers[0]
        run.start_many(4, keys=1, prefix="s10:", cs_ms=(lease // 2, lease), wait_ms=4 * lease)
        run.wait_started()
        offset = 0.0
        for _ in range(env.profile.rounds + 1):
            mark = run.history.mark()
            if run.history.wait_for(lambda e: e.get("ev") == "cs_read", 10.0, mark) is None:
                continue
            offset += 2 * lease / 1000
            server.set_clock_offset(offset)
            run.fault("clock_jump", server.name, seconds=2 * lease / 1000)
            run.sleep(1.5 * lease / 1000)
        run.finish(["s10:"], keys_of("s10:", 1))
        run.judge()

    rows.append(run_row(env, "S10", "N=1 jump +2 x lease", "UNSAFE", single, {"n": 1, "faketime": (0,)}))

    def jump(run: Run, server: RedisServer) -> None:
        server.set_clock_offset(
            2
            * run.p.lease_ms
            / 1000
            * (1 + len([e for e in run.history.events if e.get("kind") == "clock_jump"]))
        )
        run.fault("clock_jump", server.name, seconds=2 * run.p.lease_ms / 1000)

    rows.append(
        _bare_majority_scenario(
            env, "S10", "N=5 r3 jumps, bare majority", "UNSAFE", jump, {"n": 5, "faketime": (2,)}
        )
    )
    return rows


def s11(env: Env) -> list[Row]:
    lease = env.profile.lease_ms
    allowance_ms = lease * 0.01 + 2
    modes: list[tuple[str, str, float | None, float]] = [
        (f"drift x1.005 (< {allowance_ms:.0f} ms allowance)", "SAFE", 1.005, 0.0),
        ("drift x1.05", "UNSAFE", 1.05, 0.0),
        (f"strobe ±{allowance_ms / 2:.0f} ms / 50 ms", "SAFE", None, allowance_ms / 2),
        (f"strobe ±{allowance_ms * 10:.0f} ms / 50 ms", "UNSAFE", None, allowance_ms * 10),
    ]
    rows = []
    for mode, expect, rate, delta_ms in modes:
        skipped = _no_faketime(env, "S11", mode, expect)
        if skipped:
            rows.append(skipped)
            continue

        def body(run: Run, rate: float | None = rate, delta_ms: float = delta_ms) -> None:
            server = run.cluster.servers[0]
            if rate:
                # libfaketime's rate counts from the process start: restart the server under it.
                server.kill()
                server.set_clock_offset(0.0, rate)
                server.start()
                run.fault("clock_drift", server.name, rate=rate)
            stop = threading.Event()

            def strobe() -> None:
                sign = 1
                while not stop.wait(0.05):
                    server.set_clock_offset(sign * delta_ms / 1000)
                    sign = -sign

            strober = threading.Thread(target=strobe, daemon=True)
            if delta_ms:
                strober.start()
                run.fault("clock_strobe", server.name, delta_ms=delta_ms, period_ms=50)
            # Holders keep the lock until 30 ms before their validity ends; contenders pounce at expiry.
            run.start_many(
                3,
                keys=1,
                prefix="s11:",
                lease_ms=run.p.lease_ms,
                hold_margin_ms=30,
                backoff_cap_ms=10,
                wait_ms=4 * run.p.lease_ms,
            )
            run.wait_started()
            run.sleep(2 * run.p.duration_s)
            stop.set()
            if delta_ms:
                strober.join()
            run.finish(["s11:"], keys_of("s11:", 1), epsilon_ms=EPSILON_MS)
            run.judge()

        rows.append(run_row(env, "S11", mode, expect, body, {"n": 1, "faketime": (0,)}))
    return rows


# ---- S12 client wall-clock jumps -------------------------------------------------------------------


def s12(env: Env) -> list[Row]:
    skipped = _no_faketime(env, "S12", "client clock ±2 x lease", "SAFE")
    if skipped:
        return [skipped]

    def body(run: Run) -> None:
        lease = run.p.lease_ms
        lib = faketime_library()
        files = []
        for i, lang in enumerate(("c", "py", "c", "py")):
            f = run.dir / f"client{i}.faketime"
            f.write_text("+0\n")
            files.append(f)
            env_vars = {
                "LD_PRELOAD": str(lib),
                "FAKETIME_TIMESTAMP_FILE": str(f),
                "FAKETIME_NO_CACHE": "1",
                "FAKETIME_DONT_FAKE_MONOTONIC": "1",
            }
            run.start(run.spec(f"c{i}", lang, keys=2, prefix="s12:", cs_ms=(5, 30), env=env_vars))
        run.wait_started()
        deadline = time.monotonic() + run.p.duration_s * 2
        while time.monotonic() < deadline:
            for f in files:
                jump = run.rng.choice((-2, 2)) * lease / 1000 * run.rng.uniform(0.5, 1.0)
                f.write_text(f"{jump:+.3f}\n")
            run.fault("client_clock_jump", "all clients")
            run.sleep(0.3)
        run.finish(["s12:"], keys_of("s12:", 2))
        run.judge()

    return [run_row(env, "S12", "client clock ±2 x lease", "SAFE", body, {"n": 5})]


# ---- S13 partitions ----------------------------------------------------------------------------------


def s13(env: Env) -> list[Row]:
    modes = [
        ("client cut from a minority", [0, 1], "both"),
        ("client cut from a majority", [0, 1, 2], "both"),
        ("replies from majority dropped", [0, 1, 2], "replies"),
    ]
    rows = []
    for mode, victims, direction in modes:
        if not env.nft.ok:
            rows.append(skip_row(env, "S13", mode, "SAFE", f"partitions unavailable: {env.nft.reason}"))
            continue

        def body(run: Run, victims: list[int] = victims, direction: str = direction) -> None:
            lease = run.p.lease_ms
            wait = lease
            uids = (42420, 42421)
            parted = [
                run.start(
                    run.spec(
                        f"parted{i}",
                        lang,
                        uid=uid,
                        keys=2,
                        prefix="s13:",
                        wait_ms=wait,
                        cs_ms=(20, lease // 2),
                    )
                )
                for i, (lang, uid) in enumerate(zip(("c", "py"), uids))
            ]
            run.start_many(2, names="free", keys=2, prefix="s13:", wait_ms=wait, cs_ms=(20, lease // 2))
            run.wait_started()
            nft = Partitions()
            ports = [run.cluster.servers[i].port for i in victims]
            try:
                for _ in range(env.profile.rounds + 1):
                    run.sleep(0.5)
                    for d in parted:
                        nft.isolate(d.spec.uid or 0, ports, direction)
                        run.fault(
                            "partition",
                            d.name,
                            "begin",
                            servers=[f"r{i + 1}" for i in victims],
                            direction=direction,
                        )
                    run.sleep(2 * lease / 1000)
                    nft.clear()
                    for d in parted:
                        run.fault("partition", d.name, "end")
                    run.heal()
                    run.sleep(lease / 1000)
            finally:
                nft.clear()
            run.finish(["s13:"], keys_of("s13:", 2))
            run.judge()
            run.row.fail(*call_bounds(run, wait))

        rows.append(run_row(env, "S13", mode, "SAFE", body, {"n": 5}))
    return rows


# ---- S14 slow, lost and late replies -----------------------------------------------------------------


def proxy_chaos(run: Run, seconds: float, names: list[str], lock_names: list[str]) -> None:
    """Random proxy faults from the run's PRNG, one phase at a time: delay, drops,
    mid-reply closes, a blackhole, late delivery of one request, a straggler."""
    proxy = run.cluster.proxy
    assert proxy is not None
    lease = run.p.lease_ms
    deadline = time.monotonic() + seconds
    kinds = ["delay", "drop", "close_mid_reply", "blackhole", "late", "straggler", "late", "delay"]
    while time.monotonic() < deadline:
        kind = run.rng.choice(kinds)
        target = run.rng.choice(names)
        phase_s = run.rng.uniform(0.5, 1.5) * lease / 1000
        if kind == "delay":
            d = run.rng.uniform(0, lease)
            proxy.set(target, delay_ms=d, jitter_ms=d / 4)
            run.fault("delay", target, "begin", delay_ms=round(d))
        elif kind == "drop":
            p = run.rng.uniform(0.01, 0.3)
            proxy.set(target, drop=p)
            run.fault("drop", target, "begin", p=round(p, 3))
        elif kind == "close_mid_reply":
            p = run.rng.uniform(0.05, 0.3)
            proxy.set(target, close_mid_reply=p)
            run.fault("close_mid_reply", target, "begin", p=round(p, 3))
        elif kind == "blackhole":
            proxy.set(target, blackhole=True)
            run.fault("blackhole", target, "begin")
        elif kind == "late":
            d = run.rng.uniform(100, min(600, lease))
            proxy.hold(target, run.rng.choice(lock_names), d)
            run.fault("late_delivery", target, "begin", delay_ms=round(d))
        elif kind == "straggler":
            i = next(j for j, s in enumerate(run.cluster.servers) if s.name == target)
            run.cluster.straggle(i, busy_ms=3.0, gap_ms=2.0)
            run.fault("straggler", target, "begin")
        run.sleep(phase_s)
        run.cluster.calm()
        run.fault(kind, target, "end")
    run.heal()


def s14(env: Env) -> list[Row]:
    rows = []
    for n in (5, 3) if is_full(env) else (5,):

        def body(run: Run, n: int = n) -> None:
            lease = run.p.lease_ms
            names = [s.name for s in run.cluster.servers]
            plain = run.start_many(4, names="p", keys=3, prefix="s14p:", cs_ms=(5, 40), wait_ms=2 * lease)
            re = run.start_many(
                2, names="r", keys=2, prefix="s14r:", kind="rlock", nest=2, cs_ms=(5, 40), wait_ms=2 * lease
            )
            lease_holders = run.start_many(
                2, names="e", keys=3, prefix="s14p:", lease_ms=lease, cs_ms=(5, 40), wait_ms=2 * lease
            )
            run.row.notes.append(
                f"{len(plain)} watchdog, {len(re)} reentrant (nested x2), {len(lease_holders)} "
                "explicit-lease clients"
            )
            run.wait_started()
            lock_names = keys_of("s14p:", 3) + keys_of("s14r:", 2)
            proxy_chaos(run, 3 * run.p.duration_s, names, lock_names)
            run.sleep(1.0)
            m = run.finish(["s14p:", "s14r:"], lock_names)
            run.row.notes.append(
                f"{m.c5_orphans_end} lock keys present right after the last release "
                "(late deliveries; they expire within their lease)"
            )
            run.judge()

        rows.append(
            run_row(env, "S14", f"N={n} proxy faults + straggler", "SAFE", body, {"n": n, "proxy": True})
        )
    rows += [s14_late(env, n) for n in ((3, 5) if is_full(env) else (3,))]
    return rows


class OrphanWatcher:
    """Samples the lock servers' plain-lock keys; a key still holding the token
    of a hold that finished (released, or an acquisition that failed) more
    than `grace_ms` ago is an orphan: no owner will ever release it, and it
    blocks that server for the rest of its lease."""

    def __init__(self, run: Run, prefix: str, grace_ms: float) -> None:
        self.run, self.prefix, self.grace = run, prefix, grace_ms * MS
        self.orphans: dict[str, str] = {}
        self.stop_flag = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _finished(self) -> dict[str, int]:
        """Token -> when its hold finished (first release reply or failed acquisition)."""
        owner_of: dict[tuple[str, int, int], str] = {}
        done: dict[str, int] = {}
        for e in list(self.run.history.events):
            k = (e.get("p"), e.get("w"), e.get("h"))
            if e.get("ev") == "acq" and e.get("owner"):
                owner_of[k] = e["owner"]
            elif e.get("ev") in ("rel_ok", "acq_err") and k in owner_of:
                done.setdefault(owner_of[k], e["t"])
            elif e.get("ev") in ("rel_gaveup",) and k in owner_of:
                done.pop(owner_of[k], None)  # left to expire on purpose
        return done

    def _run(self) -> None:
        while not self.stop_flag.wait(0.05):
            done = self._finished()
            now = time.monotonic_ns()
            for s in self.run.cluster.servers:
                try:
                    with s.conn(timeout=1.0) as r:
                        _, keys = r.call("SCAN", 0, "MATCH", f"{self.prefix}*", "COUNT", 1000)
                        values = r.pipeline([("GET", k) for k in keys]) if keys else []
                except (OSError, ConnectionError, RespError):
                    continue
                for k, v in zip(keys, values):
                    tok = text(v) if isinstance(v, bytes) else None
                    if tok in done and now - done[tok] > self.grace and tok not in self.orphans:
                        age = (now - done[tok]) / MS
                        self.orphans[tok] = f"{s.name}: {text(k)} = {tok}, {age:.0f} ms after its hold ended"

    def stop(self) -> list[str]:
        self.stop_flag.set()
        self.thread.join(5)
        return list(self.orphans.values())


def late_requests(run: Run, seconds: float, names: list[str], lock_names: list[str]) -> None:
    """Delivers one acquire or one release of a lock late on one server at a
    time, over live connections (nothing is dropped), with one straggler."""
    proxy = run.cluster.proxy
    assert proxy is not None
    p = run.p
    straggler = run.rng.randrange(len(names))
    run.cluster.straggle(straggler, busy_ms=3.0, gap_ms=5.0)
    run.fault("straggler", names[straggler], "begin")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        target, name = run.rng.choice(names), run.rng.choice(lock_names)
        what = run.rng.choice(("release", "release", "acquire"))
        # The release carries its unlock latch key, the acquisition the fencing counter key.
        match = (
            f"redisson_unlock_latch:{{{name}}}" if what == "release" else f"redisson_lock_token:{{{name}}}"
        )
        delay = run.rng.uniform(0.5, 2.0) * p.cmd_timeout_ms
        proxy.hold(target, match, delay)
        run.fault(f"late_{what}", target, "begin", key=name, delay_ms=round(delay))
        run.sleep(run.rng.uniform(0.1, 0.3))
        run.fault(f"late_{what}", target, "end")
    run.heal()


def s14_late(env: Env, n: int) -> Row:
    def body(run: Run) -> None:
        lease = run.p.lease_ms
        names = [s.name for s in run.cluster.servers]
        # Few names, many threads per client: split votes are frequent (a release often
        # goes to a server that voted for someone else), and the pooled connections of
        # each client churn, so a later command could take another connection than the
        # one still owing the late request's reply.
        common: dict[str, Any] = {"keys": 2, "cs_ms": (5, 60), "wait_ms": 2 * lease, "threads": 4}
        run.start_many(3, names="t", prefix="s14t:", owner_per_hold=True, **common)
        run.start_many(3, names="f", prefix="s14f:", owner_fixed=True, **common)
        run.start_many(3, names="r", prefix="s14r:", kind="rlock", **common)
        run.wait_started()
        lock_names = keys_of("s14t:", 2) + keys_of("s14f:", 2) + keys_of("s14r:", 2)
        watcher = OrphanWatcher(run, "s14t:", grace_ms=2 * run.p.cmd_timeout_ms + 250)
        late_requests(run, 3 * run.p.duration_s, names, lock_names)
        run.sleep(1.0)
        orphans = watcher.stop()
        run.finish(["s14t:", "s14f:", "s14r:"], lock_names)
        run.row.notes.append(f"{len(orphans)} orphan keys seen while running (tokens of finished holds)")
        run.judge()
        if orphans:
            run.row.fail(f"C5: {len(orphans)} orphan keys while running, e.g. {orphans[0]}")

    return run_row(
        env, "S14", f"N={n} late acquire/release + straggler", "SAFE", body, {"n": n, "proxy": True}
    )


# ---- S15 quorum matrix ------------------------------------------------------------------------------------


def s15(env: Env) -> list[Row]:
    rows = []
    for n in (3, 5):

        def body(run: Run, n: int = n) -> None:
            p = run.p
            proxy = run.cluster.proxy
            assert proxy is not None
            quorum = n // 2 + 1
            slow_ms = p.cmd_timeout_ms + 40  # a slow server answers just after the per-server timeout
            masks = list(itertools.product("fdhs", repeat=n))  # free, down, held, slow
            if not is_full(env) and n == 5:
                masks = run.rng.sample(masks, 40)
            d = run.start(run.spec("probe", "c", mode="probe", lease_ms=p.lease_ms))
            run.wait_started()
            bad: list[str] = []
            for i, mask in enumerate(masks):
                key = f"s15:{''.join(mask)}:{i}"
                for s, state in zip(run.cluster.servers, mask):
                    if state == "d":
                        proxy.set(s.name, refuse=True)
                    elif state == "s":
                        proxy.set(s.name, delay_ms=slow_ms)
                    elif state == "h":
                        s.call("SET", key, "holder", "PX", 10000)
                mark = run.history.mark()
                d.send(f"probe {key}")
                done = d.wait_event("probe_done", 10.0, mark)
                result = next(
                    (e for e in run.history.events[mark:] if e.get("ev") == "probe" and e["key"] == key), None
                )
                run.fault("mask", "".join(mask))
                proxy.reset()
                if done is None or result is None:
                    bad.append(f"{key}: probe did not finish")
                    continue
                free = mask.count("f")
                want_ok = free >= quorum
                got_ok = result["rc"] == 0
                if want_ok != got_ok:
                    bad.append(f"{''.join(mask)}: {free} free of {n} -> {result['err']} ({result['msg']})")
                if got_ok and not 0 < result["val"] < p.lease_ms:
                    bad.append(f"{''.join(mask)}: ok with validity {result['val']} ms")
                bound = attempt_budget(run) + SLACK_MS
                if result["dur_ms"] > bound:
                    took = result["dur_ms"]
                    bad.append(f"{''.join(mask)}: non-blocking acquire took {took:.0f} ms (bound {bound})")
                if "s" in mask:
                    time.sleep(0.06)  # the late replies of the slow servers land (then the proxy drains)
                proxy.wait_drained(2.0)
                left = [
                    s.name for s, st in zip(run.cluster.servers, mask) if _get(s, key) not in (None, "holder")
                ]
                if left:
                    bad.append(f"{''.join(mask)}: the prober's key left on {', '.join(left)}")
                for s, state in zip(run.cluster.servers, mask):
                    if state == "h":
                        s.call("DEL", key)
            run.row.notes.append(f"{len(masks)} masks of free/down/held/slow over N={n}; {len(bad)} wrong")
            d.send("exit")
            run.finish(["s15:"], [])
            run.row.fail(*bad[:5])
            if len(bad) > 5:
                run.row.fail(f"... and {len(bad) - 5} more")

        rows.append(run_row(env, "S15", f"N={n} masks", "SAFE", body, {"n": n, "proxy": True}))
    return rows


# ---- S16 / S17 / S19 step modes ----------------------------------------------------------------------


def s16(env: Env) -> list[Row]:
    return [step_driver_rows(env, "S16", "nonowner", n) for n in (1, 5)]


def s17(env: Env) -> list[Row]:
    rows = [step_driver_rows(env, "S17", "reentrant", n) for n in ((1, 5) if is_full(env) else (5,))]

    def body(run: Run) -> None:
        lease = run.p.lease_ms
        drivers = run.start_many(
            4, keys=1, prefix="s17:", kind="rlock", nest=3, cs_ms=(100, 300), wait_ms=4 * lease
        )
        run.wait_started()
        paused = pause_rounds(run, drivers, env.profile.rounds + 1, (1.5, 3.0))
        m = run.finish(["s17:"], keys_of("s17:", 1))
        if m.c1_overlaps:
            run.row.fail(f"C1: {m.c1_overlaps} overlapping holds")
        if m.c3_nested_mismatch or m.c3_stale_accepted:
            run.row.fail(
                f"C3: {m.c3_nested_mismatch} nested token changes, {m.c3_stale_accepted} stale accepted"
            )
        if m.c4_violations or m.c5_orphans:
            run.row.fail(f"C4/C5: {m.c4_violations} ownership violations, {m.c5_orphans} orphans")
        run.row.fail(*losses_reported(run, paused))

    rows.append(run_row(env, "S17", "nested x3, holder paused", "CHECK", body, {"n": 1}))
    return rows


def s19(env: Env) -> list[Row]:
    return [step_driver_rows(env, "S19", "fork", n) for n in (1, 5)]


# ---- S18 watchdog lifecycle -------------------------------------------------------------------------------


def s18(env: Env) -> list[Row]:
    rows = []

    def storm(run: Run) -> None:
        lease = run.p.lease_ms
        run.start_many(
            8,
            keys=200,
            threads=4,
            prefix="s18:",
            owner_per_hold=True,
            cs_ms=(lease // 4, lease // 2),
            think_ms=5,
        )
        run.wait_started()
        taps = [MonitorTap(s, "s18") for s in run.cluster.servers]
        run.sleep(20.0 if is_full(env) else 8.0)
        m = run.finish(["s18:"], keys_of("s18:", 200))
        for t in taps:
            t.stop()
        bad = renewals_after_release(taps, release_times(run))
        run.row.notes.append(
            f"{m.ok} holds; {sum(len(t.commands) for t in taps)} commands traced; "
            f"{len(bad)} renewals after release"
        )
        run.judge()
        run.row.fail(*bad[:3])

    rows.append(run_row(env, "S18", "release during renewal storm", "SAFE", storm, {"n": 5}))

    for how in ("freed", "freed, leave_locks_on_free", "killed"):

        def holding(run: Run, how: str = how) -> None:
            lease = run.p.lease_ms
            n_locks = 50
            for lang in ("c", "py"):
                prefix = f"s18{lang}:"
                d = run.start(
                    run.spec(
                        f"{lang}-hold",
                        lang,
                        mode="hold",
                        keys=n_locks,
                        prefix=prefix,
                        leave_on_free=how.endswith("leave_locks_on_free"),
                    )
                )
                e = d.wait_event("holding", 30.0)
                if e is None or e["held"] != n_locks:
                    run.row.fail(f"{lang}: could not take {n_locks} locks ({e})")
                    continue
                run.sleep(2 * lease / 1000)  # let the watchdog renew a few times
                before = run.cluster.lock_keys([prefix])
                t0 = time.monotonic()
                if how == "killed":
                    d.proc.kill()
                    run.fault("kill", d.name)
                    d.proc.wait()
                else:
                    d.send("exit")  # the client is freed with every lock held
                    d.proc.wait(30)
                took_ms = (time.monotonic() - t0) * 1000
                left_now = run.cluster.lock_keys([prefix])
                run.sleep((lease + 300) / 1000)
                left_later = run.cluster.lock_keys([prefix])
                run.row.notes.append(
                    f"{lang}: {before} held, {how} in {took_ms:.0f} ms; {left_now} keys left at once, "
                    f"{left_later} after a lease"
                )
                n = len(run.cluster.servers)
                if before < n_locks * (n // 2 + 1):  # each lock held on at least a majority
                    run.row.fail(f"{lang}: {before} keys held before, expected {n_locks} locks on a majority")
                if how == "freed" and left_now:
                    run.row.fail(f"{lang}: {left_now} keys left after the client was freed holding them")
                if left_later:
                    run.row.fail(
                        f"{lang}: {left_later} keys still there a lease later (renewed after free/death?)"
                    )
                if how == "freed" and took_ms > 2000 + 500:
                    run.row.fail(f"{lang}: free took {took_ms:.0f} ms (shutdown_timeout 2000 ms)")
            m = run.finish(["s18c:", "s18py:"], [])
            if m.c4_violations:
                run.row.fail(f"C4: {m.c4_violations}")

        rows.append(run_row(env, "S18", f"client {how} holding 50", "SAFE", holding, {"n": 5}))
    return rows


# ---- S20 replica failover ----------------------------------------------------------------------------------


def s20(env: Env) -> list[Row]:
    rows = []
    for mode, min_replicas, expect in (("no WAIT", 0, "UNSAFE"), ("min_replicas=1", 1, "SAFE")):

        def body(run: Run, min_replicas: int = min_replicas) -> None:
            lease = run.p.lease_ms
            proxy = run.cluster.proxy
            assert proxy is not None
            master = run.cluster.servers[0]
            replica = RedisServer(
                "replica0", run.dir, extra=["--replicaof", "127.0.0.1", str(master.port)]
            ).start()
            extra_servers = [replica]
            try:
                _wait_replica(replica)
                urls = [proxy.url(master.name)]
                run.start_many(
                    4,
                    keys=1,
                    prefix="s20:",
                    urls=urls,
                    min_replicas=min_replicas,
                    replica_timeout_ms=run.p.cmd_timeout_ms,
                    cs_ms=(lease, 2 * lease),
                    wait_ms=4 * lease,
                )
                run.wait_started()
                for r in range(env.profile.rounds):
                    mark = run.history.mark()
                    if min_replicas == 0:
                        replica.pause()  # writes from now on never reach it
                        run.fault("replica_stall", replica.name, "begin")
                        mark = run.history.mark()
                    if run.history.wait_for(lambda e: e.get("ev") == "cs_read", 15.0, mark) is None:
                        run.row.notes.append("no holder in this round")
                    if min_replicas:
                        replica.pause()
                        run.fault("replica_stall", replica.name, "begin")
                        run.sleep(0.1)
                    master.kill()
                    run.fault("master_killed", master.name)
                    replica.resume()
                    replica.call("REPLICAOF", "NO", "ONE")
                    proxy.retarget(run.cluster.servers[0].name, replica.port)
                    run.fault("failover", replica.name)
                    run.sleep(2 * lease / 1000)
                    # The promoted replica is the new master; give it a fresh replica for the next round.
                    master = replica
                    replica = RedisServer(
                        f"replica{r + 1}", run.dir, extra=["--replicaof", "127.0.0.1", str(master.port)]
                    ).start()
                    extra_servers.append(replica)
                    _wait_replica(replica)
                run.finish(["s20:"], keys_of("s20:", 1))
                run.judge()
            finally:
                for s in extra_servers:
                    s.stop()

        rows.append(run_row(env, "S20", mode, expect, body, {"n": 1, "proxy": True}))
    return rows


def _wait_replica(replica: RedisServer) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        info = replica.call("INFO", "replication")
        if isinstance(info, bytes) and b"master_link_status:up" in info:
            return
        time.sleep(0.02)
    raise RuntimeError("the replica did not connect to its master")


# ---- S22 Sentinel failover ------------------------------------------------------------------------------


def s22(env: Env) -> list[Row]:
    """A real Sentinel deployment (1 master + 2 replicas + 3 sentinels, tests/rmsentinel.py) behind a
    redis+sentinel:// URL; the master is SIGKILLed (or SENTINEL FAILOVER is asked for) while holders work,
    each round once a lock is held. Leases outlast the sentinels' switch (~2.3 s), so a hold the new master
    has survives. Rows: SIGKILL with min_replicas 0 (CHECK: its counts are the honest table) and with the
    Sentinel default (1: SAFE), SENTINEL FAILOVER with the default (CHECK: the old master takes writes until
    each client hears of the switch)."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from rmsentinel import Sentinels

    rows = []
    modes = (
        ("SIGKILL, min_replicas=0", 0, "kill", "CHECK"),
        ("SIGKILL, min_replicas default (1)", -1, "kill", "SAFE"),
    )
    if is_full(env):
        modes += (("SENTINEL FAILOVER, min_replicas default (1)", -1, "failover", "CHECK"),)
    for mode, min_replicas, how, expect in modes:

        def body(run: Run, min_replicas: int = min_replicas, how: str = how) -> None:
            lease = 5000
            with Sentinels() as sd:
                run.start_many(
                    4,
                    keys=2,
                    prefix="s22:",
                    urls=[sd.url],
                    watchdog_lease_ms=lease,
                    cmd_timeout_ms=max(run.p.cmd_timeout_ms, 300),
                    min_replicas=min_replicas,
                    replica_timeout_ms=500,
                    cs_ms=(50, 300),
                    wait_ms=2 * lease,
                )
                run.wait_started()
                for _ in range(env.profile.rounds):
                    mark = run.history.mark()
                    if run.history.wait_for(lambda e: e.get("ev") == "cs_read", 15.0, mark) is None:
                        run.row.notes.append("no holder in this round")
                    old = sd.master_port()
                    if how == "kill":
                        victim = sd.kill_master()
                        run.fault("master_killed", f"node:{old}")
                        new = sd.wait_switch(old)
                        sd.restart_as_replica(victim, new)
                    else:
                        run.fault("sentinel_failover", f"node:{old}")
                        new = sd.failover(settle=False)
                    run.history.harness("heal")
                    sd.settle(new)
                    time.sleep(1.0)  # a round of work on the new master before the next fault
                # Orphans are looked for on the master as it is now (the harness's own servers are unused).
                own = run.cluster.servers
                run.cluster.servers = [sd.master()]  # type: ignore[list-item]
                try:
                    m = run.finish(["s22:"], keys_of("s22:", 2), lease_ms=lease)
                finally:
                    run.cluster.servers = own
            run.row.notes.append(
                f"{m.ok} acquisitions, {m.c1_overlaps} overlapping holds (C1), {m.c2_lost} lost updates, "
                f"{m.c6_reports} LOST reports"
            )
            run.judge()
            if (
                run.row.expect == "CHECK"
            ):  # the counts are the finding; fencing, ownership and keys still hold
                run.row.fail(
                    *[b for b in checkers.safe_failures(m) if b.startswith(("C3", "C4", "C5", "C6"))]
                )

        rows.append(run_row(env, "S22", mode, expect, body, {"n": 1}))
    return rows


# ---- S21 soak ----------------------------------------------------------------------------------------


def s21(env: Env) -> list[Row]:
    def body(run: Run) -> None:
        lease = run.p.lease_ms
        duration = 240.0 if is_full(env) else 40.0
        uids = [42430 + i for i in range(8)] if env.nft.ok else [None] * 8
        drivers = [
            run.start(
                run.spec(
                    f"c{i}",
                    "c" if i % 2 == 0 else "py",
                    keys=10000,
                    prefix="s21:",
                    uid=uids[i],
                    cs_ms=(1, 20),
                    wait_ms=2 * lease,
                )
            )
            for i in range(8)
        ]
        run.wait_started()
        names = [s.name for s in run.cluster.servers]
        deadline = time.monotonic() + duration
        nft = Partitions() if env.nft.ok else None
        try:
            while time.monotonic() < deadline:
                run.sleep(min(20.0, max(0.0, deadline - time.monotonic())) / (1 if is_full(env) else 2))
                kinds = ["pause", "proxy"] + (["partition"] if nft else [])
                kind = run.rng.choice(kinds)
                if kind == "pause":
                    pause_rounds(run, drivers, 1, (1.5, 3.0))
                elif kind == "proxy":
                    proxy_chaos(run, 5.0, names, [f"s21:{run.rng.randrange(10000)}" for _ in range(20)])
                elif nft is not None:
                    victim = run.rng.choice(drivers)
                    ports = [s.port for s in run.rng.sample(run.cluster.servers, run.rng.choice((2, 3)))]
                    nft.isolate(victim.spec.uid or 0, ports)
                    run.fault("partition", victim.name, "begin", ports=ports)
                    run.sleep(2 * lease / 1000)
                    nft.clear()
                    run.fault("partition", victim.name, "end")
                    run.heal()
        finally:
            if nft:
                nft.clear()
        m = run.finish(["s21:"], keys_of("s21:", 10000))
        growth = resource_growth(run)
        run.row.notes.append(growth[0])
        run.row.fail(*growth[1])
        run.row.fail(*[b for b in checkers.safe_failures(m) if not b.startswith("C2")])
        run.row.notes.append(f"C2 (from pauses, inherent): {m.c2_lost} lost, {m.c2_cas_fail} CAS conflicts")

    return [run_row(env, "S21", "10k keys, random S1/S13/S14 faults", "SAFE", body, {"n": 5, "proxy": True})]


def resource_growth(run: Run) -> tuple[str, list[str]]:
    """Descriptors and resident memory of every driver, first sample after start vs the last."""
    per: dict[str, list[dict[str, Any]]] = {}
    for e in run.events:
        if e.get("ev") == "stats":
            per.setdefault(e["p"], []).append(e)
    worst_fd, worst_rss, bad = 0, 0.0, []
    for name, samples in per.items():
        if len(samples) < 3:
            continue
        first, last = samples[1], samples[-1]
        dfd = last["fds"] - first["fds"]
        rss = last["rss_kb"] / max(1, first["rss_kb"])
        worst_fd, worst_rss = max(worst_fd, dfd), max(worst_rss, rss)
        if dfd > 16:
            bad.append(f"{name}: descriptors grew from {first['fds']} to {last['fds']}")
        if rss > 2.0 and last["rss_kb"] - first["rss_kb"] > 32768:
            bad.append(f"{name}: resident memory grew from {first['rss_kb']} to {last['rss_kb']} kB")
    return f"fd growth max {worst_fd}, RSS growth max x{worst_rss:.2f}", bad
