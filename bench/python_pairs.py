#!/usr/bin/env python3
"""Uncontended acquire+release pairs per second: redmutex vs redis-py Lock vs the C core.

Starts its own redis-server (Debian package) on a free loopback port without
persistence, then measures, one thread each,

  * redmutex:  ``with lock:`` on one plain lock object (watchdog lease),
  * redis-py:  ``lock.acquire(); lock.release()`` on ``redis.Redis().lock(name)``
               with redis-py's defaults otherwise, and
  * C core:    the same pair in a C loop (the bench_pairs program, built by
               CMake), when --c-bench names it,

alternating short rounds of each so that drift of the machine affects all
alike, and reports pairs/s for each and the ratios. Needs ``pip install redis``
and an installed redmutex.

    python bench/python_pairs.py [--seconds 3] [--rounds 5] [--c-bench build-rel/bench/bench_pairs] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Callable

import redis
import redmutex


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis(workdir: str) -> tuple[subprocess.Popen[bytes], int]:
    binary = shutil.which("redis-server") or "/usr/bin/redis-server"
    port = free_port()
    proc = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            workdir,
            "--logfile",
            os.path.join(workdir, "redis.log"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            if redis.Redis(port=port, socket_timeout=1).ping():
                return proc, port
        except redis.exceptions.ConnectionError:
            time.sleep(0.02)
    proc.kill()
    raise SystemExit("redis-server did not start")


def rate(pair: Callable[[], None], seconds: float) -> float:
    """Pairs per second of pair() over about `seconds`."""
    n = 0
    start = time.perf_counter()
    end = start + seconds
    while True:
        for _ in range(100):
            pair()
        n += 100
        now = time.perf_counter()
        if now >= end:
            return n / (now - start)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="length of one round (default 3)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per library (default 5)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--c-bench", help="path of the bench_pairs program (the C core's own pair)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="redmutex-bench-") as workdir:
        proc, port = start_redis(workdir)
        try:
            url = f"redis://127.0.0.1:{port}"
            client = redmutex.Client(url)
            ours = client.lock("bench:redmutex")
            theirs = redis.Redis(port=port).lock("bench:redis-py")

            def redmutex_pair() -> None:
                with ours:
                    pass

            def redispy_pair() -> None:
                theirs.acquire()
                theirs.release()

            for pair in (redmutex_pair, redispy_pair):  # warm up connections and scripts
                rate(pair, 0.3)
            results: dict[str, list[float]] = {"redmutex": [], "redis-py": []}
            rtts: list[float] = []
            if args.c_bench:
                results["c-core"] = []
            for _ in range(args.rounds):
                results["redmutex"].append(rate(redmutex_pair, args.seconds))
                results["redis-py"].append(rate(redispy_pair, args.seconds))
                if args.c_bench:
                    out = subprocess.run(
                        [args.c_bench, url, str(args.seconds)], check=True, capture_output=True, text=True
                    )
                    pairs, rtt_us = out.stdout.split()
                    results["c-core"].append(float(pairs))
                    rtts.append(float(rtt_us))
            client.close()
        finally:
            proc.kill()
            proc.wait()

    median = {k: statistics.median(v) for k, v in results.items()}
    ratio = median["redmutex"] / median["redis-py"]
    c_ratio = median["c-core"] / median["redmutex"] if "c-core" in median else None
    # A pair is two round trips plus what the client itself spends.
    rtt_us = statistics.median(rtts) if rtts else None
    own_us = {k: 1e6 / v - 2 * rtt_us for k, v in median.items()} if rtt_us else {}
    report = {
        "benchmark": "uncontended acquire+release pairs per second, 1 thread, loopback redis-server",
        "redmutex_pairs_per_s": round(median["redmutex"]),
        "redis_py_pairs_per_s": round(median["redis-py"]),
        "ratio_redmutex_over_redis_py": round(ratio, 3),
        "c_core_pairs_per_s": round(median["c-core"]) if c_ratio else None,
        "python_pair_latency_over_c_core": round(c_ratio, 3) if c_ratio else None,
        "round_trip_us": rtt_us,
        "client_cost_per_pair_us": {k: round(v, 1) for k, v in own_us.items()},
        "rounds": {k: [round(x) for x in v] for k, v in results.items()},
        "seconds_per_round": args.seconds,
        "redmutex_version": redmutex.__version__,
        "redis_py_version": redis.__version__,
        "python": sys.version.split()[0],
    }
    if args.json:
        print(json.dumps(report))
    else:
        print("redmutex `with lock:`         {:8.0f} pairs/s".format(median["redmutex"]))
        print("redis-py acquire()+release() {:8.0f} pairs/s".format(median["redis-py"]))
        print(f"ratio redmutex / redis-py    {ratio:8.2f}")
        if c_ratio:
            print("C core acquire+release      {:8.0f} pairs/s".format(median["c-core"]))
            print(f"Python pair latency / C     {c_ratio:8.2f}")
        if rtt_us:
            print(f"round trip (PING, median)   {rtt_us:8.1f} us")
            for k, v in own_us.items():
                print(f"  {k:10s} per pair = 2 round trips + {v:6.1f} us of client work")
    return 0


if __name__ == "__main__":
    sys.exit(main())
