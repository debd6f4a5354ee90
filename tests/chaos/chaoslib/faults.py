"""Faults beyond the proxy: straggler servers (a Lua busy loop), partitions
(nft rules on the loopback, per client uid), CPU starvation (stress-ng), and a
MONITOR tap that records which commands a server executed, in its order."""

from __future__ import annotations

import re
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field

from .resp import RespError
from .servers import RedisServer, _die_with_parent

BUSY_SCRIPT = (
    "local t = redis.call('TIME') "
    "local start = t[1] * 1000000 + t[2] "
    "repeat local n = redis.call('TIME') until n[1] * 1000000 + n[2] - start >= tonumber(ARGV[1]) "
    "return 1"
)


class Straggler:
    """Makes a server a straggler: EVAL spinning on TIME for busy_ms, every busy_ms + gap_ms.
    Every client's command waits behind the script, so the server answers late
    but in order - the timing of a slow node, not of a lost one."""

    def __init__(self, server: RedisServer, busy_ms: float = 3.0, gap_ms: float = 2.0) -> None:
        self.server, self.busy_us, self.gap = server, int(busy_ms * 1000), gap_ms / 1000
        self.stop_flag = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.scripts = 0

    def start(self) -> Straggler:
        self.thread.start()
        return self

    def _run(self) -> None:
        while not self.stop_flag.is_set():
            try:
                with self.server.conn(timeout=5.0) as r:
                    while not self.stop_flag.is_set():
                        r.call("EVAL", BUSY_SCRIPT, 0, self.busy_us)
                        self.scripts += 1
                        time.sleep(self.gap)
            except (OSError, ConnectionError, RespError):
                time.sleep(0.05)  # the server is down or restarting: try again

    def stop(self) -> None:
        self.stop_flag.set()
        self.thread.join(10)


@dataclass
class NftProbe:
    ok: bool
    reason: str = ""


class Partitions:
    """Partitions on the loopback with nftables: packets of connections opened
    by processes of one uid (the partitioned client runs under it) to or from
    one server port are dropped, in either or both directions. A conntrack
    mark ties a server's replies to the client's connection, which is what
    lets a partition be asymmetric. Nothing is rejected: like a cable pulled,
    the client sees silence until its timeouts."""

    TABLE = "redmutex_chaos"

    def __init__(self) -> None:
        self.active = False

    @classmethod
    def probe(cls) -> NftProbe:
        if shutil.which("nft") is None:
            return NftProbe(False, "nft is not installed (Debian package nftables)")
        p = Partitions()
        try:
            p._reset()
            p._nft(f"add rule inet {cls.TABLE} out meta skuid 64999 tcp dport 1 ct mark set 64999")
            p._nft(f"add rule inet {cls.TABLE} out ct mark 64999 tcp sport 1 drop")
        except RuntimeError as e:
            return NftProbe(False, f"nft rules cannot be installed here: {e}")
        finally:
            p.clear()
        return NftProbe(True)

    def _nft(self, rule: str) -> None:
        r = subprocess.run(["nft", *rule.split()], capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(r.stderr.strip() or f"nft {rule} failed")

    def _reset(self) -> None:
        self.clear()
        self._nft(f"add table inet {self.TABLE}")
        self._nft(
            f"add chain inet {self.TABLE} out {{ type filter hook output priority 0 ; policy accept ; }}"
        )
        self.active = True

    def isolate(self, uid: int, ports: list[int], direction: str = "both") -> None:
        """Drops traffic between processes of `uid` and the given server ports.
        direction: "both", "requests" (client to server) or "replies"."""
        if not self.active:
            self._reset()
        self._nft(f"add rule inet {self.TABLE} out meta skuid {uid} ct mark set {uid}")
        for port in ports:
            if direction in ("both", "requests"):
                self._nft(f"add rule inet {self.TABLE} out ct mark {uid} tcp dport {port} drop")
            if direction in ("both", "replies"):
                self._nft(f"add rule inet {self.TABLE} out ct mark {uid} tcp sport {port} drop")

    def drop_flow(self, port_a: int, port_b: int) -> None:
        """Drops one TCP connection on the loopback, both ways, by its two ports (a replica's
        link to its master, say): silence, as if the cable were pulled, for that flow only."""
        if not self.active:
            self._reset()
        self._nft(f"add rule inet {self.TABLE} out tcp sport {port_a} tcp dport {port_b} drop")
        self._nft(f"add rule inet {self.TABLE} out tcp sport {port_b} tcp dport {port_a} drop")

    def cut_off(self, uid: int, ports: list[int]) -> None:
        """Cuts a server process off from everyone: drops every packet it sends (it runs as
        `uid`: replies, its own connections to other nodes) and every packet sent to its
        ports (client port, cluster bus). A cluster node cut off so is a master lost to a
        network partition: its process and its data live on."""
        if not self.active:
            self._reset()
        self._nft(f"add rule inet {self.TABLE} out meta skuid {uid} drop")
        for port in ports:
            self._nft(f"add rule inet {self.TABLE} out tcp dport {port} drop")

    def clear(self) -> None:
        subprocess.run(["nft", "delete", "table", "inet", self.TABLE], capture_output=True)
        self.active = False


class Starvation:
    """stress-ng CPU hogs pinned to one CPU, where the starved client runs at a lower priority."""

    def __init__(self, cpu: int = 1, workers: int = 2) -> None:
        self.cpu, self.workers = cpu, workers
        self.proc: subprocess.Popen[bytes] | None = None

    @staticmethod
    def available() -> bool:
        return shutil.which("stress-ng") is not None and shutil.which("taskset") is not None

    def wrapper(self, niceness: int) -> list[str]:
        """The command prefix that puts a driver on the same CPU, niced."""
        return ["taskset", "-c", str(self.cpu), "nice", "-n", str(niceness)]

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                "taskset",
                "-c",
                str(self.cpu),
                "stress-ng",
                "--cpu",
                str(self.workers),
                "--cpu-method",
                "loop",
                "--timeout",
                "600s",
                "--quiet",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,
        )

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


