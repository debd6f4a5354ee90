#!/usr/bin/env python3
"""What a Sentinel failover costs a lock, measured on this machine (not a test).

    build-venv/bin/python bench/sentinel_failover.py [--failovers 20] [--only gap,loss,cost]
        [--build build-test] [--redisson DIR]

One deployment (tests/rmsentinel.py: 1 master + 2 replicas + 3 sentinels,
down-after-milliseconds 1000, failover-timeout 2000) for the whole run.

gap   A client takes and releases a lock every 10 ms (bench_sentinel pace: the
      C core; with --redisson, Redisson in Sentinel mode beside it) while the
      master is SIGKILLed, --failovers times: the sentinels' own switch (the
      first sentinel naming a new master that says ROLE master, polled every
      5 ms) and each client's first successful acquisition after the kill,
      p50/p99, and each client's longest call.
loss  Per failover, 50 locks are acquired (watchdog lease 10 s) and the master
      is SIGKILLed at once; after the switch a second client tries each name:
      locks missing on the new master, LOST reports, and double holders (the
      second client got a lock while its first holder had not been told it
      was LOST), with min_replicas 0 and the Sentinel default (1); per 1,000
      acquisitions.
cost  An uncontended acquire + release pair through the sentinels with
      min_replicas 0 and with the default (WAIT 1), alternated, in one run.

Writes build-bench/sentinel/results.json and results.md and prints the tables.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
import redmutex  # noqa: E402
from rmsentinel import Sentinels, command  # noqa: E402

LOCKS_PER_FAILOVER = 50


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(p / 100 * (len(xs) - 1))))]


class Pacer:
    """A worker printing "ok T0 T1" / "err T0 T1 X" / "rel T0 T1 RC" lines; keeps them, times in ns."""

    def __init__(self, name: str, cmd: list[str]) -> None:
        self.name = name
        self.lines: list[tuple[str, int, int]] = []
        self.mu = threading.Lock()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            w = line.split()
            if len(w) >= 3 and w[0] in ("ok", "err", "rel"):
                with self.mu:
                    self.lines.append((w[0], int(w[1]), int(w[2])))

    def first_ok_after(self, t: int) -> int | None:
        with self.mu:
            return next((t1 for kind, t0, t1 in self.lines if kind == "ok" and t0 >= t), None)

    def last_at(self) -> int:
        with self.mu:
            return self.lines[-1][2] if self.lines else 0

    def longest_call_ms(self, since: int) -> float:
        with self.mu:
            return max((t1 - t0 for _, t0, t1 in self.lines if t0 >= since), default=0) / 1e6

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


def switch_time(sd: Sentinels, old: int, t_kill: int, timeout: float = 30.0) -> tuple[int, int]:
    """When the first sentinel names a new master that says ROLE master (ns), and its port."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for s in sd.sentinels:
            try:
                addr = s.command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", sd.service)
                port = int(addr[1])
                if port != old and sd.role(port) == "master":
                    return time.monotonic_ns(), port
            except (OSError, TypeError, IndexError):
                pass
        time.sleep(0.005)
    raise RuntimeError("the sentinels did not switch")


