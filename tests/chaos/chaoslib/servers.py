"""Private redis-server processes on free loopback ports, with the faults a
server can suffer: SIGSTOP (stall), SIGKILL + restart (with or without AOF),
and a wall clock under libfaketime that the harness moves mid-run."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from .resp import Resp

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/, for rmserver
from rmserver import Server, die_with_parent, free_port

__all__ = ["RedisServer", "_die_with_parent", "faketime_library", "free_port"]

_die_with_parent = die_with_parent  # child setup of the harness's other processes

LIBFAKETIME_DIR = Path("/usr/lib/x86_64-linux-gnu/faketime")


def faketime_library() -> Path | None:
    """libfaketimeMT (the threaded variant; redis-server has I/O threads), if installed."""
    for name in ("libfaketimeMT.so.1", "libfaketime.so.1"):
        p = LIBFAKETIME_DIR / name
        if p.exists():
            return p
    return None


class RedisServer(Server):
    """One redis-server (tests/rmserver.py's, so the binary, configuration and
    missing-server rules are every suite's) in workdir/name. `persistence` is
    "none" or "aof" (appendfsync always)."""

    def __init__(
        self,
        name: str,
        workdir: Path,
        persistence: str = "none",
        faketime_shim: Path | None = None,
        extra: list[str] | None = None,
    ) -> None:
        aof = ["--appendonly", "yes", "--appendfsync", "always"] if persistence == "aof" else []
        super().__init__(workdir / name, args=["--maxclients", "4000", *aof, *(extra or [])])
        self.name = name
        self.persistence = persistence
        self.faketime_shim = faketime_shim  # set: run under libfaketime (needs the malloc shim)
        self.clock_file = self.dir / "faketime"
        self.clock_spec = "+0.000"  # rewritten into clock_file whenever the server starts

    @property
    def dir(self) -> Path:  # type: ignore[override]
        return Path(self.workdir)

    # -- life cycle ------------------------------------------------------------

    def environment(self) -> dict[str, str]:
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

    def start(self, wipe: bool = True) -> RedisServer:  # type: ignore[override]
        """Starts on a free port, or again on the port it had (an AOF is replayed unless wiped)."""
        if wipe and os.path.exists(self.dir):
            shutil.rmtree(self.dir)
        if self.port:
            super().restart()
        else:
            super().start()
        return self

    def restart(self) -> RedisServer:
        """Starts again on the same port and directory (an AOF is replayed)."""
        self.kill()
        return self.start(wipe=self.persistence == "none")

    def stop(self) -> None:
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)

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
