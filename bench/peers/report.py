#!/usr/bin/env python3
"""Markdown tables (as in docs/benchmarks.md) from a results.json of bench/peers/driver.py.

report.py build-peers/results.json > build-peers/results.md
"""

from __future__ import annotations

import json
import sys

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from driver import LIBS

# How often each library renews a held lock, with a 30 s lease (documented defaults).
RENEWAL_PERIOD_S = {
    "redmutex:lock": (9.0, "0.3 x 30 s watchdog lease"),
    "py:redmutex:lock": (9.0, "0.3 x 30 s watchdog lease"),
    "java:redisson": (10.0, "lockWatchdogTimeout 30 s / 3"),
    "py:python-redis-lock": (20.0, "2/3 of expire=30"),
    "node:node-redlock": (29.5, "`using`: when < 500 ms of 30 s are left"),
    "node:sesame-redlock": (29.5, "`using`: when < 500 ms of 30 s are left"),
}


X = "\u00d7"  # multiplication sign
DASH = "\u2013"


def label(k: str, versions: dict) -> str:
    _, text, vkey, _ = LIBS[k]
    v = versions.get(vkey, "")
    return f"{text} {v}".strip() if not k.startswith("floor:") else text


def f1(x, unit="", digits=1):
    return DASH if x is None else f"{x:.{digits}f}{unit}"


def header(res: dict) -> str:
    m, v = res["machine"], res["versions"]
    return (
        f"Run of {m['date']} on {m['cpus']} x {m['cpu']}, Linux {m['kernel']}, "
        f"Redis {m['redis']} on loopback; "
        f"load average {m['load_start'][0]:.2f} at the start, {m['load_end'][0]:.2f} at the end. "
        f"redmutex {v['redmutex']} (hiredis {v['hiredis']}), Python {v['python']}, {v['java']}, {v['go']}, "
        f"Node.js {v['node']} (ioredis {v['ioredis']}), go-redis {v['go-redis']}.\n"
    )


def pairs_table(res: dict) -> str:
    p = res["pairs"]
    v = res["versions"]
    rows = [(k, e) for k, e in p["series"].items() if k.endswith("@1")]
    rows.sort(key=lambda r: -r[1]["pairs_per_s"])
    out = [
        f"Round trip (raw `PING`, median over the run): **{p['rtt_us']:.1f} µs**.\n",
        "| acquire + release, one thread, one server | pairs/s | µs per pair | client CPU µs per pair "
        "| time vs `SET NX PX`+`DEL` floor | time vs same-commands floor |",
        "|---|---|---|---|---|---|",
    ]
    for k, e in rows:
        name = label(k[:-2], v)
        bold = "**" if "redmutex" in k and not k.startswith("floor") else ""
        out.append(
            f"| {bold}{name}{bold} | {e['pairs_per_s']:.0f} | {1e6 / e['pairs_per_s']:.1f} "
            f"| {e['cpu_us_per_pair']:.1f} "
            f"| {f1(e.get('vs_2rt'), X, 2)} | {f1(e.get('vs_same_floor'), X, 2)} |"
        )
    py = p["series"].get("py:redmutex:lock@1", {})
    extra = [f"- redmutex Python `with lock:` / C core pair time: {f1(py.get('vs_c_core'), X, 2)}"]
    for k, e in rows:
        if "redmutex_py_over_this" in e:
            extra.append(
                f"- redmutex Python pairs/s over {label(k[:-2], v)}: **{e['redmutex_py_over_this']:.2f}{X}**"
            )
    return "\n".join(out) + "\n\n" + "\n".join(extra) + "\n"


def redlock_table(res: dict) -> str:
    p = res["pairs"]
    v = res["versions"]
    rows = [(k, e) for k, e in p["series"].items() if k.endswith("@5")]
    rows.sort(key=lambda r: -r[1]["pairs_per_s"])
    out = [
        "| acquire + release, N = 5 servers | pairs/s | µs per pair | client CPU µs per pair "
        "| time vs its own one-server pair | time vs raw parallel floor |",
        "|---|---|---|---|---|---|",
    ]
    for k, e in rows:
        name = label(k[:-2], v).replace("lock's commands, raw", "lock's commands to 5 servers at once, raw")
        name = name.replace("`RLock` (defaults)", "`RedissonRedLock` over 5 `RLock`s (defaults)")
        bold = "**" if "redmutex" in k and not k.startswith("floor") else ""
        out.append(
            f"| {bold}{name}{bold} | {e['pairs_per_s']:.0f} | {1e6 / e['pairs_per_s']:.1f} "
            f"| {e['cpu_us_per_pair']:.1f} "
            f"| {f1(e.get('vs_own_one_server'), X, 2)} | {f1(e.get('vs_same_floor'), X, 2)} |"
        )
    return "\n".join(out) + "\n"


