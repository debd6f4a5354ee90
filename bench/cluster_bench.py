#!/usr/bin/env python3
"""What a Redis Cluster costs a lock, measured on this machine (not a test).

    python3 bench/cluster_bench.py [--failovers 5] [--only gap,pairs,moved,watchdog]
        [--build build-test] [--redisson bench/cluster/java]

Clusters are tests/rmcluster.py's (3 masters + 3 replicas, cluster-node-timeout
1000); the standalone server is tests/rmserver.py's. The C worker is
bench_cluster (bench/bench_cluster.c), the C core through its public API.

gap       A client takes and releases a lock every 10 ms (bench_cluster pace;
          with --redisson, Redisson 3.29 in cluster mode beside it, on a name
          with the same hash tag) while the master owning the names' slot is
          SIGKILLed, --failovers times: the cluster's own promotion (its
          replica answering ROLE master, polled every 5 ms) and each client's
          first successful acquisition after the kill.
pairs     An uncontended acquire + release pair through the cluster and on a
          standalone server, alternated turn by turn in one process: the ratio
          and the client's CPU per pair.
moved     100 names sharing one hash tag are used once, their slot is moved to
          another master, then each name takes 10 more pairs: requests sent
          and redirects followed (rm_deploy_counts), and the MOVED/ASK replies
          the masters counted (INFO errorstats). 3 moves.
watchdog  10,000 held locks over all slots (default 30 s lease, renewal every
          10 s): the client's CPU over a window, and, in a second window under
          strace, the client's socket writes per node, with each master's
          renewal script calls and read events (INFO) per renewal period.

Writes build-bench/cluster/results.json and results.md and prints the tables.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from rmcluster import Cluster, command  # noqa: E402
from rmserver import Server  # noqa: E402

TAG = "bench:pace"  # the failover names share it: one slot, one master to kill


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(p / 100 * (len(xs) - 1))))]


class Pacer:
    """A worker printing "ok T0 T1" / "err T0 T1 X" / "rel T0 T1 RC" lines; keeps them, times in ns."""

    def __init__(self, name: str, cmd: list[str]) -> None:
        self.name, self.cmd = name, cmd
        self.lines: list[tuple[str, int, int]] = []
        self.mu = threading.Lock()
        self.restarts = 0
        self._spawn()

    def _spawn(self) -> None:
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        threading.Thread(target=self._read, args=(self.proc,), daemon=True).start()

    def restart(self) -> None:
        """A worker stuck in one call (it never returned) is replaced, so the next failover is measured."""
        self.stop()
        self.restarts += 1
        self._spawn()

    def wait_ok(self, since: int, seconds: float) -> int | None:
        deadline = time.monotonic() + seconds
        while (got := self.first_ok_after(since)) is None and time.monotonic() < deadline:
            time.sleep(0.005)
        return got

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            w = line.split()
            if len(w) >= 3 and w[0] in ("ok", "err", "rel"):
                with self.mu:
                    self.lines.append((w[0], int(w[1]), int(w[2])))

    def first_ok_after(self, t: int) -> int | None:
        with self.mu:
            return next((t1 for kind, t0, t1 in self.lines if kind == "ok" and t0 >= t), None)

    def longest_call_ms(self, since: int) -> float:
        with self.mu:
            return max((t1 - t0 for _, t0, t1 in self.lines if t0 >= since), default=0) / 1e6

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


def role(port: int) -> str:
    try:
        r = command(port, "ROLE", timeout=0.5)
        return r[0].decode() if isinstance(r, list) else "?"
    except OSError:
        return "?"


def gap_series(n: int, build: Path, redisson: Path | None, min_replicas: int = -1) -> dict[str, Any]:
    with Cluster(masters=3, replicas=1) as cl:
        seeds = [f"127.0.0.1:{nd.port}" for nd in cl.nodes]
        worker = str(build / "bench" / "bench_cluster")
        pacers = [Pacer("redmutex", [worker, "pace", cl.url, f"{{{TAG}}}:redmutex", str(min_replicas)])]
        if redisson:
            cp = f"{redisson}/target/redisson-cluster-bench-1.0.0.jar:{redisson}/target/lib/*"
            pacers.append(
                Pacer(
                    "Redisson 3.29",
                    ["java", "-cp", cp, "redmutex.bench.RedissonClusterPace", f"{{{TAG}}}:redisson", *seeds],
                )
            )
        out: dict[str, Any] = {"promote_ms": [], **{p.name: {"gap_ms": [], "hung": 0} for p in pacers}}
        start = time.monotonic_ns()
        try:
            for i in range(n):
                for p in pacers:  # each is working again before the next kill
                    if p.wait_ok(time.monotonic_ns(), 20) is None:
                        p.restart()
                        if p.wait_ok(time.monotonic_ns(), 60) is None:
                            raise RuntimeError(f"{p.name} does not acquire")
                owner = cl.owner(f"{{{TAG}}}")
                rep = cl.replica_of(owner)
                if rep is None:
                    raise RuntimeError(f"master {owner} has no replica in sync")
                victim = cl.node(owner)
                t_kill = time.monotonic_ns()
                victim.kill()
                deadline = time.monotonic() + 30
                while role(rep.port) != "master":
                    if time.monotonic() > deadline:
                        raise RuntimeError("the replica was not promoted")
                    time.sleep(0.005)
                out["promote_ms"].append((time.monotonic_ns() - t_kill) / 1e6)
                for p in pacers:
                    got = p.wait_ok(t_kill, 30)
                    if got is None:  # no acquisition for 30 s after the kill: counted as never
                        out[p.name]["hung"] += 1
                        out[p.name]["gap_ms"].append(float("inf"))
                        p.restart()
                    else:
                        out[p.name]["gap_ms"].append((got - t_kill) / 1e6)
                victim.start()  # it rejoins as a replica of the promoted node
                cl.wait_ok(60)
                print(
                    f"  failover {i + 1}/{n}: promotion {out['promote_ms'][-1]:.0f} ms, "
                    + ", ".join(f"{p.name} {out[p.name]['gap_ms'][-1]:.0f} ms" for p in pacers),
                    flush=True,
                )
            for p in pacers:
                out[p.name]["longest_call_ms"] = p.longest_call_ms(start)
        finally:
            for p in pacers:
                p.stop()
    return out


PAIR_SETUPS = (
    "standalone server",
    "standalone server with 1 replica",
    "cluster node as standalone (?topology=standalone)",
    "3-master cluster (+3 replicas)",
)


def with_replica(d: str) -> tuple[Server, Server]:
    """A standalone master and one replica in sync with it (the cluster's masters have one each)."""
    master = Server(os.path.join(d, "master")).start()
    replica = Server(os.path.join(d, "replica"), conf=f"replicaof 127.0.0.1 {master.port}\n").start()
    deadline = time.monotonic() + 30
    while b"master_link_status:up" not in command(replica.port, "INFO", "replication"):
        if time.monotonic() > deadline:
            raise RuntimeError("the replica did not sync")
        time.sleep(0.05)
    return master, replica


def pairs_series(build: Path, seconds: float = 0.5, rounds: int = 16) -> dict[str, Any]:
    """Four clients take turns: a standalone server; a standalone server with a replica; the cluster
    node owning the name's slot, reached with ?topology=standalone (the same server process, without
    the client's routing); the cluster through its seed list."""
    with Cluster(
        masters=3, replicas=1
    ) as cl, tempfile.TemporaryDirectory() as d, tempfile.TemporaryDirectory() as d2:
        srv = Server(d).start()
        master, replica = with_replica(d2)
        owner = cl.owner("bench:pairs")
        urls = [srv.url, master.url, f"redis://127.0.0.1:{owner}/0?topology=standalone", cl.url]
        try:
            r = subprocess.run(
                [str(build / "bench" / "bench_cluster"), "pairs", str(seconds), str(rounds), *urls],
                capture_output=True,
                text=True,
                check=True,
            )
        finally:
            for x in (srv, master, replica):
                x.stop()
    turns: list[list[tuple[float, float]]] = [[] for _ in urls]
    for line in r.stdout.splitlines():
        _, who, n, ns, cpu = line.split()
        turns[int(who)].append((int(n) / (int(ns) / 1e9), int(cpu) / int(n) / 1000))
    rate = [statistics.median(x[0] for x in v) for v in turns]
    cpu = [statistics.median(x[1] for x in v) for v in turns]
    out: dict[str, Any] = {
        "setups": list(PAIR_SETUPS),
        "pairs_per_s": rate,
        "cpu_us_per_pair": cpu,
        "rounds": rounds,
        "seconds": seconds,
        "ratios": {},
    }
    # Per round: how much longer a pair takes through the cluster than on each reference.
    for ref in range(3):
        rs = [s[0] / c[0] for s, c in zip(turns[ref], turns[3])]
        out["ratios"][PAIR_SETUPS[ref]] = {"median": statistics.median(rs), "min": min(rs), "max": max(rs)}
    return out


def errorstat(port: int, what: str) -> int:
    info = command(port, "INFO", "errorstats")
    m = re.search(rf"errorstat_{what}:count=(\d+)".encode(), info if isinstance(info, bytes) else b"")
    return int(m.group(1)) if m else 0


def rejected(port: int) -> dict[str, int]:
    """Calls a node refused before running them (MOVED, ASK...), by command."""
    cs = command(port, "INFO", "commandstats")
    return {k.decode(): int(v) for k, v in re.findall(rb"cmdstat_([^:]+):.*?rejected_calls=(\d+)", cs)}


def moved_series(build: Path, moves: int = 3, names: int = 100, per_name: int = 10) -> dict[str, Any]:
    res: list[dict[str, Any]] = []
    with Cluster(masters=3, replicas=1) as cl:
        tag = "bench:mv"
        slot = command(cl.any_port(), "CLUSTER", "KEYSLOT", f"{{{tag}}}")
        for _ in range(moves):
            w = subprocess.Popen(
                [str(build / "bench" / "bench_cluster"), "moved", cl.url, tag, str(names), str(per_name)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            assert w.stdin and w.stdout
            assert w.stdout.readline().strip() == "ready"
            masters = cl.master_ports()
            frm = cl.owner(f"{{{tag}}}")
            to = next(p for p in masters if p != frm)
            cl.migrate(slot, to)
            cl.wait_ok(30)
            m0 = sum(errorstat(p, "MOVED") + errorstat(p, "ASK") for p in masters)
            r0 = [rejected(p) for p in masters]
            w.stdin.write("go\n")
            w.stdin.flush()
            _, calls, reqs, redirects, refreshes = w.stdout.readline().split()
            w.wait(30)
            m1 = sum(errorstat(p, "MOVED") + errorstat(p, "ASK") for p in masters)
            rej: dict[str, int] = {}
            for p, before in zip(masters, r0):
                for k, v in rejected(p).items():
                    if v - before.get(k, 0):
                        rej[k] = rej.get(k, 0) + v - before.get(k, 0)
            row = {
                "calls": int(calls),
                "requests": int(reqs),
                "redirects": int(redirects),
                "refreshes": int(refreshes),
                "server_moved_ask": m1 - m0,
                "rejected_by_command": rej,  # type: ignore[dict-item]
            }
            res.append(row)
            print(f"  slot {slot} moved {frm} -> {to}: {row}", flush=True)
    return {"names": names, "per_name": per_name, "moves": res}


def socket_peers(pid: int) -> dict[int, int]:
    """fd -> remote port of the process's TCP sockets (from /proc)."""
    inode_port: dict[str, int] = {}
    for f in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            for line in Path(f).read_text().splitlines()[1:]:
                w = line.split()
                inode_port[w[9]] = int(w[2].rsplit(":", 1)[1], 16)
        except OSError:
            pass
    out = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        m = re.match(r"socket:\[(\d+)\]", link)
        if m and m.group(1) in inode_port:
            out[int(fd)] = inode_port[m.group(1)]
    return out


def node_counts(port: int) -> tuple[int, int]:
    """A master's renewal script calls (EVAL + EVALSHA) and read events processed so far."""
    cs = command(port, "INFO", "commandstats")
    calls = sum(int(x) for x in re.findall(rb"cmdstat_eval(?:sha)?:calls=(\d+)", cs))
    st = command(port, "INFO", "stats")
    m = re.search(rb"total_reads_processed:(\d+)", st)
    return calls, int(m.group(1)) if m else -1


def watchdog_series(build: Path, locks: int = 10000, seconds: float = 20.0) -> dict[str, Any]:
    with Cluster(masters=3, replicas=1) as cl:
        w = subprocess.Popen(
            [str(build / "bench" / "bench_cluster"), "watchdog", cl.url, str(locks), str(seconds)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert w.stdin and w.stdout
        try:
            assert w.stdout.readline().strip() == "held"
            masters = cl.master_ports()
            keys = {p: 0 for p in masters}
            for p in masters:
                keys[p] = int(command(p, "DBSIZE"))
            # Window 1: CPU, untraced.
            w.stdin.write("go\n")
            w.stdin.flush()
            _, cpu, ns, renewed, lost = w.stdout.readline().split()
            cpu_pct = 100 * int(cpu) / int(ns)
            periods1 = int(renewed) / locks
            # Window 2: the same under strace, for the writes per node.
            before = {p: node_counts(p) for p in masters}
            trace = Path(tempfile.mkstemp(prefix="clbench-strace-")[1])
            tids = os.listdir(f"/proc/{w.pid}/task")
            st = subprocess.Popen(
                ["strace", "-f", "-qq", "-e", "trace=write,writev,sendto,sendmsg", "-e", "signal=none"]
                + ["-s", "0"]
                + ["-o", str(trace)]
                + [a for t in tids for a in ("-p", t)],
                stderr=subprocess.DEVNULL,
            )
            time.sleep(1.0)  # attached
            w.stdin.write("go\n")
            w.stdin.flush()
            _, _, _, renewed2, lost2 = w.stdout.readline().split()
            peers = socket_peers(w.pid)
            st.send_signal(signal.SIGINT)
            st.wait(10)
            after = {p: node_counts(p) for p in masters}
            periods2 = int(renewed2) / locks
            writes = {p: 0 for p in masters}
            sizes: dict[int, list[int]] = {p: [] for p in masters}
            for line in trace.read_text().splitlines():
                m = re.search(r"(?:write|writev|sendto|sendmsg)\((\d+),.*= (-?\d+)", line)
                if m and peers.get(int(m.group(1))) in writes:
                    writes[peers[int(m.group(1))]] += 1
                    sizes[peers[int(m.group(1))]].append(int(m.group(2)))
            trace.unlink()
            w.stdin.write("quit\n")
            w.stdin.flush()
            w.wait(120)
        finally:
            if w.poll() is None:
                w.kill()
    per = max(periods2, 1e-9)
    return {
        "locks": locks,
        "seconds": seconds,
        "cpu_pct": cpu_pct,
        "periods_cpu_window": periods1,
        "lost": int(lost) + int(lost2),
        "periods_traced": periods2,
        "nodes": {
            str(p): {
                "locks_on_node": keys[p],
                "socket_writes_per_period": writes[p] / per,
                "write_sizes": sizes[p][:20],
                "scripts_per_period": (after[p][0] - before[p][0]) / per,
                "server_reads_per_period": (after[p][1] - before[p][1]) / per,
            }
            for p in masters
        },
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--failovers", type=int, default=5)
    ap.add_argument("--only", default="pairs,moved,watchdog,gap")
    ap.add_argument("--build", default=str(ROOT / "build-test"))
    ap.add_argument("--redisson", default=None, help="a built bench/cluster/java (mvn package)")
    ap.add_argument("--watchdog-seconds", type=float, default=20.0)
    ap.add_argument("--watchdog-locks", type=int, default=10000)
    ap.add_argument("--pairs-seconds", type=float, default=0.5, help="one turn of the pairs series")
    ap.add_argument("--pairs-rounds", type=int, default=16)
    ap.add_argument("--min-replicas", type=int, default=-1, help="the gap series' redmutex client")
    a = ap.parse_args()
    only = a.only.split(",")
    build = Path(a.build)
    outdir = ROOT / "build-bench" / "cluster"
    outdir.mkdir(parents=True, exist_ok=True)
    res: dict[str, Any] = {"load": os.getloadavg(), "min_replicas": a.min_replicas}
    for what in only:
        print(f"{what} (load average {os.getloadavg()[0]:.1f})", flush=True)
        res.setdefault("load_at", {})[what] = os.getloadavg()[0]
        if what == "gap":
            res["gap"] = gap_series(
                a.failovers, build, Path(a.redisson).resolve() if a.redisson else None, a.min_replicas
            )
        elif what == "pairs":
            res["pairs"] = pairs_series(build, a.pairs_seconds, a.pairs_rounds)
        elif what == "moved":
            res["moved"] = moved_series(build)
        elif what == "watchdog":
            res["watchdog"] = watchdog_series(build, a.watchdog_locks, a.watchdog_seconds)
        print(f"  {json.dumps(res[what])[:600]}", flush=True)
        (outdir / "results.json").write_text(json.dumps(res, indent=1))
    md = report(res)
    (outdir / "results.md").write_text(md)
    print(md)
    return 0


def report(res: dict[str, Any]) -> str:
    lines = [f"load average: {', '.join(f'{k} {v:.1f}' for k, v in res.get('load_at', {}).items())}", ""]
    if "gap" in res:
        g = res["gap"]
        pr = g["promote_ms"]
        lines += [
            f"| over {len(pr)} SIGKILLs of the names' master | p50 | max | longest call |",
            "|---|---|---|---|",
            f"| the cluster's own promotion | {pct(pr, 50):.0f} ms | {max(pr):.0f} ms | |",
        ]
        for name, v in g.items():
            if name == "promote_ms":
                continue
            gaps = v["gap_ms"]
            excess = [x - s for x, s in zip(gaps, pr)]
            hung = f" ({v['hung']} with none for 30 s)" if v["hung"] else ""
            lines.append(
                f"| {name}: first acquisition after the kill{hung} | {pct(gaps, 50):.0f} ms"
                f" | {max(gaps):.0f} ms | {v.get('longest_call_ms', 0):.0f} ms |"
            )
            lines.append(
                f"| {name}: beyond the promotion | {pct(excess, 50):.0f} ms | {max(excess):.0f} ms | |"
            )
        lines.append("")
    if "pairs" in res:
        p = res["pairs"]
        lines += [
            f"| uncontended pair, {p['rounds']} rounds of alternated {p['seconds']} s turns"
            " | pairs/s (median) | client CPU per pair |",
            "|---|---|---|",
        ]
        for name, r, c in zip(p["setups"], p["pairs_per_s"], p["cpu_us_per_pair"]):
            lines.append(f"| {name} | {r:.0f} | {c:.1f} µs |")
        for ref, v in p["ratios"].items():
            lines.append(
                f"| time per pair, cluster / {ref} (median of rounds) | x{v['median']:.3f}"
                f" (rounds {v['min']:.2f}-{v['max']:.2f}) | |"
            )
        lines.append("")
    if "moved" in res:
        m = res["moved"]
        lines += [
            f"| slot moved, then {m['names']} names x {m['per_name']} pairs | calls | requests"
            " | redirects followed | MOVED+ASK sent by the masters | topology refreshes |",
            "|---|---|---|---|---|---|",
        ]
        for i, r in enumerate(m["moves"]):
            lines.append(
                f"| move {i + 1} | {r['calls']} | {r['requests']} | {r['redirects']}"
                f" | {r['server_moved_ask']} | {r['refreshes']} |"
            )
        lines.append("")
    if "watchdog" in res:
        w = res["watchdog"]
        lines += [
            f"{w['locks']} held locks, default lease: client CPU {w['cpu_pct']:.2f} % of a core over"
            f" {w['seconds']:.0f} s ({w['periods_cpu_window']:.1f} renewal periods); {w['lost']} lost",
            "",
            "| master | locks on it | client socket writes per period | renewal scripts per period"
            " | server read events per period |",
            "|---|---|---|---|---|",
        ]
        for port, v in w["nodes"].items():
            lines.append(
                f"| {port} | {v['locks_on_node']} | {v['socket_writes_per_period']:.1f}"
                f" | {v['scripts_per_period']:.0f} | {v['server_reads_per_period']:.0f} |"
            )
        lines.append("")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
