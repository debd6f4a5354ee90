#!/usr/bin/env python3
"""SVG charts of a bench/peers run, drawn from its own results.json (matplotlib: bench only).

charts.py build-peers/results.json OUTDIR

Writes, for the series the run has:
  pairs.svg       time of an uncontended acquire + release per library (one
                  dot per block of the run, the box its quartiles)
  fair-scale.svg  share of the time the lock was held (busy share) against
                  the number of contending processes: the fair lock, the
                  plain lock and the peers
  wake.svg        wake-up delay: from the holder's release to the waiter's
                  acquire, one dot per sample
The figures are the same run's as the tables of report.py: nothing is
measured here.
"""

from __future__ import annotations

import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from driver import LIBS

# Stable output: the same data gives the same bytes (no dates, no random ids).
plt.rcParams.update({"svg.hashsalt": "redmutex", "svg.fonttype": "none", "font.size": 9})
REDMUTEX = "#c0392b"
OTHER = "#5d6d7e"
FLOOR = "#aab7b8"


def label(key: str, versions: dict) -> str:
    _, text, vkey, _ = LIBS[key]
    text = text.replace("`", "")
    return text if key.startswith("floor:") else f"{text} {versions.get(vkey, '')}".strip()


def colour(key: str) -> str:
    return FLOOR if key.startswith("floor:") else REDMUTEX if "redmutex" in key else OTHER


def subtitle(res: dict) -> str:
    m = res.get("machine", {})
    start, end = m.get("load_start"), m.get("load_end")
    load = f", load {start[0]:.1f}\u2013{end[0]:.1f}" if start and end else ""
    return f"run of {m.get('date', '?')}, {m.get('cpus', '?')} x {m.get('cpu', '?')}{load}"


# A waiter that acquired before the holder's release call returned has a delay <= 0: drawn here.
WAKE_FLOOR_US = 10.0


def mark(ax, x: float, text: str) -> None:
    """A dashed vertical reference line, labelled at the bottom of the plot."""
    ax.axvline(x, color=FLOOR, linestyle="--", linewidth=1)
    ax.annotate(text, (x, 0.01), xycoords=("data", "axes fraction"), color="#7f8c8d", fontsize=8, va="bottom")


def strip_chart(ax, rows: list[tuple[str, str, list[float]]], xlabel: str) -> None:
    """One row per series: its values as dots over a box of their quartiles, log scale."""
    rows = sorted(rows, key=lambda r: sorted(r[2])[len(r[2]) // 2], reverse=True)
    data = [r[2] for r in rows]
    ax.boxplot(data, orientation="horizontal", widths=0.6, showfliers=False, medianprops={"color": "black"})
    for i, (key, _, values) in enumerate(rows, start=1):
        jitter = [i + ((j * 0.37) % 0.5 - 0.25) for j in range(len(values))]
        ax.scatter(values, jitter, s=7, color=colour(key), alpha=0.75, zorder=3, linewidths=0)
    ax.set_yticks(range(1, len(rows) + 1), [r[1] for r in rows])
    ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.grid(axis="x", which="both", alpha=0.25)


def pairs_chart(res: dict, versions: dict, out: str) -> None:
    pairs = res["pairs"]
    rows = []
    for name, entry in pairs["series"].items():
        key, n = name.rsplit("@", 1)
        if n != "1" or not entry["rates"]:
            continue
        rows.append((key, label(key, versions), [1e6 / r for r in entry["rates"] if r > 0]))
    fig, ax = plt.subplots(figsize=(8.5, 0.34 * len(rows) + 1.4))
    strip_chart(ax, rows, "µs per acquire + release (log scale), one dot per block of the run")
    mark(ax, 2 * pairs["rtt_us"], " 2 round trips (raw PING)")
    ax.set_title("Uncontended acquire + release, one server, one thread\n" + subtitle(res), fontsize=9)
    fig.tight_layout()
    fig.savefig(out, metadata={"Date": None})
    plt.close(fig)


def scale_chart(res: dict, versions: dict, out: str) -> None:
    scale = res["scale"]
    workers = sorted(int(w) for w in scale)
    keys = list(scale[str(workers[0])])
    fig, ax = plt.subplots(figsize=(7, 4))
    for key in keys:
        share = [scale[str(w)][key]["utilisation"] * 100 for w in workers]
        style = {"linewidth": 2.2} if key == "redmutex:fair" else {"linewidth": 1.2}
        marker = "o" if "redmutex" in key else "s"
        ax.plot(workers, share, marker=marker, color=colour(key), label=label(key, versions), **style)
        if key != "redmutex:fair":
            ax.lines[-1].set_alpha(0.7 if "redmutex" in key else 0.55)
            ax.lines[-1].set_linestyle("--" if "redmutex" in key else ":")
    ax.set_xticks(workers)
    ax.set_xlabel("contending processes (1 ms critical section each)")
    ax.set_ylabel("busy share: time the lock was held, %")
    ax.set_ylim(0, 100)
    ax.grid(alpha=0.25)
    ax.legend(fontsize=8, loc="lower left")
    ax.set_title("Busy share against the number of processes\n" + subtitle(res), fontsize=9)
    fig.tight_layout()
    fig.savefig(out, metadata={"Date": None})
    plt.close(fig)


def wake_chart(res: dict, versions: dict, out: str) -> None:
    wake = res["wake"]
    rows = [
        (key, label(key, versions), [max(s, WAKE_FLOOR_US) for s in entry["samples"]])
        for key, entry in wake["series"].items()
        if entry["samples"]
    ]
    fig, ax = plt.subplots(figsize=(8.5, 0.34 * len(rows) + 1.4))
    xlabel = f"µs from release to the waiter's acquire (log; ≤ {WAKE_FLOOR_US:g} drawn at {WAKE_FLOOR_US:g})"
    strip_chart(ax, rows, xlabel)
    mark(ax, wake["rtt_us"], " 1 round trip (raw PING)")
    ax.set_title("Wake-up delay of a blocked waiter\n" + subtitle(res), fontsize=9)
    fig.tight_layout()
    fig.savefig(out, metadata={"Date": None})
    plt.close(fig)


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    with open(sys.argv[1]) as f:
        res = json.load(f)
    outdir = sys.argv[2]
    os.makedirs(outdir, exist_ok=True)
    versions = res.get("versions", {})
    drawn = []
    for series, fn, name in (
        ("pairs", pairs_chart, "pairs.svg"),
        ("scale", scale_chart, "fair-scale.svg"),
        ("wake", wake_chart, "wake.svg"),
    ):
        if series in res:
            fn(res, versions, os.path.join(outdir, name))
            drawn.append(name)
    print("charts:", ", ".join(drawn) or "none (no series in the results)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
