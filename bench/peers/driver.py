#!/usr/bin/env python3
"""redmutex against the lock libraries people use instead, on the same Redis servers, in one run.

bench/peers/run builds or installs every peer and then runs this program; it
needs nothing but the standard library. It starts its own redis-servers (Debian
package) on free loopback ports, starts long-lived peer programs (one per
language, several copies for the multi-process series) and runs five series,
each interleaved in short alternating blocks so that drifts of the machine hit
every library alike:

  pairs     uncontended acquire+release pairs/s on one server, one thread, and
            client CPU per pair (getrusage of the peer process); floors in the
            same rounds: raw PING, raw SET NX PX + DEL, and for each redmutex
            kind the same commands redmutex sends, raw on hiredis
  redlock   the same pair on N = 5 servers (same rounds as `pairs`), against the
            library's own one-server pair and, for redmutex, the same commands
            sent raw to the 5 servers at once, each step waiting for a majority
  contend   8 worker processes per library, one lock, 1 ms critical section:
            utilisation, hand-off latency (in round trips measured meanwhile),
            fewest / most acquisitions per worker
  wake      a waiter blocked on a lock another process holds: from the holder's
            release returning to the waiter's acquire returning
  hold      1000 locks held for 30 s where the library renews leases itself:
            commands the server ran meanwhile (INFO commandstats), per renewal period

Peer protocol (stdin/stdout, one line each way; times are CLOCK_MONOTONIC ns):

  pairs LIB NAME SECONDS URL...               -> ok PAIRS WALL_NS CPU_NS
  contend LIB NAME START END HOLD_US URL      -> ok FAILURES (ACQUIRED RELEASE_CALLED RELEASED)...
  acquire LIB NAME URL                        -> started T, then ok T_ACQUIRED
  release LIB NAME URL                        -> ok T_CALLED T_RETURNED
  hold LIB NAME COUNT URL                     -> held
  unhold LIB NAME URL                         -> ok CPU_NS_WHILE_HELD LOST
  rtt SECONDS URL [PAUSE_US]                  -> ok COUNT MEDIAN_NS   (C peer only)

    driver.py --build DIR [--quick] [--only SERIES,...]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import queue
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

# ---- redis-servers and a minimal RESP client ------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def resp(port: int, *args: str):
    """One command on a fresh connection; returns the decoded reply."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        out = f"*{len(args)}\r\n" + "".join(f"${len(a.encode())}\r\n{a}\r\n" for a in args)
        s.sendall(out.encode())
        f = s.makefile("rb")
        line = f.readline()
        kind, rest = line[:1], line[1:-2]
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else f.read(n + 2)[:-2].decode()
        if kind == b":":
            return int(rest)
        if kind == b"-":
            raise RuntimeError(rest.decode())
        return rest.decode()


