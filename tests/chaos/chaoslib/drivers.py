"""Driver processes (C through the core API, Python through the package): start
them with a configuration, pump their JSONL into the history, steer them
through stdin, pause them, and read their exit."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .history import History
from .servers import _die_with_parent


@dataclass
class Toolchain:
    """Where the driver programs are."""

    c_driver: Path
    python: Path  # an interpreter that can import redmutex
    py_driver: Path
    malloc_shim: Path


@dataclass
class DriverSpec:
    """A driver's configuration, as the command line both drivers accept."""

    name: str
    lang: str  # "c" or "py"
    urls: list[str]
    resource: str  # host:port
    mode: str = "workload"
    threads: int = 1
    keys: int = 1
    prefix: str = "lk:"
    kind: str = "lock"
    lease_ms: int = 0
    watchdog_lease_ms: int = 1000
    fencing: bool = True
    cs_ms: tuple[int, int] = (5, 20)
    think_ms: int = 0
    wait_ms: int = 2000
    nest: int = 1
    hold_margin_ms: int = 0
    owner_per_hold: bool = False
    owner_fixed: bool = False
    cmd_timeout_ms: int = 200
    connect_timeout_ms: int = 300
    backoff_cap_ms: int = 100
    retry_delay_ms: int = 50
    min_replicas: int = 0
    replica_timeout_ms: int = 200
    seed: int = 1
    ops: int = 0
    leave_on_free: bool = False
    uid: int | None = None  # run as this uid (nft partitions match on it)
    env: dict[str, str] = field(default_factory=dict)
    wrapper: list[str] = field(default_factory=list)  # e.g. ["nice", "-n", "10"]

    def args(self) -> list[str]:
        a = ["--id", self.name, "--mode", self.mode, "--resource", self.resource]
        for u in self.urls:
            a += ["--url", u]
        a += [
            "--threads",
            str(self.threads),
            "--keys",
            str(self.keys),
            "--prefix",
            self.prefix,
            "--kind",
            self.kind,
            "--lease",
            str(self.lease_ms),
            "--watchdog-lease",
            str(self.watchdog_lease_ms),
            "--cs",
            f"{self.cs_ms[0]}:{self.cs_ms[1]}",
            "--think",
            str(self.think_ms),
            "--wait",
            str(self.wait_ms),
            "--nest",
            str(self.nest),
            "--hold-margin",
            str(self.hold_margin_ms),
            "--cmd-timeout",
            str(self.cmd_timeout_ms),
            "--connect-timeout",
            str(self.connect_timeout_ms),
            "--backoff-cap",
            str(self.backoff_cap_ms),
            "--retry-delay",
            str(self.retry_delay_ms),
            "--min-replicas",
            str(self.min_replicas),
            "--replica-timeout",
            str(self.replica_timeout_ms),
            "--seed",
            str(self.seed),
            "--ops",
            str(self.ops),
        ]
        if not self.fencing:
            a.append("--no-fencing")
        if self.owner_per_hold:
            a.append("--owner-per-hold")
        if self.owner_fixed:
            a.append("--owner-fixed")
        if self.leave_on_free:
            a.append("--leave-on-free")
        return a


class Driver:
    def __init__(self, spec: DriverSpec, tools: Toolchain, history: History, logdir: Path) -> None:
        self.spec = spec
        self.history = history
        cmd = [str(tools.c_driver)] if spec.lang == "c" else [str(tools.python), str(tools.py_driver)]
        cmd = spec.wrapper + cmd + spec.args()
        if spec.uid is not None:
            cmd = ["setpriv", f"--reuid={spec.uid}", f"--regid={spec.uid}", "--clear-groups", *cmd]
        env = dict(os.environ, **spec.env)
        self.stderr = open(logdir / f"{spec.name}.stderr", "wb")  # noqa: SIM115 - lives as long as the process
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            env=env,
            preexec_fn=_die_with_parent,
        )
        self.paused = False
        self.pump = threading.Thread(target=self._pump, daemon=True)
        self.pump.start()

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.history.add_line(line)

    def send(self, command: str) -> None:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(command.encode() + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass

    def wait_event(self, ev: str, timeout: float, since: int = 0, **match: Any) -> dict[str, Any] | None:
        def pred(e: dict[str, Any]) -> bool:
            return (
                e.get("p") == self.name and e.get("ev") == ev and all(e.get(k) == v for k, v in match.items())
            )

        return self.history.wait_for(pred, timeout, since)

    def pause(self) -> None:
        if not self.paused and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGSTOP)
            self.paused = True

    def resume(self) -> None:
        if self.paused:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.paused = False

    def stop(self, timeout: float) -> bool:
        """Workers finish their critical sections and release; the client stays alive."""
        self.resume()
        mark = 0
        self.send("stop")
        return self.wait_event("stopped", timeout, mark) is not None or self.proc.poll() is not None

    def exit(self, timeout: float) -> int:
        self.resume()
        self.send("exit")
        with contextlib.suppress(OSError):
            self.proc.stdin.close()  # type: ignore[union-attr]
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
            self.history.harness("driver_killed", target=self.name, why="did not exit in time")
        self.pump.join(5)
        self.stderr.close()
        return rc

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.resume()
            self.proc.kill()
            self.proc.wait()
        self.pump.join(5)
        self.stderr.close()

    def alive(self) -> bool:
        return self.proc.poll() is None


def wait_all_stopped(drivers: list[Driver], timeout: float) -> list[str]:
    """Sends "stop" to every driver at once; returns the names that did not stop in time."""
    deadline = time.monotonic() + timeout
    for d in drivers:
        d.resume()
        d.send("stop")
    late = []
    for d in drivers:
        while True:
            if d.wait_event("stopped", 0.2) is not None or not d.alive():
                break
            if time.monotonic() > deadline:
                late.append(d.name)
                break
    return late
