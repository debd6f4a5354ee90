"""Separate processes contending for one lock: redmutex's kinds against redis-py's Lock.

Figures, not a test. Each series runs W worker processes (8 by default),
each looping ``acquire; sleep 1 ms; release`` on one lock, on a redis-server
this program starts on loopback. The series run interleaved, in short blocks
of shuffled order, so drifts of the machine hit all of them alike, and the
figures are medians over the rounds. Measured, as in bench_lock.c:

* utilisation - time the lock was held (acquire returned .. release returned)
  over the window from the first acquisition to the last release;
* hand-off - from one worker's release returning to the next acquire
  returning, in round trips (a PING from another connection during the run);
* fairness - fewest / most acquisitions per worker;
* violations - acquisitions that returned before the previous holder called
  release (0 for a lock that works).

Read-write lock: W readers holding the read lock for 1 ms each, against the
same work under the write lock; the figure is the ratio of throughputs.

Usage (after ``pip install . redis``)::

    python bench/contend_processes.py [--seconds 2] [--rounds 5] [--workers 8] [--json]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import shutil
import socket
import statistics
import subprocess
import tempfile
import threading
import time
from typing import Any

import redis

HOLD_S = 0.001

# name -> (label, what the workers run)
SERIES = {
    "fair": ("redmutex `client.fair_lock(name)`", "redmutex"),
    "lock": ("redmutex `client.lock(name)` (plain)", "redmutex"),
    "rlock": ("redmutex `client.rlock(name)` (reentrant)", "redmutex"),
    "redis-py": ("redis-py `r.lock(name)` (defaults: polls every 0.1 s)", "redis-py"),
    "redis-py:tuned": ("redis-py `r.lock(name, sleep=0.001)`", "redis-py"),
    "read": ("redmutex `with rw.read:`", "redmutex"),
    "write": ("redmutex `with rw.write:`", "redmutex"),
}
EXCLUSIVE = ["fair", "lock", "rlock", "redis-py", "redis-py:tuned"]
RW = ["read", "write"]


def start_redis(workdir: str) -> tuple[subprocess.Popen[bytes], int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    exe = shutil.which("redis-server") or "/usr/bin/redis-server"
    args = [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    proc = subprocess.Popen([*args, "--dir", workdir], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while True:
        try:
            if redis.Redis(port=port, socket_timeout=1).ping():
                return proc, port
        except redis.exceptions.ConnectionError:
            if time.monotonic() > deadline:
                raise SystemExit("redis-server did not start") from None
            time.sleep(0.02)


def make_lock(series: str, url: str, name: str) -> Any:
    if SERIES[series][1] == "redis-py":
        r = redis.Redis.from_url(url)
        return r.lock(name, sleep=0.001) if series.endswith(":tuned") else r.lock(name)
    import redmutex  # imported in the worker: the parent makes no client (no threads) before forking

    client = redmutex.Client(url)
    if series in RW:
        rw = client.rwlock(name)
        return rw.read if series == "read" else rw.write
    return {"fair": client.fair_lock, "lock": client.lock, "rlock": client.rlock}[series](name)


def worker(series: str, url: str, name: str, start_ns: int, end_ns: int, out: Any) -> None:
    lock = make_lock(series, url, name)
    lock.acquire()  # connect and load scripts before the clock starts
    lock.release()
    events = []
    while time.monotonic_ns() < start_ns:
        time.sleep(0.0005)
    while time.monotonic_ns() < end_ns:
        lock.acquire()
        got = time.monotonic_ns()
        time.sleep(HOLD_S)
        rel = time.monotonic_ns()
        lock.release()
        events.append((got, rel, time.monotonic_ns()))
    out.send(events)
    out.close()


def pct(v: list[float], q: float) -> float:
    v = sorted(v)
    return v[min(len(v) - 1, round(q / 100 * (len(v) - 1)))]


def run_block(series: str, url: str, workers: int, seconds: float, port: int) -> dict[str, Any]:
    ctx = multiprocessing.get_context("fork")
    name = f"bench:{series}:{random.getrandbits(32)}"
    start_ns = time.monotonic_ns() + 1_500_000_000  # every worker connects first
    end_ns = start_ns + int(seconds * 1e9)
    pipes, procs = [], []
    for _ in range(workers):
        recv, send = ctx.Pipe(duplex=False)
        p = ctx.Process(target=worker, args=(series, url, name, start_ns, end_ns, send))
        p.start()
        send.close()
        pipes.append(recv)
        procs.append(p)
    rtts: list[float] = []
    stop = threading.Event()

    def ping() -> None:
        # A bare PING on a raw socket: the round trip with as little Python in it as can be.
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            while not stop.is_set():
                t0 = time.monotonic_ns()
                sock.sendall(b"PING\r\n")
                sock.recv(64)
                rtts.append(time.monotonic_ns() - t0)
                time.sleep(0.002)

    pinger = threading.Thread(target=ping)
    pinger.start()
    per_worker = [pipe.recv() for pipe in pipes]
    stop.set()
    pinger.join()
    for p in procs:
        p.join(30)
    return metrics(series, per_worker, statistics.median(rtts), seconds)


def metrics(series: str, per_worker: list[list[tuple[int, int, int]]], rtt_ns: float, seconds: float) -> dict:
    events = sorted((got, rel, done, w) for w, evs in enumerate(per_worker) for got, rel, done in evs)
    counts = [len(evs) for evs in per_worker]
    out: dict[str, Any] = {
        "acquisitions": len(events),
        "per_s": len(events) / seconds,
        "fewest": min(counts),
        "most": max(counts),
        "fairness": min(counts) / max(counts) if max(counts) else 0.0,
        "rtt_us": rtt_ns / 1e3,
    }
    if series in RW and series == "read":
        return out
    held = sum(done - got for got, _, done, _ in events)
    window = events[-1][2] - events[0][0]
    handoff = [events[i][0] - events[i - 1][2] for i in range(1, len(events))]
    out["utilisation"] = held / window
    out["handoff_p50_us"] = pct(handoff, 50) / 1e3
    out["handoff_p90_us"] = pct(handoff, 90) / 1e3
    out["handoff_p50_rtt"] = pct(handoff, 50) / rtt_ns
    out["violations"] = sum(1 for i in range(1, len(events)) if events[i][0] < events[i - 1][1])
    return out


def median_of(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the rounds (violations: their sum)."""
    out = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    out["violations"] = sum(r.get("violations", 0) for r in rounds)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=2.0, help="length of one block")
    ap.add_argument("--rounds", type=int, default=5, help="blocks per series")
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--only", default="", help="comma-separated series (default: all)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    names = [s for s in SERIES if not args.only or s in args.only.split(",")]
    with tempfile.TemporaryDirectory() as d:
        server, port = start_redis(d)
        url = f"redis://127.0.0.1:{port}"
        results: dict[str, list[dict[str, Any]]] = {s: [] for s in names}
        try:
            for r in range(args.rounds):
                order = names[:]
                random.shuffle(order)
                for s in order:
                    results[s].append(run_block(s, url, args.workers, args.seconds, port))
                print(f"round {r + 1}/{args.rounds} done, load {os.getloadavg()[0]:.2f}", flush=True)
        finally:
            server.kill()
            server.wait()
    summary = {s: median_of(results[s]) for s in names}
    if args.json:
        print(json.dumps({"summary": summary, "rounds": results}, indent=1))
        return
    print(f"\n{args.workers} worker processes, 1 ms critical section, {args.rounds} x {args.seconds} s each")
    head = "| series | acquisitions/s | utilisation | hand-off p50 | (round trips) | p90 | fewest / most |"
    print(head + " violations |")
    print("|---|---|---|---|---|---|---|---|")
    for s in names:
        if s == "read":
            continue
        m = summary[s]
        print(
            f"| {SERIES[s][0]} | {m['per_s']:.0f} | {m['utilisation']:.1%} | {m['handoff_p50_us']:.0f} µs | "
            f"{m['handoff_p50_rtt']:.2f} | {m['handoff_p90_us']:.0f} µs | "
            f"{m['fewest']:.0f} / {m['most']:.0f} ({m['fairness']:.2f}) | {m['violations']} |"
        )
    if "read" in summary and "write" in summary:
        ratio = statistics.median(a["per_s"] / b["per_s"] for a, b in zip(results["read"], results["write"]))
        print(
            f"\nread lock: {summary['read']['per_s']:.0f}/s, write lock: {summary['write']['per_s']:.0f}/s: "
            f"readers reach {ratio:.1f}x the writers' throughput"
        )
    rtt = statistics.median(m["rtt_us"] for m in summary.values())
    print(f"round trip (PING) p50 over the runs: {rtt:.1f} µs")


if __name__ == "__main__":
    main()