def contend_table(res: dict) -> str:
    c = res["contend"]
    v = res["versions"]
    rtt = sorted(e["rtt_us"] for e in c.values())[len(c) // 2]
    out = [
        f"Round trip meanwhile (a `PING` every 2 ms on another connection, median): {rtt:.1f} µs.\n",
        "| 8 processes, 1 ms critical section | utilisation | hand-off p50 | hand-off p99 "
        "| hand-offs to another process: share, p50 | fewest / most acquisitions per worker | gave up |",
        "|---|---|---|---|---|---|---|",
    ]
    for k, e in sorted(c.items(), key=lambda r: -r[1]["utilisation"]):
        bold = "**" if "redmutex" in k else ""
        out.append(
            f"| {bold}{label(k, v)}{bold} | {e['utilisation']:.1%} | {f1(e['handoff_p50_us'], ' µs', 0)} "
            f"({f1(e['handoff_p50_rtt'], ' RT')}) | {f1(e['handoff_p99_us'], ' µs', 0)} "
            f"({f1(e['handoff_p99_rtt'], ' RT')}) "
            f"| {e['to_other_share']:.0%}, {f1(e['to_other_p50_us'], ' µs', 0)} "
            f"({f1(e['to_other_p50_rtt'], ' RT')}) "
            f"| {e['fewest']} / {e['most']} | {e['failures']} |"
        )
    viol = sum(e["violations"] for e in c.values())
    out.append(
        f"\nMutual-exclusion violations seen (an acquisition before the previous holder's release): {viol}."
    )
    return "\n".join(out) + "\n"


def wake_table(res: dict) -> str:
    w = res["wake"]
    v = res["versions"]
    out = [
        f"Round trip: {w['rtt_us']:.1f} µs.\n",
        "| waiter blocked in acquire; another process releases | release called → acquire returned, p50 "
        "| in round trips | worst | release returned → acquire returned, p50 |",
        "|---|---|---|---|---|",
    ]
    for k, e in sorted(w["series"].items(), key=lambda r: r[1]["from_call_p50_us"]):
        bold = "**" if "redmutex" in k else ""
        out.append(
            f"| {bold}{label(k, v)}{bold} | {e['from_call_p50_us']:.0f} µs | {e['from_call_p50_rtt']:.1f} "
            f"| {e['from_call_max_us'] / 1e3:.1f} ms | {e['p50_us']:.0f} µs |"
        )
    return "\n".join(out) + "\n"


def hold_table(res: dict) -> str:
    h = res["hold"]
    v = res["versions"]
    out = [
        "| 1000 locks held for 30 s, lease 30 s | renews every | requests sent in the 30 s (MONITOR) "
        "| requests per renewal period | commands the server ran (INFO commandstats) "
        "| client CPU in the 30 s | lost |",
        "|---|---|---|---|---|---|---|",
    ]

    def listing(d: dict) -> str:
        return ", ".join(f"{c} {n}" for c, n in sorted(d.items(), key=lambda x: -x[1])) or "none"

    for k, e in sorted(h.items(), key=lambda r: r[1]["round_trips"]):
        period, why = RENEWAL_PERIOD_S[k]
        per = e["round_trips"] / max(1, int(e["seconds"] / period))  # renewals due in the window
        bold = "**" if "redmutex" in k else ""
        out.append(
            f"| {bold}{label(k, v)}{bold} | {period:g} s ({why}) | {e['round_trips']} ({listing(e['sent'])}) "
            f"| {per:.1f} "
            f"| {e['server_commands']} ({listing(e['by_command'])}) "
            f"| {'< 0.01' if e['cpu_s'] < 0.005 else format(e['cpu_s'], '.2f')} s | {e['lost']} |"
        )
    return "\n".join(out) + "\n"


def main() -> int:
    with open(sys.argv[1]) as f:
        res = json.load(f)
    print(header(res))
    for key, title, fn in [
        ("pairs", "Uncontended pairs, one server", pairs_table),
        ("pairs", "Redlock, N = 5", redlock_table),
        ("contend", "8 contending processes", contend_table),
        ("wake", "Wake-up latency", wake_table),
        ("hold", "Holding 1000 locks with renewal", hold_table),
    ]:
        if key in res:
            print(f"### {title}\n")
            print(fn(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
