"""tests/chaos/run: builds the drivers, runs the scenarios of a profile, prints
the report table, and exits non-zero when a scenario's expectation fails."""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

from . import cluster_rows, model, report, scenarios
from .drivers import Toolchain
from .faults import Partitions
from .scenario import FULL, QUICK, Env, Row

ROOT = Path(__file__).resolve().parents[3]
CHAOS = ROOT / "tests" / "chaos"

ALL = [
    "S0",
    "S1",
    "S2",
    "S3",
    "S4",
    "S5",
    "S6",
    "S7",
    "S8",
    "S10",
    "S11",
    "S12",
    "S13",
    "S14",
    "S15",
    "S16",
    "S17",
    "S18",
    "S19",
    "S20",
    "S21",
    "S22",
    "K1",  # Redis Cluster rows (chaoslib/cluster_rows.py): failover, migration, a master cut off
    "K2",
    "K3",
    "K4",
    "M1",  # the model-based property test of the TTL rule (chaoslib/model.py): full profile only
]
QUICK_SET = ["S0", "S1", "S4", "S5", "S6", "S7", "S14", "S15", "S16", "S17", "S18", "S22", "K2", "K3"]


def build_drivers(build_dir: Path) -> Toolchain:
    if not (build_dir / "build.ninja").exists():
        subprocess.run(
            [
                "cmake",
                "-S",
                str(ROOT),
                "-B",
                str(build_dir),
                "-G",
                "Ninja",
                "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
                "-DREDMUTEX_WERROR=ON",
                "-DREDMUTEX_BUILD_BENCH=OFF",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    subprocess.run(
        ["ninja", "-C", str(build_dir), "chaos_driver", "chaos_malloc_shim"],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return Toolchain(
        c_driver=build_dir / "tests" / "chaos" / "chaos_driver",
        python=Path(sys.executable),
        py_driver=CHAOS / "pydriver.py",
        malloc_shim=build_dir / "tests" / "chaos" / "libchaos_malloc_shim.so",
    )


def imports_redmutex(python: Path) -> bool:
    return subprocess.run([str(python), "-c", "import redmutex"], capture_output=True).returncode == 0


def find_python(explicit: str | None) -> Path:
    """An interpreter that can import the redmutex package (for the Python driver)."""
    candidates = [
        explicit,
        os.environ.get("REDMUTEX_CHAOS_PYTHON"),
        str(ROOT / "build-venv" / "bin" / "python"),
        str(ROOT / "build-chaos-venv" / "bin" / "python"),
    ]
    for c in candidates:
        if c and Path(c).exists() and imports_redmutex(Path(c)):
            return Path(c)
    venv = ROOT / "build-chaos-venv"
    print(f"chaos: installing the redmutex package into {venv}", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "-q", str(ROOT)], check=True)
    return py


def run_scenarios(env: Env, ids: list[str]) -> list[Row]:
    rows: list[Row] = []
    for sid in ids:
        fn = getattr(scenarios, sid.lower(), None) or getattr(cluster_rows, sid.lower(), None)
        fn = fn or getattr(model, sid.lower())
        t0 = time.monotonic()
        print(f"chaos: {sid} ...", flush=True)
        for row in fn(env):
            rows.append(row)
            extra = f" - {'; '.join(row.reasons)}" if row.reasons else ""
            print(
                f"chaos: {row.scenario} [{row.mode}] {row.verdict} ({row.duration_s:.0f} s){extra}",
                flush=True,
            )
        if env.verbose:
            print(f"chaos: {sid} took {time.monotonic() - t0:.0f} s", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="tests/chaos/run", description=__doc__)
    prof = ap.add_mutually_exclusive_group()
    prof.add_argument("--quick", action="store_true", help="the CI profile (default)")
    prof.add_argument(
        "--full", action="store_true", help="every scenario at 1.5 s leases, and the TTL model (M1)"
    )
    ap.add_argument("--seed", type=int, help="replay the fault schedules of this seed")
    ap.add_argument("--only", help="comma-separated scenario ids, e.g. S7,S14")
    ap.add_argument("--workdir", type=Path, help="histories and logs (default build-chaos/runs/<seed>)")
    ap.add_argument("--build-dir", type=Path, default=ROOT / "build-chaos")
    ap.add_argument("--python", help="interpreter with the redmutex package for the Python driver")
    ap.add_argument("--report", type=Path, help="also write the table (markdown) here")
    ap.add_argument("--verbose", "-v", action="store_true")
    args = ap.parse_args(argv)

    if os.geteuid() != 0:
        print("chaos: warning: not root; partitions (nft) and uid switching need root", flush=True)
    profile = FULL if args.full else QUICK
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 10**6)
    ids = (
        [s.strip().upper() for s in args.only.split(",")] if args.only else (ALL if args.full else QUICK_SET)
    )
    unknown = [s for s in ids if s not in ALL]
    if unknown:
        ap.error(f"unknown scenario ids: {', '.join(unknown)} (known: {', '.join(ALL)})")

    args.build_dir = args.build_dir.resolve()  # redis-server chdirs into its --dir
    tools = build_drivers(args.build_dir)
    tools.python = find_python(args.python)
    workdir = (args.workdir or args.build_dir / "runs" / f"{profile.name}-{seed}").resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    nft = Partitions.probe()
    env = Env(tools, workdir, profile, seed, nft, args.verbose)
    started = time.time()
    print(
        f"chaos: profile {profile.name}, seed {seed} (replay: tests/chaos/run --{profile.name} --seed {seed}"
        f"{' --only ' + args.only if args.only else ''}); histories in {workdir}",
        flush=True,
    )
    if not nft.ok:
        print(f"chaos: partitions unavailable: {nft.reason}", flush=True)

    rows = run_scenarios(env, ids)
    took = time.time() - started
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started))
    command = f"tests/chaos/run --{profile.name} --seed {seed}" + (
        f" --only {args.only}" if args.only else ""
    )
    text = report.table(rows)
    print()
    print(text)
    print()
    det = report.details(rows)
    if det:
        print(det)
    failed = [r for r in rows if r.verdict == "FAIL"]
    skipped = [r for r in rows if r.verdict == "SKIP"]
    known = [r for r in rows if r.verdict in ("XFAIL", "XPASS")]
    passed = len(rows) - len(failed) - len(skipped) - len(known)
    gaps = ", ".join(f"{r.scenario} [{r.mode}] {r.verdict}" for r in known) or "-"
    summary = (
        f"chaos: {passed} passed, {len(failed)} failed, {len(skipped)} skipped, "
        f"{len(known)} known gaps ({gaps}) in {took / 60:.1f} min"
    )
    header = f"`{command}` — {date}, {took / 60:.1f} min, seed {seed}\n\n"
    (workdir / "report.md").write_text(header + text + "\n\n```\n" + det + "\n```\n")
    (workdir / "report.json").write_text(json.dumps([r.to_json() for r in rows], indent=1, default=str))
    if args.report:
        args.report.write_text(header + text + "\n")
    print(
        f"{passed} passed, {len(failed)} failed"
        + (f", {len(skipped)} skipped" if skipped else "")
        + (f", {len(known)} xfailed" if known else "")
    )
    print(summary.replace("chaos: ", "chaos: summary: "))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