_MONITOR_LINE = re.compile(r"^(\d+\.\d+) \[\d+ [^\]]*\] (.*)$")
_ARG = re.compile(r'"((?:[^"\\]|\\.)*)"')


@dataclass
class Executed:
    ts: float  # server wall clock, seconds
    args: list[str]


@dataclass
class MonitorTap:
    """Records, in a server's execution order, the commands that mention a substring."""

    server: RedisServer
    needle: str
    commands: list[Executed] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.stop_flag = threading.Event()
        self.conn = self.server.conn(timeout=0.5)
        self.conn.send("MONITOR")
        self.conn.read()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        needle = self.needle
        while not self.stop_flag.is_set():
            try:
                line = self.conn.read()
            except TimeoutError:
                continue
            except (OSError, ConnectionError, RespError):
                return
            if not isinstance(line, str) or needle not in line:
                continue
            m = _MONITOR_LINE.match(line)
            if m:
                args = [a.encode().decode("unicode_escape") for a in _ARG.findall(m.group(2))]
                self.commands.append(Executed(float(m.group(1)), args))

    def stop(self) -> None:
        self.stop_flag.set()
        self.thread.join(3)
        self.conn.close()


def renewals_after_release(taps: list[MonitorTap], releases: dict[str, float]) -> list[str]:
    """Renewals ("s<token>" in the watchdog's batch script) that a server
    executed after it executed the release of that token. `releases` maps a
    token to the wall-clock time its release call was made (before sending),
    so the first command with the bare token on a server after that time is
    the release there."""
    found = []
    for tap in taps:
        released: dict[str, float] = {}
        for c in tap.commands:
            for a in c.args:
                if a in releases and c.ts >= releases[a] and a not in released:
                    released[a] = c.ts
                elif a.startswith("s") and a[1:] in released and c.ts > released[a[1:]]:
                    found.append(
                        f"{tap.server.name}: renewal of {a[1:]} executed "
                        f"{(c.ts - released[a[1:]]) * 1000:.1f} ms after its release"
                    )
    return found