def agreed_master(sd: Sentinels, timeout: float = 60.0) -> int:
    """The master every sentinel names and that says ROLE master, the deployment whole: the one to kill.
    (On a loaded machine the sentinels may fail over on their own, or abort one: this waits them out.)"""
    deadline = time.monotonic() + timeout
    while True:
        ports = set()
        for s in sd.sentinels:
            try:
                ports.add(int(s.command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", sd.service)[1]))
            except (OSError, TypeError, IndexError):
                ports.add(-1)
        port = ports.pop() if len(ports) == 1 else -1
        if port > 0 and sd.role(port) == "master":
            try:
                sd.settle(port, timeout=max(1.0, min(30.0, deadline - time.monotonic())))
                return port
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
                continue  # they moved it meanwhile: ask again
        if time.monotonic() > deadline:
            raise RuntimeError(f"the sentinels do not agree on a master: {ports | {port}}")
        time.sleep(0.05)


def cool_down(last_failover_ns: int, sd: Sentinels) -> None:
    """A sentinel starts no new failover of a master within twice its failover-timeout."""
    ready = last_failover_ns + (2 * sd.failover_timeout_ms + 200) * 1_000_000
    while time.monotonic_ns() < ready:
        time.sleep(0.05)


def gap_series(sd: Sentinels, n: int, build: Path, redisson: Path | None) -> dict[str, Any]:
    pacers = [Pacer("redmutex", [str(build / "bench" / "bench_sentinel"), "pace", sd.url, "-1"])]
    if redisson:
        cp = f"{redisson}/target/redisson-sentinel-bench-1.0.0.jar:{redisson}/target/lib/*"
        hosts = [f"127.0.0.1:{s.port}" for s in sd.sentinels]
        pacers.append(
            Pacer(
                "Redisson 3.29",
                ["java", "-cp", cp, "redmutex.bench.RedissonSentinelPace", sd.service, *hosts],
            )
        )
    out: dict[str, Any] = {"switch_ms": [], **{p.name: {"gap_ms": [], "hung": 0} for p in pacers}}
    start = time.monotonic_ns()
    last = 0
    try:
        for i in range(n):
            cool_down(last, sd)
            for p in pacers:  # each is working again before the next kill
                deadline = time.monotonic() + 60
                while (
                    p.first_ok_after(time.monotonic_ns() - 200_000_000) is None
                    and time.monotonic() < deadline
                ):
                    time.sleep(0.01)
            old = agreed_master(sd)
            victim = sd.node(old)
            t_kill = time.monotonic_ns()
            victim.kill()
            last = t_kill
            t_switch, new = switch_time(sd, old, t_kill)
            out["switch_ms"].append((t_switch - t_kill) / 1e6)
            for p in pacers:
                deadline = time.monotonic() + 60
                while p.first_ok_after(t_kill) is None and time.monotonic() < deadline:
                    time.sleep(0.005)
                got = p.first_ok_after(t_kill)
                if got is None:
                    out[p.name]["hung"] += 1
                    out[p.name]["gap_ms"].append(float("inf"))
                else:
                    out[p.name]["gap_ms"].append((got - t_kill) / 1e6)
            sd.restart_as_replica(victim, new)
            agreed_master(sd)  # the sentinels' final word (a promotion may have been aborted and redone)
            print(
                f"  failover {i + 1}/{n}: switch {out['switch_ms'][-1]:.0f} ms, "
                + ", ".join(f"{p.name} {out[p.name]['gap_ms'][-1]:.0f} ms" for p in pacers),
                flush=True,
            )
        for p in pacers:
            out[p.name]["longest_call_ms"] = p.longest_call_ms(start)
            # A call in flight for over 30 s when the series ended never returned.
            if time.monotonic_ns() - p.last_at() > 30e9:
                out[p.name]["hung_at_end"] = True
    finally:
        for p in pacers:
            p.stop()
    return out


def named_master(sd: Sentinels, timeout: float = 60.0) -> int:
    """The master every sentinel names, once it says ROLE master (a promotion the sentinels gave up and
    redid on a loaded machine is not it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ports = set()
        for s in sd.sentinels:
            try:
                ports.add(int(s.command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", sd.service)[1]))
            except (OSError, TypeError, IndexError):
                ports.add(-1)
        if len(ports) == 1 and (port := ports.pop()) > 0 and sd.role(port) == "master":
            return port
        time.sleep(0.02)
    raise RuntimeError("the sentinels do not agree on a master")


def loss_series(n: int, min_replicas: int | None) -> dict[str, Any]:
    """n failovers on a deployment of its own; one the sentinels do not settle within a minute (they can
    get stuck on a loaded machine: a promotion aborted, no good replica left) is not counted, and the
    deployment is made again."""
    sd = Sentinels().start()
    rebuilt = 0
    try:
        res = loss_rounds(sd, n, min_replicas)
    finally:
        sd.stop()
    while res["done"] < n:
        rebuilt += 1
        sd = Sentinels().start()
        try:
            more = loss_rounds(sd, n - res["done"], min_replicas, res)
        finally:
            sd.stop()
        res = more
    res["rebuilt"] = rebuilt
    return res


def loss_rounds(
    sd: Sentinels, n: int, min_replicas: int | None, res: dict[str, Any] | None = None
) -> dict[str, Any]:
    res = res or {
        "done": 0,
        "tried": 0,
        "acquired": 0,
        "missing": 0,
        "lost_reported": 0,
        "double_holders": 0,
        "second_got": 0,
        "lost_news_ms": [],
    }
    last = 0
    for _ in range(n):
        try:
            last = loss_round(sd, res, last, min_replicas)
        except RuntimeError as e:
            print(f"  the sentinels did not settle ({e}): a new deployment", flush=True)
            return res
        res["done"] += 1
        print(f"  min_replicas={min_replicas}: failover {res['done']}: {res}", flush=True)
    return res


def loss_round(sd: Sentinels, res: dict[str, Any], last: int, min_replicas: int | None) -> int:
    """One failover of the loss series, added to res only once it completed; returns when it began (ns)."""
    cool_down(last, sd)
    r = {"tried": 0, "acquired": 0, "missing": 0, "lost_reported": 0, "double_holders": 0, "second_got": 0}
    a = redmutex.Client(sd.url, min_replicas=min_replicas, watchdog_lease=10.0)
    b = redmutex.Client(sd.url, min_replicas=0, command_timeout=2.0)
    try:
        names = [f"bench:loss:{res['done']}:{k}" for k in range(LOCKS_PER_FAILOVER)]
        old = agreed_master(sd)
        held = []
        for name in names:
            lk = a.lock(name)
            with contextlib.suppress(redmutex.RedMutexError):
                if lk.acquire(blocking=False):
                    held.append(lk)
        r["tried"], r["acquired"] = len(names), len(held)
        victim = sd.node(old)
        victim.kill()  # right after the acquisitions
        last = time.monotonic_ns()
        t_switch, _ = switch_time(sd, old, last)
        for lk in held:  # a second client, at once: does it get a lock its holder still believes held?
            other = b.lock(lk.name)
            if other.acquire(blocking=False):
                r["second_got"] += 1
                r["double_holders"] += not lk.lost
                other.release()
        final = named_master(sd)
        missing = [lk for lk in held if command(final, "EXISTS", lk.name) == 0]
        r["missing"] = len(missing)
        # Every lock the master lacks must be reported LOST: how long after the switch.
        deadline = time.monotonic() + 15
        while any(not lk.lost for lk in missing) and time.monotonic() < deadline:
            time.sleep(0.01)
        news = (time.monotonic_ns() - t_switch) / 1e6 if missing else None
        r["lost_reported"] = sum(1 for lk in held if lk.lost)
        for lk in held:
            with contextlib.suppress(redmutex.RedMutexError):
                lk.release()
        sd.restart_as_replica(victim, final)
        agreed_master(sd)
    finally:
        a.close()
        b.close()
    for k, v in r.items():
        res[k] += v
    if news is not None:
        res["lost_news_ms"].append(news)
    return last


def cost_series(sd: Sentinels, build: Path, rounds: int = 3, seconds: float = 3.0) -> dict[str, Any]:
    rates: dict[str, list[float]] = {"0": [], "default (1)": []}
    for _ in range(rounds):
        for label, arg in (("0", "0"), ("default (1)", "-1")):
            r = subprocess.run(
                [str(build / "bench" / "bench_sentinel"), "pairs", sd.url, arg, str(seconds)],
                capture_output=True,
                text=True,
                check=True,
            )
            _, count, ns = r.stdout.split()
            rates[label].append(int(count) / (int(ns) / 1e9))
    med = {k: statistics.median(v) for k, v in rates.items()}
    return {"pairs_per_s": med, "ratio": med["0"] / med["default (1)"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--failovers", type=int, default=20)
    ap.add_argument("--only", default="gap,loss,cost")
    ap.add_argument("--build", default=str(ROOT / "build-test"))
    ap.add_argument("--redisson", default=None, help="a built bench/sentinel/java (mvn package)")
    a = ap.parse_args()
    only = set(a.only.split(","))
    build = Path(a.build)
    outdir = ROOT / "build-bench" / "sentinel"
    outdir.mkdir(parents=True, exist_ok=True)
    res: dict[str, Any] = {"load": os.getloadavg(), "failovers": a.failovers}
    with Sentinels() as sd:
        if "cost" in only:
            print("cost of min_replicas=1", flush=True)
            res["cost"] = cost_series(sd, build)
            print(f"  {res['cost']}", flush=True)
        if "gap" in only:
            print("gap: master SIGKILLed while a client takes a lock every 10 ms", flush=True)
            res["gap"] = gap_series(sd, a.failovers, build, Path(a.redisson) if a.redisson else None)
        if "loss" in only:
            print("loss: locks acquired right before a SIGKILL", flush=True)
            res["loss"] = {}
            for label, mr in (("0", 0), ("default (1)", None)):
                res["loss"][label] = loss_series(a.failovers, mr)
    (outdir / "results.json").write_text(json.dumps(res, indent=1))
    md = report(res)
    (outdir / "results.md").write_text(md)
    print(md)
    return 0


def report(res: dict[str, Any]) -> str:
    lines = [f"load average at start: {res['load'][0]:.1f}", ""]
    if "gap" in res:
        g = res["gap"]
        sw = g["switch_ms"]
        lines += [
            f"| over {len(sw)} SIGKILLs of the master | p50 | p99 | max | longest call |",
            "|---|---|---|---|---|",
            f"| the sentinels' own switch | {pct(sw, 50):.0f} ms | {pct(sw, 99):.0f} ms"
            f" | {max(sw):.0f} ms | |",
        ]
        for name, v in g.items():
            if name == "switch_ms":
                continue
            gaps = v["gap_ms"]
            excess = [x - s for x, s in zip(gaps, sw)]
            hung = f" ({v['hung']} never recovered)" if v["hung"] else ""
            lines.append(
                f"| {name}: first acquisition after the kill{hung} | {pct(gaps, 50):.0f} ms"
                f" | {pct(gaps, 99):.0f} ms | {max(gaps):.0f} ms | {v.get('longest_call_ms', 0):.0f} ms |"
            )
            lines.append(
                f"| {name}: beyond the switch | {pct(excess, 50):.0f} ms | {pct(excess, 99):.0f} ms"
                f" | {max(excess):.0f} ms | |"
            )
        lines.append("")
    for series, title in (("loss", "locks taken right before the kill"),):
        if series not in res:
            continue
        lines += [
            f"| {title}: min_replicas | tried | acquired | missing on the new master | LOST reported"
            " | double holders | per 1,000 acquired: lost / double | LOST news after the switch |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for k, v in res[series].items():
            per = 1000 / max(1, v["acquired"])
            lines.append(
                f"| {k} | {v.get('tried', v['acquired'])} | {v['acquired']} | {v['missing']}"
                f" | {v['lost_reported']} | {v['double_holders']}"
                f" | {v['missing'] * per:.1f} / {v['double_holders'] * per:.1f}"
                f" | {', '.join(f'{x:.0f} ms' for x in v.get('lost_news_ms', [])) or '-'} |"
            )
        lines.append("")
    if "cost" in res:
        c = res["cost"]
        p = c["pairs_per_s"]
        lines += [
            "| uncontended pair through the sentinels | pairs/s |",
            "|---|---|",
            f"| min_replicas 0 | {p['0']:.0f} |",
            f"| min_replicas default (1: WAIT 1) | {p['default (1)']:.0f} |",
            f"| cost of WAIT 1 | x{c['ratio']:.2f} |",
        ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
