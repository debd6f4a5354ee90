#!/usr/bin/env python3
"""Uncontended acquire+release pairs per second: each SWIG binding's scoped form vs the C core.

Starts its own redis-server (Debian package) on a free loopback port without
persistence, then measures, one process each, in alternating rounds (so that
drift of the machine affects all alike):

  * C core:  bench_pairs, acquire+release of one plain lock (watchdog lease),
  * Ruby:    lock.synchronize {}          (bench/bindings/pair.rb)
  * Perl:    with_lock {} $lock           (bench/bindings/pair.pl)
  * Tcl:     redmutex::with_lock $lock {} (bench/bindings/pair.tcl)
  * Lua:     lock:with(function() end)    (bench/bindings/pair.lua)

and reports each language's median pairs/s, and its time per pair relative to
the C core's: per round against the C round just before it (so that both saw
the same load), the median over the rounds (target <= 1.3x); also the best
round of each series. Needs a build with the bindings and the benchmarks:

    cmake -S . -B build-rel -G Ninja -DCMAKE_BUILD_TYPE=Release -DREDMUTEX_BINDINGS="ruby;perl;tcl;lua"
    ninja -C build-rel
    python3 bench/bindings_pairs.py --build build-rel [--seconds 2] [--rounds 5] [--json]

Only the Python standard library is used.
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

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


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
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    return proc, port
        except OSError:
            time.sleep(0.02)
    proc.kill()
    raise SystemExit("redis-server did not start")


def series(build: str) -> dict[str, tuple[list[str], dict[str, str]]]:
    """Command and environment of each series, from the build tree's layout."""
    b = os.path.join(build, "bindings")
    src = os.path.join(ROOT, "bindings")
    lua_env = {
        "LUA_PATH": f"{src}/lua/?.lua;;",
        "LUA_CPATH": f"{b}/lua/?.so;;",
    }
    return {
        "C core": ([os.path.join(build, "bench", "bench_pairs")], {}),
        "Ruby": (["ruby", f"{HERE}/bindings/pair.rb"], {"RUBYLIB": f"{src}/ruby:{b}/ruby"}),
        "Perl": (["perl", f"{HERE}/bindings/pair.pl"], {"PERL5LIB": f"{b}/perl/lib"}),
        "Tcl": (["tclsh", f"{HERE}/bindings/pair.tcl"], {"TCLLIBPATH": f"{b}/tcl"}),
        "Lua": (["lua5.4", f"{HERE}/bindings/pair.lua"], lua_env),
    }


def run(command: list[str], env: dict[str, str], url: str, seconds: float) -> float:
    out = subprocess.run(
        [*command, url, str(seconds)], env={**os.environ, **env}, check=True, capture_output=True, text=True
    ).stdout
    return float(out.split()[0])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", required=True, help="build directory with the bindings and bench_pairs")
    parser.add_argument("--seconds", type=float, default=2.0, help="length of one round (default 2)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per series (default 5)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    build = os.path.abspath(args.build)
    all_series = series(build)

    with tempfile.TemporaryDirectory(prefix="redmutex-bench-") as workdir:
        proc, port = start_redis(workdir)
        try:
            url = f"redis://127.0.0.1:{port}"
            results: dict[str, list[float]] = {name: [] for name in all_series}
            for _ in range(args.rounds):
                for name, (command, env) in all_series.items():
                    results[name].append(run(command, env, url, args.seconds))
        finally:
            proc.terminate()
            proc.wait()

    c_rounds = results["C core"]
    report = {}
    for name, values in results.items():
        report[name] = {
            "pairs_per_s": round(statistics.median(values)),
            "us_per_pair": round(1e6 / statistics.median(values), 1),
            "per_pair_vs_c": round(statistics.median(c / v for c, v in zip(c_rounds, values)), 3),
            "best_vs_best_c": round(max(c_rounds) / max(values), 3),
            "rounds": [round(v) for v in values],
        }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"{'series':8} {'pairs/s':>8} {'µs/pair':>8} {'vs C':>6} {'best':>6}   rounds")
        for name, r in report.items():
            print(
                f"{name:8} {r['pairs_per_s']:8} {r['us_per_pair']:8} {r['per_pair_vs_c']:5}x "
                f"{r['best_vs_best_c']:5}x   {r['rounds']}"
            )
    return 0 if all(r["per_pair_vs_c"] <= 1.3 for r in report.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
