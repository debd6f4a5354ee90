"""Private redis-server processes on free loopback ports, with the faults a
server can suffer: SIGSTOP (stall), SIGKILL + restart (with or without AOF),
and a wall clock under libfaketime that the harness moves mid-run."""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from .resp import Resp, RespError

LIBFAKETIME_DIR = Path("/usr/lib/x86_64-linux-gnu/faketime")
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Child setup: SIGKILL when the harness dies, whatever kills it."""
    with contextlib.suppress(OSError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def faketime_library() -> Path | None:
    """libfaketimeMT (the threaded variant; redis-server has I/O threads), if installed."""
    for name in ("libfaketimeMT.so.1", "libfaketime.so.1"):
        p = LIBFAKETIME_DIR / name
        if p.exists():
            return p
    return None


class RedisServer:
    """One redis-server. `persistence` is "none" or "aof" (appendfsync always)."""

    def __init__(
        self,
        name: str,
        workdir: Path,
        persistence: str = "none",
        faketime_shim: Path | None = None,
        extra: list[str] | None = None,
    ) -> None:
        self.name = name
        self.dir = workdir / name
        self.persistence = persistence
        self.faketime_shim = faketime_shim  # set: run under libfaketime (needs the malloc shim)
        self.extra = extra or []
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.paused = False
        self.clock_file = self.dir / "faketime"
        self.clock_spec = "+0.000"  # rewritten into clock_file whenever the server starts

    # -- life cycle ------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def _args(self) -> list[str]:
        aof = (
            ["--appendonly", "yes", "--appendfsync", "always"]
            if self.persistence == "aof"
            else ["--appendonly", "no"]
        )
        return [
            "redis-server",
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.dir),
            "--save",
            "",
            "--daemonize",
            "no",
            "--protected-mode",
            "no",
            "--logfile",
            str(self.dir / "redis.log"),
            "--maxclients",
            "4000",
            *aof,
            *self.extra,
        ]

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.faketime_shim:
            lib = faketime_library()
            if lib is None:
                raise RuntimeError("libfaketime is not installed (Debian package faketime)")
            self._write_clock()
            env["LD_PRELOAD"] = f"{self.faketime_shim}:{lib}"
            env["FAKETIME_TIMESTAMP_FILE"] = str(self.clock_file)
            env["FAKETIME_NO_CACHE"] = "1"
            env["FAKETIME_DONT_FAKE_MONOTONIC"] = "1"
        return env

    def start(self, wipe: bool = True) -> RedisServer:
        if wipe and self.dir.exists():
            shutil.rmtree(self.dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        for _ in range(5):
            if not self.port:
                self.port = free_port()
            self.proc = subprocess.Popen(
                self._args(),
                env=self._env(),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                preexec_fn=_die_with_parent,
            )
            if self.wait_ready(10.0):
                self.paused = False
                return self
            self.kill()
            self.port = 0  # perhaps someone took the port: try another
        raise RuntimeError(f"{self.name}: redis-server did not start; see {self.dir / 'redis.log'}")

    def wait_ready(self, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                return False
            try:
                with Resp("127.0.0.1", self.port, timeout=1.0) as r:
                    if r.call("PING") == "PONG":
                        return True
            except (OSError, ConnectionError, RespError):
                pass
            time.sleep(0.01)
        return False

    def kill(self) -> None:
        """SIGKILL: what a crash or power loss leaves (the page cache survives)."""
        if self.proc is None:
            return
        if self.paused:
            self.proc.send_signal(signal.SIGCONT)
        self.proc.kill()
        self.proc.wait()
        self.proc = None
        self.paused = False

    def restart(self) -> None:
        """Starts again on the same port and directory (an AOF is replayed)."""
        self.kill()
        self.start(wipe=self.persistence == "none")

    def stop(self) -> None:
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)

    def pause(self) -> None:
        if self.proc is not None and not self.paused:
            self.proc.send_signal(signal.SIGSTOP)
            self.paused = True

    def resume(self) -> None:
        if self.proc is not None and self.paused:
            self.proc.send_signal(signal.SIGCONT)
            self.paused = False

    # -- clock -------------------------------------------------------------------

    def set_clock_offset(self, seconds: float, rate: float | None = None) -> None:
        """Moves the server's wall clock (libfaketime re-reads the file on every call).
        A rate ("x1.05") counts from the process start, so set it before start()."""
        self.clock_spec = f"{seconds:+.3f}" + (f" x{rate}" if rate else "")
        self._write_clock()

    def _write_clock(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.clock_file.with_suffix(".tmp")
        tmp.write_text(self.clock_spec + "\n")
        os.replace(tmp, self.clock_file)

    # -- commands ----------------------------------------------------------------

    def conn(self, timeout: float = 2.0) -> Resp:
        return Resp("127.0.0.1", self.port, timeout=timeout)

    def call(self, *args: object, timeout: float = 2.0) -> object:
        with self.conn(timeout) as r:
            return r.call(*args)

    def run_id(self) -> str:
        info = self.call("INFO", "server")
        assert isinstance(info, bytes)
        for line in info.decode().splitlines():
            if line.startswith("run_id:"):
                return line.split(":", 1)[1].strip()
        raise RuntimeError("INFO server has no run_id")
