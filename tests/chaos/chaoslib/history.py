"""The history of a run: every event of every driver, of the proxy and of the
harness (faults), as JSON objects stamped with CLOCK_MONOTONIC nanoseconds,
collected live (the fault injector reacts to them) and saved as JSONL.

Holds are rebuilt from it: a hold is one acquire_ok of one worker, with the
validity it was known to have, the LOST news it got, and its release call.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Event = dict[str, Any]


class History:
    def __init__(self, path: Path | None = None) -> None:
        self.events: list[Event] = []
        self.cond = threading.Condition()
        self.file = open(path, "w", buffering=1) if path else None  # noqa: SIM115 - closed by close()
        self.bad_lines = 0

    def add(self, ev: Event) -> None:
        with self.cond:
            self.events.append(ev)
            if self.file:
                self.file.write(json.dumps(ev) + "\n")
            self.cond.notify_all()

    def add_line(self, line: bytes) -> None:
        try:
            ev = json.loads(line)
        except ValueError:
            self.bad_lines += 1
            return
        if isinstance(ev, dict) and "t" in ev:
            self.add(ev)

    def harness(self, ev: str, **fields: Any) -> Event:
        e = {"t": time.monotonic_ns(), "p": "harness", "ev": ev, **fields}
        self.add(e)
        return e

    def mark(self) -> int:
        """A cursor: wait_for(since=mark()) sees only later events."""
        with self.cond:
            return len(self.events)

    def wait_for(self, pred: Callable[[Event], bool], timeout: float, since: int = 0) -> Event | None:
        deadline = time.monotonic() + timeout
        i = since
        with self.cond:
            while True:
                while i < len(self.events):
                    if pred(self.events[i]):
                        return self.events[i]
                    i += 1
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.cond.wait(left)

    def load_jsonl(self, path: Path) -> None:
        """Adds the events of another log (the proxy's)."""
        if path.exists():
            for line in path.read_bytes().splitlines():
                self.add_line(line)

    def sorted(self) -> list[Event]:
        with self.cond:
            return sorted(self.events, key=lambda e: e["t"])

    def close(self) -> None:
        if self.file:
            self.file.close()
            self.file = None


@dataclass
class Hold:
    """One acquisition by one worker, as its process saw it."""

    proc: str
    worker: int
    seq: int
    key: str
    start: int  # acquire_ok
    fence: int = 0
    validity_end: int | None = None  # the latest end of validity the client knew of
    release_call: int | None = None
    lost_at: int | None = None  # LOST callback or ELOST from a call
    lost_cb_at: int | None = None  # LOST callback only
    failing_at: int | None = None
    failing_validity_end: int | None = None
    release_result: str | None = None
    nested_fences: list[int] = field(default_factory=list)
    writes: list[Event] = field(default_factory=list)

    @property
    def id(self) -> str:
        return f"{self.proc}:{self.worker}:{self.seq}"

    def believed_end(self, horizon: int) -> int:
        """End of the interval in which the client believed it held the lock:
        min(release call, LOST news, end of known validity)."""
        ends = [x for x in (self.release_call, self.lost_at, self.validity_end) if x is not None]
        return min(ends) if ends else horizon


def _ms(ns: int) -> float:
    return ns / 1e6


def build_holds(events: Iterable[Event]) -> list[Hold]:
    """Rebuilds holds from driver events (events sorted by time)."""
    holds: dict[tuple[str, int, int], Hold] = {}
    out: list[Hold] = []
    for e in events:
        ev = e.get("ev")
        k = (e.get("p", ""), e.get("w", -1), e.get("h", 0))
        if ev == "acq_ok":
            h = Hold(k[0], k[1], k[2], e["key"], e["t"], fence=e.get("fence", 0))
            if e.get("val", -1) > 0:
                h.validity_end = e["t"] + e["val"] * 1_000_000
            holds[k] = h
            out.append(h)
            continue
        h = holds.get(k)
        if h is None:
            continue
        if ev == "chk":
            v = e.get("val", -1)
            if v > 0:
                h.validity_end = e["t"] + v * 1_000_000
        elif ev == "nest_ok":
            h.nested_fences.append(e.get("fence", 0))
        elif ev == "rel" and h.release_call is None:
            h.release_call = e["t"]
        elif ev in ("rel_ok", "rel_err"):
            if h.release_result is None or ev == "rel_ok":
                h.release_result = "OK" if ev == "rel_ok" else e.get("err")
            if ev == "rel_err" and e.get("err") == "ELOST" and h.lost_at is None:
                h.lost_at = e["t"]
        elif ev == "lost_cb":
            state = e.get("state")
            if state == "LOST" and h.lost_cb_at is None:
                h.lost_cb_at = e["t"]
                h.lost_at = e["t"] if h.lost_at is None else min(h.lost_at, e["t"])
            elif state == "FAILING" and h.failing_at is None:
                h.failing_at = e["t"]
                if e.get("val", -1) >= 0:
                    h.failing_validity_end = e["t"] + e["val"] * 1_000_000
            elif state == "HELD":  # renewal recovered before validity ended
                h.failing_at = h.failing_validity_end = None
        elif ev in ("fenced", "cas", "cset", "cs_read"):
            h.writes.append(e)
    return out
