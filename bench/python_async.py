#!/usr/bin/env python3
"""redmutex.asyncio: uncontended pairs, the loop's blocked time, and 1,000 waiting tasks.

Starts its own redis-server (Debian package) on a free loopback port without
persistence, and measures in one run:

1. Uncontended acquire+release pairs per second, one task (or thread) each,
   in alternating short rounds so that drift of the machine affects all alike:
     * redmutex.asyncio  ``async with lock:`` (AsyncLock, watchdog lease),
     * redmutex (sync)    ``with lock:`` on a plain thread,
     * redis-py asyncio   ``await lock.acquire(); await lock.release()`` on
                          ``redis.asyncio.Redis().lock(name)`` (its defaults).
2. The event loop's cost per lock operation: the loop thread's CPU time per
   operation (time.thread_time), and the longest stretch a probe task could
   not run, for redmutex.asyncio and, as the baseline that blocks, the sync
   API called from a coroutine.
3. Hand-off with N waiters (default 1,000): N tasks of one process wait on one
   lock and take it in turn; threads used by the process (/proc/self/task)
   and the latency from one holder's release() to the next holder's
   acquire() returning. Baseline: the sync API with N threads, same lock.

    python bench/python_async.py [--seconds 2] [--rounds 5] [--waiters 1000] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from typing import Any, Awaitable, Callable

import redis
import redis.asyncio
import redmutex
from redmutex.asyncio import AsyncClient

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from python_pairs import start_redis


def threads_now() -> int:
    return len(os.listdir("/proc/self/task"))


def percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


async def arate(pair: Callable[[], Awaitable[None]], seconds: float) -> float:
    n = 0
    start = time.perf_counter()
    end = start + seconds
    while True:
        for _ in range(50):
            await pair()
        n += 50
        now = time.perf_counter()
        if now >= end:
            return n / (now - start)


def srate(pair: Callable[[], None], seconds: float) -> float:
    n = 0
    start = time.perf_counter()
    end = start + seconds
    while True:
        for _ in range(50):
            pair()
        n += 50
        now = time.perf_counter()
        if now >= end:
            return n / (now - start)


def in_thread(fn: Callable[[], float]) -> float:
    out: list[float] = []
    t = threading.Thread(target=lambda: out.append(fn()))
    t.start()
    t.join()
    return out[0]


async def pairs(url: str, port: int, seconds: float, rounds: int) -> dict[str, Any]:
    sync_client = redmutex.Client(url)
    sync_lock = sync_client.lock("bench:sync")
    peer = redis.asyncio.Redis(port=port)
    theirs = peer.lock("bench:redis-py")
    results: dict[str, list[float]] = {"redmutex.asyncio": [], "redmutex sync": [], "redis-py asyncio": []}
    async with AsyncClient(url) as client:
        ours = client.lock("bench:async")

        async def ours_pair() -> None:
            async with ours:
                pass

        async def theirs_pair() -> None:
            await theirs.acquire()
            await theirs.release()

        def sync_pair() -> None:
            with sync_lock:
                pass

        await arate(ours_pair, 0.3)  # warm up connections and scripts
        await arate(theirs_pair, 0.3)
        srate(sync_pair, 0.3)
        for _ in range(rounds):
            results["redmutex.asyncio"].append(await arate(ours_pair, seconds))
            results["redis-py asyncio"].append(await arate(theirs_pair, seconds))
            results["redmutex sync"].append(await asyncio.to_thread(srate, sync_pair, seconds))
    await peer.aclose()
    sync_client.close()
    median = {k: statistics.median(v) for k, v in results.items()}
    # Rounds of the three run back to back: the ratio within a round is the
    # steadier figure on a machine whose load changes.
    per_round = [a / b for a, b in zip(results["redmutex.asyncio"], results["redis-py asyncio"])]
    return {
        "ratio_async_over_redis_py_asyncio_per_round_median": round(statistics.median(per_round), 3),
        "pairs_per_s": {k: round(v) for k, v in median.items()},
        "ratio_async_over_redis_py_asyncio": round(
            median["redmutex.asyncio"] / median["redis-py asyncio"], 3
        ),
        "ratio_async_over_sync": round(median["redmutex.asyncio"] / median["redmutex sync"], 3),
        "rounds": {k: [round(x) for x in v] for k, v in results.items()},
    }


async def loop_cost(url: str, ops: int) -> dict[str, Any]:
    """The loop thread's CPU per operation (nothing else on the loop), then the
    stalls a probe task sees (it runs whenever the loop is free) meanwhile."""

    async def cpu(pair: Callable[[], Awaitable[None]]) -> tuple[float, float]:
        cpu0, t0 = time.thread_time(), time.perf_counter()
        for _ in range(ops):
            await pair()
        return (time.thread_time() - cpu0) / (2 * ops), (time.perf_counter() - t0) / (2 * ops)

    async def stalls(pair: Callable[[], Awaitable[None]]) -> tuple[float, float, float]:
        stop = False
        gaps: list[float] = []

        async def probe() -> None:
            last = time.perf_counter()
            while not stop:
                await asyncio.sleep(0)
                now = time.perf_counter()
                gaps.append(now - last)
                last = now

        p = asyncio.create_task(probe())
        await asyncio.sleep(0)
        for _ in range(ops):
            await pair()
            await asyncio.sleep(0)  # a pair that never yields would starve the probe altogether
        stop = True
        await p
        return percentile(gaps, 0.5), percentile(gaps, 0.99), max(gaps)

    sync_client = redmutex.Client(url)
    sync_lock = sync_client.lock("bench:loop-sync")
    report: dict[str, Any] = {"ops": 2 * ops}
    async with AsyncClient(url) as client:
        lock = client.lock("bench:loop-async")

        async def async_pair() -> None:
            await lock.acquire()
            await lock.release()

        async def blocking_pair() -> None:  # what an asyncio user must not do
            sync_lock.acquire()
            sync_lock.release()

        for name, pair in (("redmutex.asyncio", async_pair), ("sync API called on the loop", blocking_pair)):
            await cpu(pair)  # warm up
            loop_cpu, wall = await cpu(pair)
            p50, p99, longest = await stalls(pair)
            report[name] = {
                "loop_cpu_us_per_op": round(loop_cpu * 1e6, 1),
                "wall_us_per_op": round(wall * 1e6, 1),
                "loop_stall_us_p50": round(p50 * 1e6, 1),
                "loop_stall_us_p99": round(p99 * 1e6, 1),
                "longest_loop_stall_us": round(longest * 1e6, 1),
            }
    sync_client.close()
    return report


async def async_handoff(url: str, waiters: int) -> dict[str, Any]:
    base = threads_now()
    async with AsyncClient(url) as client:
        holder = client.lock("bench:handoff")
        await holder.acquire()
        released_at: list[float] = []
        acquired_at: list[float] = []
        most_threads = 0

        async def task() -> None:
            lock = client.lock("bench:handoff")
            await lock.acquire()
            acquired_at.append(time.perf_counter())
            released_at.append(time.perf_counter())
            await lock.release()

        tasks = [asyncio.create_task(task()) for _ in range(waiters)]
        while len(client._waits) < waiters:
            await asyncio.sleep(0.01)
        most_threads = threads_now() - base
        in_process = threads_now()
        start = time.perf_counter()
        released_at.append(time.perf_counter())
        await holder.release()
        await asyncio.gather(*tasks)
        total = time.perf_counter() - start
    lat = [a - r for r, a in zip(released_at, acquired_at)]
    return {
        "waiters": waiters,
        "threads_added_while_waiting": most_threads,
        "threads_in_process_while_waiting": in_process,
        "handoff_us_p50": round(percentile(lat, 0.5) * 1e6, 1),
        "handoff_us_p99": round(percentile(lat, 0.99) * 1e6, 1),
        "all_served_s": round(total, 3),
    }


def sync_handoff(url: str, waiters: int) -> dict[str, Any]:
    base = threads_now()
    client = redmutex.Client(url)
    holder = client.lock("bench:handoff-sync")
    holder.acquire()
    mu = threading.Lock()
    released_at: list[float] = []
    acquired_at: list[float] = []

    def worker() -> None:
        lock = client.lock("bench:handoff-sync")
        lock.acquire()
        now = time.perf_counter()
        with mu:
            acquired_at.append(now)
            released_at.append(time.perf_counter())
        lock.release()

    threads = [threading.Thread(target=worker) for _ in range(waiters)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        r = redis.Redis.from_url(url)
        subscribed = r.pubsub_numsub("redisson_lock__channel:{bench:handoff-sync}")[0][1]
        r.close()
        if subscribed and threads_now() - base >= waiters:
            break
        time.sleep(0.05)
    time.sleep(0.5)  # the last threads reach their wait
    most_threads = threads_now() - base
    in_process = threads_now()
    start = time.perf_counter()
    released_at.append(time.perf_counter())
    holder.release()
    for t in threads:
        t.join()
    total = time.perf_counter() - start
    client.close()
    lat = [a - r for r, a in zip(released_at, acquired_at)]
    return {
        "waiters": waiters,
        "threads_added_while_waiting": most_threads,
        "threads_in_process_while_waiting": in_process,
        "handoff_us_p50": round(percentile(lat, 0.5) * 1e6, 1),
        "handoff_us_p99": round(percentile(lat, 0.99) * 1e6, 1),
        "all_served_s": round(total, 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="length of one pair round (default 2)")
    parser.add_argument("--rounds", type=int, default=5, help="pair rounds per library (default 5)")
    parser.add_argument("--waiters", type=int, default=1000, help="waiting tasks/threads (default 1000)")
    parser.add_argument("--loop-ops", type=int, default=2000, help="pairs for the loop-cost figures")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="redmutex-bench-") as workdir:
        proc, port = start_redis(workdir)
        try:
            url = f"redis://127.0.0.1:{port}"
            report = {
                "pairs": asyncio.run(pairs(url, port, args.seconds, args.rounds)),
                "loop": asyncio.run(loop_cost(url, args.loop_ops)),
                "handoff_async": asyncio.run(async_handoff(url, args.waiters)),
                "handoff_sync_threads": sync_handoff(url, args.waiters),
                "redmutex_version": redmutex.__version__,
                "redis_py_version": redis.__version__,
                "python": sys.version.split()[0],
            }
        finally:
            proc.kill()
            proc.wait()
    if args.json:
        print(json.dumps(report))
        return 0
    p = report["pairs"]
    print("uncontended pairs/s (median of rounds):")
    for k, v in p["pairs_per_s"].items():
        print(f"  {k:20s} {v:8d}")
    print(
        f"  redmutex.asyncio / redis-py asyncio  {p['ratio_async_over_redis_py_asyncio']:.2f}"
        f" (median of per-round ratios {p['ratio_async_over_redis_py_asyncio_per_round_median']:.2f})"
    )
    print(f"  redmutex.asyncio / redmutex sync     {p['ratio_async_over_sync']:.2f}")
    print("event loop, per lock operation:")
    for k, v in report["loop"].items():
        if isinstance(v, dict):
            print(
                f"  {k:28s} loop CPU {v['loop_cpu_us_per_op']:6.1f} us (wall {v['wall_us_per_op']:6.1f} us);"
                f" probe stalls p50 {v['loop_stall_us_p50']:6.1f} us, p99 {v['loop_stall_us_p99']:7.1f} us,"
                f" longest {v['longest_loop_stall_us']:8.1f} us"
            )
    for k in ("handoff_async", "handoff_sync_threads"):
        h = report[k]
        print(
            f"{k}: {h['waiters']} waiters, +{h['threads_added_while_waiting']} threads"
            f" ({h['threads_in_process_while_waiting']} in the process), hand-off p50 "
            f"{h['handoff_us_p50']} us, p99 {h['handoff_us_p99']} us, all served in {h['all_served_s']} s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