class RedisServer:
    def __init__(self, workdir: str):
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}"
        d = os.path.join(workdir, f"redis-{self.port}")
        os.makedirs(d)
        self.proc = subprocess.Popen(
            [
                shutil.which("redis-server") or "/usr/bin/redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                d,
                "--logfile",
                os.path.join(d, "log"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while True:
            try:
                if resp(self.port, "PING") == "PONG":
                    return
            except OSError:
                if time.monotonic() > deadline:
                    raise SystemExit("redis-server did not start") from None
                time.sleep(0.02)

    def commandstats(self) -> dict[str, int]:
        calls = {}
        for line in resp(self.port, "INFO", "commandstats").splitlines():
            if line.startswith("cmdstat_"):
                name, fields = line[8:].split(":", 1)
                calls[name] = int(fields.split("calls=")[1].split(",")[0])
        return calls

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


class Monitor:
    """Counts the commands clients send to a server (MONITOR), apart from those scripts run."""

    def __init__(self, server: RedisServer):
        self.sock = socket.create_connection(("127.0.0.1", server.port))
        self.sock.sendall(b"*1\r\n$7\r\nMONITOR\r\n")
        self.counting = False
        self.calls: dict[str, int] = {}
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        f = self.sock.makefile("rb")
        for line in f:
            # +1700000000.123456 [0 127.0.0.1:5555] "evalsha" ...   (scripts' calls say [0 lua])
            if not self.counting or b'] "' not in line or b" lua] " in line:
                continue
            cmd = line.split(b'] "', 1)[1].split(b'"', 1)[0].decode().lower()
            self.calls[cmd] = self.calls.get(cmd, 0) + 1

    def close(self) -> None:
        self.sock.close()


# ---- peer programs ----------------------------------------------------------------------


class Peer:
    """A long-lived peer program; replies are read by a thread into a queue."""

    def __init__(self, argv: list[str], log: str, cwd: str | None = None):
        self.argv = argv
        self.log = open(log, "w")  # noqa: SIM115 (open while the peer runs; closed in stop())
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            bufsize=1,
            cwd=cwd,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def send(self, line: str) -> None:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def recv(self, timeout: float = 120) -> list[str]:
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise SystemExit(f"{self.argv[0]}: no answer within {timeout} s (log: {self.log.name})") from None
        if line is None:
            raise SystemExit(f"{self.argv[0]} exited (log: {self.log.name})")
        return line.split()

    def call(self, line: str, timeout: float = 120) -> list[str]:
        self.send(line)
        return self.recv(timeout)

    def stop(self) -> None:
        try:
            self.send("quit")
            self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()


# What each library is, in which language, and which series it can run.
LIBS = {
    # key: (language, label, version key, series)
    "floor:ping": ("c", "round trip: raw PING (hiredis)", "hiredis", {"pairs"}),
    "floor:2rt": ("c", "floor: raw SET NX PX + DEL (hiredis)", "hiredis", {"pairs"}),
    "floor:lock": (
        "c",
        "floor: redmutex plain lock's commands, raw (hiredis)",
        "hiredis",
        {"pairs", "redlock"},
    ),
    "floor:rlock": ("c", "floor: redmutex reentrant lock's commands, raw (hiredis)", "hiredis", {"pairs"}),
    "redmutex:lock": (
        "c",
        "redmutex C, plain lock",
        "redmutex",
        {"pairs", "redlock", "contend", "wake", "hold"},
    ),
    "redmutex:rlock": ("c", "redmutex C, reentrant lock", "redmutex", {"pairs", "contend", "wake"}),
    "redmutex:fair": ("c", "redmutex C, fair lock", "redmutex", {"scale"}),
    "py:redmutex:lock": (
        "py",
        "redmutex Python, `with client.lock(name):`",
        "redmutex",
        {"pairs", "redlock", "contend", "wake", "hold"},
    ),
    "py:redis-py": (
        "py",
        "redis-py `Lock` (defaults: sleep 0.1 s)",
        "redis-py",
        {"pairs", "contend", "wake"},
    ),
    "py:redis-py:tuned": ("py", "redis-py `Lock`, tuned: sleep 0.005 s", "redis-py", {"contend", "wake"}),
    "py:pottery": (
        "py",
        "pottery `Redlock` (defaults: retry after U(0, 0.2) s)",
        "pottery",
        {"pairs", "redlock", "contend", "wake"},
    ),
    "py:pottery:tuned": (
        "py",
        "pottery `Redlock`, tuned: retry after U(0, 0.01) s",
        "pottery",
        {"contend", "wake"},
    ),
    "py:python-redis-lock": (
        "py",
        "python-redis-lock (defaults: waits on BLPOP)",
        "python-redis-lock",
        {"pairs", "contend", "wake", "hold"},
    ),
    "java:redisson": (
        "java",
        "Redisson `RLock` (defaults)",
        "redisson",
        {"pairs", "redlock", "contend", "wake", "hold"},
    ),
    "go:redsync": (
        "go",
        "go-redsync (defaults: 32 tries, retry after 50-250 ms)",
        "redsync",
        {"pairs", "redlock", "contend", "wake"},
    ),
    "go:redsync:tuned": (
        "go",
        "go-redsync, tuned: retry after 5 ms, unlimited tries",
        "redsync",
        {"contend", "wake"},
    ),
    "node:node-redlock": (
        "node",
        "node-redlock v5 (defaults: 10 retries, 200 ± 100 ms)",
        "redlock",
        {"pairs", "redlock", "contend", "wake", "hold"},
    ),
    "node:node-redlock:tuned": (
        "node",
        "node-redlock v5, tuned: retry after 5 ± 5 ms, unlimited",
        "redlock",
        {"contend", "wake"},
    ),
    "node:sesame-redlock": (
        "node",
        "@sesamecare-oss/redlock (defaults as node-redlock)",
        "sesame",
        {"pairs", "redlock", "contend", "wake", "hold"},
    ),
    "node:sesame-redlock:tuned": (
        "node",
        "@sesamecare-oss/redlock, tuned as node-redlock",
        "sesame",
        {"contend", "wake"},
    ),
}


def wire_lib(key: str) -> str:
    """The library name the peer program knows (without the language prefix)."""
    lang = LIBS[key][0]
    return key if lang == "c" else key.split(":", 1)[1]


class Peers:
    def __init__(self, build: str, logdir: str, copies: dict[str, int]):
        venv_py = os.path.join(build, "venv", "bin", "python")
        here = os.path.dirname(os.path.abspath(__file__))
        argv = {
            "c": [os.path.join(build, "c", "bench", "peer_c")],
            "py": [venv_py, os.path.join(here, "peer_py.py")],
            "java": [
                "java",
                "-Xmx512m",
                "-cp",
                os.path.join(build, "java", "target", "classes")
                + ":"
                + os.path.join(build, "java", "target", "lib", "*"),
                "redmutex.bench.RedissonPeer",
            ],
            "go": [os.path.join(build, "go", "peer_go")],
            "node": ["node", os.path.join(build, "node", "peer.mjs")],
        }
        self.copies = {
            lang: [Peer(argv[lang], os.path.join(logdir, f"{lang}-{i}.log")) for i in range(n)]
            for lang, n in copies.items()
        }

    def of(self, key: str, i: int = 0) -> Peer:
        return self.copies[LIBS[key][0]][i]

    def stop(self) -> None:
        for ps in self.copies.values():
            for p in ps:
                p.stop()


# ---- series -------------------------------------------------------------------------------


def pct(v: list[float], q: float) -> float:
    v = sorted(v)
    return v[min(len(v) - 1, round(q / 100 * (len(v) - 1)))]


def run_pairs(peers: Peers, servers: list[RedisServer], rounds: int, block: float) -> dict:
    """Single-server and 5-server pairs, all series alternating block by block."""
    one, five = [servers[0].url], [s.url for s in servers[:5]]
    series = [(k, one) for k, v in LIBS.items() if "pairs" in v[3] and k != "floor:ping"]
    series += [(k, five) for k, v in LIBS.items() if "redlock" in v[3]]
    results = {f"{k}@{len(u)}": {"rate": [], "cpu_us": [], "n": 0} for k, u in series}
    rtts = []
    print(f"pairs: {len(series)} series, {rounds} rounds of {block} s blocks", flush=True)
    for r in range(rounds + 1):  # round 0 warms up (JIT, connections, script caches)
        order = series[:]
        random.shuffle(order)
        for k, urls in order:
            p = peers.of(k)
            _, n, wall, cpu = p.call(
                f"pairs {wire_lib(k)} bench:pair:{k}@{len(urls)} {block} {' '.join(urls)}"
            )
            if r == 0:
                continue
            res = results[f"{k}@{len(urls)}"]
            res["rate"].append(int(n) / (int(wall) / 1e9))
            res["cpu_us"].append(int(cpu) / 1e3 / int(n))
            res["n"] += int(n)
        _, _, rtt = peers.of("floor:ping").call(f"rtt {block / 2} {servers[0].url}")
        if r:
            rtts.append(int(rtt) / 1e3)
        print(f"  round {r}/{rounds} done", flush=True)
    # Ratios per round (same round = same machine state), then their median.
    out = {"rtt_us": statistics.median(rtts), "rtt_us_rounds": rtts, "series": {}}
    for name, res in results.items():
        k, n = name.rsplit("@", 1)
        entry = {
            "pairs_per_s": statistics.median(res["rate"]),
            "cpu_us_per_pair": statistics.median(res["cpu_us"]),
            "rates": [round(x) for x in res["rate"]],
            "pairs": res["n"],
        }

        def ratio(base: str, rates: list[float] = res["rate"]) -> float:
            return statistics.median(b / a for a, b in zip(rates, results[base]["rate"]))

        entry["vs_2rt"] = ratio("floor:2rt@1") if n == "1" else None
        if k in ("redmutex:lock", "py:redmutex:lock"):
            entry["vs_same_floor"] = ratio(f"floor:lock@{n}")
        if k == "redmutex:rlock":
            entry["vs_same_floor"] = ratio("floor:rlock@1")
        if n == "5" and f"{k}@1" in results:
            entry["vs_own_one_server"] = ratio(f"{k}@1")
        if n == "1" and k == "py:redmutex:lock":
            entry["vs_c_core"] = ratio("redmutex:lock@1")
        if n == "1" and k.startswith("py:") and "py:redmutex:lock@1" in results and k != "py:redmutex:lock":
            entry["redmutex_py_over_this"] = statistics.median(
                a / b for a, b in zip(results["py:redmutex:lock@1"]["rate"], res["rate"])
            )
        out["series"][name] = entry
    return out


def contention_metrics(
    events: list[tuple[int, int, int, int]], end: int, rtt_ns: float, workers: int
) -> dict:
    events = sorted(e for e in events if e[0] < end)
    per = [0] * workers
    held = 0
    handoff, to_other = [], []
    violations = 0
    for i, (acq, _, reldone, w) in enumerate(events):
        per[w] += 1
        held += reldone - acq
        if i:
            handoff.append(acq - events[i - 1][2])
            if w != events[i - 1][3]:
                to_other.append(acq - events[i - 1][2])
            violations += acq < events[i - 1][1]
    window = events[-1][2] - events[0][0] if events else 1
    return {
        "acquisitions": len(events),
        "utilisation": held / window if events else 0.0,
        "handoff_p50_us": pct(handoff, 50) / 1e3 if handoff else None,
        "handoff_p99_us": pct(handoff, 99) / 1e3 if handoff else None,
        "handoff_p50_rtt": pct(handoff, 50) / rtt_ns if handoff else None,
        "handoff_p99_rtt": pct(handoff, 99) / rtt_ns if handoff else None,
        "to_other_share": len(to_other) / len(handoff) if handoff else None,
        "to_other_p50_us": pct(to_other, 50) / 1e3 if to_other else None,
        "to_other_p50_rtt": pct(to_other, 50) / rtt_ns if to_other else None,
        "fewest": min(per),
        "most": max(per),
        "violations": violations,
    }


def run_contend(
    peers: Peers, server: RedisServer, rounds: int, seconds: float, workers: int = 8, libs: list | None = None
) -> dict:
    libs = libs if libs is not None else [k for k, v in LIBS.items() if "contend" in v[3]]
    per_round: dict[str, list[dict]] = {k: [] for k in libs}
    pinger = peers.copies["c"][workers]
    print(
        f"contend: {len(libs)} libraries x {rounds} rounds of {seconds} s, {workers} processes each",
        flush=True,
    )
    for _ in range(rounds):
        order = libs[:]
        random.shuffle(order)
        for k in order:
            start = time.monotonic_ns() + 300_000_000
            end = start + int(seconds * 1e9)
            ws = [peers.of(k, i) for i in range(workers)]
            for w in ws:
                w.send(f"contend {wire_lib(k)} bench:contend:{k} {start} {end} 1000 {server.url}")
            # The round trip meanwhile, from a connection of its own, a PING every 2 ms.
            pinger.send(f"rtt {seconds} {server.url} 2000")
            events, failures = [], 0
            for i, w in enumerate(ws):
                reply = w.recv(timeout=seconds + 120)
                failures += int(reply[1])
                v = list(map(int, reply[2:]))
                events += [(v[j], v[j + 1], v[j + 2], i) for j in range(0, len(v), 3)]
            _, _, rtt = pinger.recv()
            m = contention_metrics(events, end, int(rtt), workers)
            m["failures"] = failures
            m["rtt_us"] = int(rtt) / 1e3
            per_round[k].append(m)
            print(
                f"  {k}: {m['utilisation']:.1%}, hand-off p50 {m['handoff_p50_rtt'] or 0:.1f} rtt, "
                f"{m['fewest']}/{m['most']}, failures {failures}",
                flush=True,
            )
    out = {}
    for k, ms in per_round.items():
        agg = {
            f: statistics.median(m[f] for m in ms if m[f] is not None)
            if any(m[f] is not None for m in ms)
            else None
            for f in ms[0]
        }
        agg["fewest"] = min(m["fewest"] for m in ms)
        agg["most"] = max(m["most"] for m in ms)
        agg["violations"] = sum(m["violations"] for m in ms)
        agg["failures"] = sum(m["failures"] for m in ms)
        agg["rounds"] = ms
        out[k] = agg
    return out


# The busy share against the number of processes: the fair lock beside the
# plain lock and the peers whose defaults keep the lock busiest.
SCALE_LIBS = ["redmutex:fair", "redmutex:lock", "java:redisson", "go:redsync"]
SCALE_WORKERS = [2, 4, 8]


def run_scale(peers: Peers, server: RedisServer, rounds: int, seconds: float) -> dict:
    """Contention as in run_contend, with 2, 4 and 8 processes."""
    libs = [k for k in SCALE_LIBS if k in LIBS]
    return {str(w): run_contend(peers, server, rounds, seconds, workers=w, libs=libs) for w in SCALE_WORKERS}


def run_wake(peers: Peers, server: RedisServer, samples: int) -> dict:
    libs = [k for k, v in LIBS.items() if "wake" in v[3]]
    lat: dict[str, list[float]] = {k: [] for k in libs}
    from_call: dict[str, list[float]] = {k: [] for k in libs}
    rtts = []
    print(f"wake: {len(libs)} libraries x {samples} samples", flush=True)
    for s in range(samples):
        order = libs[:]
        random.shuffle(order)
        for k in order:
            holder, waiter = peers.of(k, s % 2), peers.of(k, 1 - s % 2)
            cmd = f"{wire_lib(k)} bench:wake:{k} {server.url}"
            holder.call(f"acquire {cmd}")
            holder.recv()
            waiter.call(f"acquire {cmd}")  # "started": the waiter is about to block
            time.sleep(random.uniform(0.03, 0.08))  # it is blocked (and a poller is mid-sleep)
            _, called, released = holder.call(f"release {cmd}")
            _, acquired = waiter.recv(timeout=30)
            waiter.call(f"release {cmd}")
            lat[k].append((int(acquired) - int(released)) / 1e3)
            from_call[k].append((int(acquired) - int(called)) / 1e3)
        _, _, rtt = peers.copies["c"][2].call(f"rtt 0.05 {server.url}")
        rtts.append(int(rtt) / 1e3)
        print(f"  sample {s + 1}/{samples} done", flush=True)
    rtt = statistics.median(rtts)
    return {
        "rtt_us": rtt,
        "series": {
            k: {
                "p50_us": pct(v, 50),
                "max_us": max(v),
                "p50_rtt": pct(v, 50) / rtt,
                "from_call_p50_us": pct(from_call[k], 50),
                "from_call_p50_rtt": pct(from_call[k], 50) / rtt,
                "from_call_max_us": max(from_call[k]),
                "samples": [round(x, 1) for x in v],
            }
            for k, v in lat.items()
        },
    }


def run_hold(peers: Peers, workdir: str, count: int, seconds: float) -> dict:
    """Every library with renewal holds `count` locks on a server of its own, all at once."""
    libs = [k for k, v in LIBS.items() if "hold" in v[3]]
    servers = {k: RedisServer(workdir) for k in libs}
    used: dict[str, int] = {}
    who = {}
    for k in libs:  # one peer copy per library (two Python libraries: two copies)
        lang = LIBS[k][0]
        who[k] = peers.of(k, used.get(lang, 0))
        used[lang] = used.get(lang, 0) + 1
    print(f"hold: {len(libs)} libraries x {count} locks for {seconds} s, concurrently", flush=True)
    for k in libs:
        who[k].send(f"hold {wire_lib(k)} hold {count} {servers[k].url}")
    for k in libs:
        assert who[k].recv(timeout=300)[0] == "held"
    monitors = {k: Monitor(servers[k]) for k in libs}
    time.sleep(0.2)  # MONITOR is on
    before = {k: servers[k].commandstats() for k in libs}
    for m in monitors.values():
        m.counting = True
    t0 = time.monotonic()
    time.sleep(seconds)
    for m in monitors.values():
        m.counting = False
    elapsed = time.monotonic() - t0
    after = {k: servers[k].commandstats() for k in libs}
    out = {}
    for k in libs:
        _, cpu, lost = who[k].call(f"unhold {wire_lib(k)} hold {servers[k].url}")
        delta = {c: after[k].get(c, 0) - before[k].get(c, 0) for c in after[k]}
        delta.pop("info", None)
        sent = {c: n for c, n in monitors[k].calls.items() if c != "info"}
        monitors[k].close()
        out[k] = {
            "round_trips": sum(sent.values()),
            "sent": sent,
            "server_commands": sum(delta.values()),
            "by_command": {c: n for c, n in delta.items() if n},
            "cpu_s": int(cpu) / 1e9,
            "lost": int(lost),
            "seconds": elapsed,
        }
        servers[k].stop()
    return out


# ---- versions, machine, report -------------------------------------------------------------


def machine() -> dict:
    model = ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    redis_v = subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout.split()[2]
    return {
        "cpu": model,
        "cpus": os.cpu_count(),
        "kernel": platform.release(),
        "redis": redis_v.split("=")[1],
        "load_start": os.getloadavg(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", required=True, help="build directory made by bench/peers/run")
    ap.add_argument("--quick", action="store_true", help="short blocks and few rounds (a smoke test)")
    ap.add_argument("--only", default="pairs,contend,scale,wake,hold", help="series to run (comma-separated)")
    ap.add_argument("--out", help="results JSON (default BUILD/results.json)")
    ap.add_argument("--libs", help="only libraries whose key contains one of these words (comma-separated)")
    args = ap.parse_args()
    only = set(args.only.split(","))
    if args.libs:  # floors and the round trip stay: every ratio needs them
        words = args.libs.split(",")
        for k in list(LIBS):
            if not k.startswith("floor:") and not any(w in k for w in words):
                del LIBS[k]
    q = args.quick
    with open(os.path.join(args.build, "versions.json")) as f:
        versions = json.load(f)
    results = {"machine": machine(), "versions": versions, "quick": q}
    with tempfile.TemporaryDirectory(prefix="redmutex-peers-") as workdir:
        servers = [RedisServer(workdir) for _ in range(5)]
        contend_copies = 8 if "contend" in only or "scale" in only else 2
        copies = {
            "c": contend_copies + 1,
            "py": max(contend_copies, 2),
            "java": contend_copies,
            "go": contend_copies,
            "node": contend_copies,
        }
        used = {v[0] for v in LIBS.values()}  # with --libs, only the peers those libraries need
        copies = {lang: n for lang, n in copies.items() if lang in used}
        peers = Peers(args.build, workdir if q else os.path.join(args.build, "logs"), copies)
        try:
            if "pairs" in only:
                results["pairs"] = run_pairs(peers, servers, 3 if q else 12, 0.1 if q else 0.25)
            if "contend" in only:
                results["contend"] = run_contend(peers, servers[0], 1 if q else 3, 0.5 if q else 2.0)
            if "scale" in only:
                results["scale"] = run_scale(peers, servers[0], 1 if q else 2, 0.5 if q else 2.0)
            if "wake" in only:
                results["wake"] = run_wake(peers, servers[0], 2 if q else 12)
            if "hold" in only:
                results["hold"] = run_hold(peers, workdir, 100 if q else 1000, 3 if q else 30)
        finally:
            peers.stop()
            for s in servers:
                s.stop()
    results["machine"]["load_end"] = os.getloadavg()
    out = args.out or os.path.join(args.build, "results.json")
    with open(out, "w") as f:
        json.dump(results, f, indent=1)
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
