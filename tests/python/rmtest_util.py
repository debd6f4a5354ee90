"""Helpers shared by the tests: waiting on conditions with deadlines, never sleep-and-hope."""

from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")


def wait_until(
    predicate: Callable[[], T], timeout: float = 5.0, interval: float = 0.01, what: str = "condition"
) -> T:
    """Polls predicate until it returns a true value; fails the test at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.1f} s waiting for {what}")
        time.sleep(interval)


def channel(name: str) -> str:
    """The release channel of a lock (Redisson's convention, as the C core uses it)."""
    return "redisson_lock__channel:%s" % (name if "{" in name else f"{{{name}}}")
