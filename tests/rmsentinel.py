"""A real Sentinel deployment for the Python, CLI, chaos tests and the bench.

    with Sentinels() as sd:                      # 1 master + 2 replicas + 3 sentinels
        sd.url                                   # redis+sentinel://127.0.0.1:s1,...,127.0.0.1:s3/mymaster
        sd.master_port()                         # the master as the sentinels name it now
        sd.failover()                            # SENTINEL FAILOVER, waits for the switch and for agreement
        sd.kill_master()                         # SIGKILL, returns the node (restart it with node.start())

Data nodes and sentinels run on free loopback ports in temporary
directories, with a short down-after-milliseconds (1000 ms by default) and
failover-timeout, so a failover takes a couple of seconds. start() returns
once the master's replicas are in sync and every sentinel names the same
master, knows the two other sentinels and both replicas, and reports that a
failover can be authorised (SENTINEL CKQUORUM). Everything is killed on exit.

Data nodes and sentinels are tests/rmserver.py's Servers, so its rules hold
here too: the binary ($REDMUTEX_TEST_SERVER, default redis-server; run with
--sentinel for the sentinels, as valkey-server --sentinel is), the shared
configuration, and a failure (never a skip) when there is no server.
Options: a password on the data nodes (`password`), on the sentinels
(`sentinel_password`). Needs only the standard library.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
import time
from typing import Any

import rmserver
from rmserver import Server, _encode, _read, free_port

SERVICE = "mymaster"


def command(port: int, *args: Any, password: str | None = None, timeout: float = 5.0) -> Any:
    """One command on a fresh connection to 127.0.0.1:port (AUTH first when a password is given)."""
    if not password:
        return rmserver.command(port, *args, timeout=timeout)
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        f = s.makefile("rb")
        s.sendall(_encode(("AUTH", password)))
        _read(f)
        s.sendall(_encode(args))
        return _read(f)


class Proc(Server):
    """One data node or sentinel: a Server (tests/rmserver.py) in its own directory, on a port kept
    across restarts (a node restarted as a replica comes back where the sentinels knew it)."""

    def __init__(self, workdir: str, kind: str, password: str | None) -> None:
        args = ["--sentinel"] if kind == "sentinel" else []
        super().__init__(tempfile.mkdtemp(prefix=kind + "-", dir=workdir), args=args, port=free_port())
        self.kind = kind
        self.password = password

    def write_conf(self, text: str) -> None:
        """This node's own configuration, after rmserver.conf's, for its next start."""
        self.conf = text

    def start(self, *args: str) -> Proc:
        super().start(*args)
        return self

    def command(self, *args: Any, timeout: float = 5.0) -> Any:
        return command(self.port, *args, password=self.password, timeout=timeout)


class Sentinels:
    def __init__(
        self,
        replicas: int = 2,
        sentinels: int = 3,
        down_after_ms: int = 1000,
        failover_timeout_ms: int = 2000,
        password: str | None = None,
        sentinel_password: str | None = None,
        service: str = SERVICE,
    ) -> None:
        self.workdir = tempfile.mkdtemp(prefix="redmutex-sentinel-")
        self.service = service
        self.password = password
        self.sentinel_password = sentinel_password
        self.down_after_ms = down_after_ms
        self.failover_timeout_ms = failover_timeout_ms
        self.nodes = [Proc(self.workdir, "node", password) for _ in range(1 + replicas)]
        self.sentinels = [Proc(self.workdir, "sentinel", sentinel_password) for _ in range(sentinels)]

    # ---- addresses ----------------------------------------------------------

    @property
    def url(self) -> str:
        return self.url_with()

    def url_with(
        self, scheme: str = "redis+sentinel", userinfo: str = "", query: str = "", db: int = 0
    ) -> str:
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
        tail = f"/{db}" if db else ""
        return f"{scheme}://{userinfo}{hosts}/{self.service}{tail}" + (f"?{query}" if query else "")

    def node(self, port: int) -> Proc:
        return next(n for n in self.nodes if n.port == port)

    def live_sentinel(self) -> Proc:
        return next(s for s in self.sentinels if s.alive)

    def master_port(self) -> int:
        """The master's port as the first live sentinel names it."""
        addr = self.live_sentinel().command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.service)
        return int(addr[1])

    def master(self) -> Proc:
        return self.node(self.master_port())

    def role(self, port: int) -> str:
        r = self.node(port).command("ROLE")
        return r[0].decode() if isinstance(r, list) else "?"

    # ---- life -----------------------------------------------------------------

    def _node_conf(self, replica_of: int | None) -> str:
        text = "repl-diskless-sync yes\nrepl-diskless-sync-delay 0\n"
        if self.password:
            text += f"requirepass {self.password}\nmasterauth {self.password}\n"
        if replica_of:
            text += f"replicaof 127.0.0.1 {replica_of}\n"
        return text

    def _sentinel_conf(self, master_port: int) -> str:
        s = self.service
        text = (
            f"sentinel monitor {s} 127.0.0.1 {master_port} 2\n"
            f"sentinel down-after-milliseconds {s} {self.down_after_ms}\n"
            f"sentinel failover-timeout {s} {self.failover_timeout_ms}\n"
            f"sentinel parallel-syncs {s} 2\n"
        )
        if self.password:
            text += f"sentinel auth-pass {s} {self.password}\n"
        if self.sentinel_password:
            text += f"requirepass {self.sentinel_password}\nsentinel sentinel-pass {self.sentinel_password}\n"
        return text

    def start(self) -> Sentinels:
        master = self.nodes[0]
        for k, n in enumerate(self.nodes):
            n.write_conf(self._node_conf(None if k == 0 else master.port))
            n.start()
        self.wait_replicas_in_sync(master.port, len(self.nodes) - 1)
        for s in self.sentinels:
            s.write_conf(self._sentinel_conf(master.port))
            s.start()
            # INFO every second (not 10): the sentinels' view of each replica (and of a demoted master) is
            # fresh when a test faults the deployment.
            s.command("SENTINEL", "DEBUG", "info-period", 1000)
        self.wait_agreed(master.port)
        return self

    def stop(self) -> None:
        for p in self.sentinels + self.nodes:
            p.kill()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> Sentinels:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- waiting ----------------------------------------------------------------

    def replicas_in_sync(self, master_port: int) -> int:
        """Replicas the master lists as online (ROLE) whose link is up."""
        try:
            r = self.node(master_port).command("ROLE")
        except OSError:
            return -1
        if not isinstance(r, list) or r[0] != b"master":
            return -1
        n = 0
        for _ip, port, _off in r[2]:
            try:
                info = self.node(int(port)).command("INFO", "replication")
            except OSError:
                continue
            if isinstance(info, bytes) and b"master_link_status:up" in info:
                n += 1
        return n

    def wait_replicas_in_sync(self, master_port: int, want: int, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while self.replicas_in_sync(master_port) < want:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the replicas of 127.0.0.1:{master_port} did not come in sync")
            time.sleep(0.05)

    def agreed(self, master_port: int) -> bool:
        """The master's replicas are in sync, and every live sentinel names it, knows the
        other live sentinels and can authorise a failover (SENTINEL CKQUORUM)."""
        return self.why_not_agreed(master_port) == ""

    def why_not_agreed(self, master_port: int) -> str:
        live = [s for s in self.sentinels if s.alive]
        replicas = sum(1 for n in self.nodes if n.alive) - 1
        in_sync = self.replicas_in_sync(master_port)
        if in_sync < replicas:
            roles = {n.port: self.role(n.port) for n in self.nodes if n.alive}
            return f"{in_sync} of {replicas} replicas in sync (roles {roles})"
        for s in live:
            try:
                addr = s.command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.service)
                others = s.command("SENTINEL", "SENTINELS", self.service)
                quorum = s.command("SENTINEL", "CKQUORUM", self.service)
            except OSError as e:
                return f"sentinel {s.port}: {e}"
            if not isinstance(addr, list) or int(addr[1]) != master_port:
                return f"sentinel {s.port} names {addr!r}"
            if not isinstance(others, list) or len(others) < len(live) - 1:
                return (
                    f"sentinel {s.port} knows {len(others) if isinstance(others, list) else others!r} others"
                )
            if not isinstance(quorum, str) or not quorum.startswith("OK"):
                return f"sentinel {s.port}: CKQUORUM {quorum!r}"
            seen = self.replicas_seen(s, master_port)
            if seen < replicas:
                return f"sentinel {s.port} sees {seen} of {replicas} replicas follow {master_port}"
        return ""

    def replicas_seen(self, s: Proc, master_port: int) -> int:
        """Replicas sentinel s sees following master_port with their link up (its last INFO of each)."""
        try:
            reps = s.command("SENTINEL", "REPLICAS", self.service)
        except OSError:
            return -1
        n = 0
        for r in reps if isinstance(reps, list) else []:
            f = dict(zip(r[::2], r[1::2]))
            flags = f.get(b"flags", b"")
            if (
                f.get(b"master-link-status") == b"ok"
                and int(f.get(b"master-port", 0)) == master_port
                and b"s_down" not in flags
                and b"disconnected" not in flags
            ):
                n += 1
        return n

    def wait_agreed(self, master_port: int, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not self.agreed(master_port):
            if time.monotonic() > deadline:
                why = self.why_not_agreed(master_port)
                raise RuntimeError(f"the sentinels did not agree on 127.0.0.1:{master_port}: {why}")
            time.sleep(0.05)

    def wait_switch(self, old_port: int, timeout: float = 30.0) -> int:
        """Waits until every live sentinel names a master other than old_port; returns its port."""
        deadline = time.monotonic() + timeout
        while True:
            ports = set()
            for s in self.sentinels:
                if not s.alive:
                    continue
                try:
                    addr = s.command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.service)
                    ports.add(int(addr[1]))
                except (OSError, TypeError):
                    ports.add(-1)
            if len(ports) == 1 and old_port not in ports and -1 not in ports:
                new = ports.pop()
                if self.role(new) == "master":
                    return new
            if time.monotonic() > deadline:
                raise RuntimeError(f"the sentinels did not switch away from 127.0.0.1:{old_port}")
            time.sleep(0.02)

    # ---- faults -------------------------------------------------------------------

    def failover(self, settle: bool = True) -> int:
        """SENTINEL FAILOVER; returns the new master's port once every sentinel names it (and, with settle,
        once the deployment is whole again: replicas in sync, sentinels agreed)."""
        old = self.master_port()
        deadline = time.monotonic() + 30
        while True:
            r = self.live_sentinel().command("SENTINEL", "FAILOVER", self.service)
            if r == "OK":
                break
            # A sentinel still finishing the last failover (reconfiguring replicas) says INPROG, one
            # whose view of the replicas is not fresh yet (its next INFO round) NOGOODSLAVE.
            busy = "INPROG" in str(r) or "NOGOODSLAVE" in str(r)
            if not busy or time.monotonic() > deadline:
                raise RuntimeError(f"SENTINEL FAILOVER: {r}")
            time.sleep(0.05)
        new = self.wait_switch(old)
        if settle:
            new = self.settle(new)
        return new

    def kill_master(self) -> Proc:
        m = self.master()
        m.kill()
        return m

    def restart_as_replica(self, node: Proc, master_port: int | None = None) -> None:
        """Restarts a killed data node as a replica of master_port (default: the master as the first
        live sentinel names it - right after a switch, pass the new master: that one may not know yet)."""
        node.write_conf(self._node_conf(master_port or self.master_port()))
        node.start()

    def restart_as_master(self, node: Proc) -> None:
        """Restarts a killed data node as a master, empty (no persistence): a crashed master coming back."""
        node.write_conf(self._node_conf(None))
        node.start()

    def settle(self, master_port: int | None = None, timeout: float = 30.0) -> int:
        """Waits until every live data node but the master is its replica in sync and the sentinels agree;
        returns the master's port. A demoted master is made a replica by the sentinels only at their next
        INFO round: done here at once, as they would. The master is asked of the sentinels again each
        round (master_port is only the first guess): what they name right after a fault may not be what
        they settle on. Nodes are pointed only at a master that says it is one."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                master = self.master_port()
            except (OSError, TypeError, IndexError, StopIteration):
                master = master_port or 0
            known = any(n.port == master for n in self.nodes)
            if known and self.node(master).alive and self.master_of(master) == 0:
                for n in self.nodes:
                    if n.alive and n.port != master and self.master_of(n.port) != master:
                        with contextlib.suppress(OSError):
                            n.command("REPLICAOF", "127.0.0.1", master)
                why = self.why_not_agreed(master)
                if not why:
                    return master
            else:
                why = f"the sentinels name {master}, which is no master"
            if time.monotonic() > deadline:
                raise RuntimeError(f"the deployment did not settle in {timeout} s: {why}")
            time.sleep(0.05)

    def master_of(self, port: int) -> int:
        """The port a replica replicates from (ROLE), 0 for a master, -1 when it does not answer."""
        try:
            r = self.node(port).command("ROLE")
        except OSError:
            return -1
        if isinstance(r, list) and r[0] == b"slave":
            return int(r[2])
        return 0


def serve() -> None:
    """For tests in other languages: starts a deployment, prints "URL <url>" and
    serves commands read from stdin, one per line, each answered with one line:
    "master" (the master's port), "failover" (SENTINEL FAILOVER, settled: the
    new master's port), "kill" (SIGKILL of the master: the new master's port
    once the sentinels switched). At end of input it stops.

    With --url-file PATH instead (for a language without two-way pipes): writes
    "URL <url>" and "MASTER <port>" lines to PATH once up, and stops at SIGTERM."""
    import signal
    import sys

    args = sys.argv[1:]
    with Sentinels() as sd:
        if args[:1] == ["--url-file"]:
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
            tmp = args[1] + ".tmp"
            with open(tmp, "w") as f:
                f.write(f"URL {sd.url}\nMASTER {sd.master_port()}\n")
            os.rename(tmp, args[1])
            signal.sigwait({signal.SIGTERM})
            return
        print("URL", sd.url, flush=True)
        for line in sys.stdin:
            cmd = line.strip()
            if cmd == "master":
                print(sd.master_port(), flush=True)
            elif cmd == "failover":
                print(sd.failover(), flush=True)
            elif cmd == "kill":
                old = sd.kill_master()
                print(sd.wait_switch(old.port), flush=True)
            else:
                print("ERR unknown command", flush=True)


if __name__ == "__main__":
    serve()
