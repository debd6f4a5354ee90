"""A real Redis (or Valkey) Cluster for the Python, CLI and chaos tests.

    with Cluster(masters=3, replicas=1) as cl:
        cl.url            # redis://127.0.0.1:p1,127.0.0.1:p2,.../0 (every node a seed)
        cl.command(port, "CLUSTER", "INFO")

Nodes are started on free loopback ports (each with its own cluster bus
port) in temporary directories, joined with ``redis-cli --cluster create``,
and waited for until every node reports cluster_state:ok, every replica is
in sync and all agree on the owner of slot 0. They are killed on exit.

Nodes are tests/rmserver.py's Servers, so its rules hold here too: the
binary ($REDMUTEX_TEST_SERVER), the configuration, and a failure (never a
skip) when there is no server. The cluster tool is $REDMUTEX_TEST_CLI, else
the "-cli" next to that server (valkey-server -> valkey-cli), else redis-cli.
Needs only the standard library.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from typing import Any, Sequence

# (_encode and _read too: helpers written against this module's earlier RESP client import them.)
from rmserver import Server, _encode, _read, cli_binary, command, free_port, server_binary

__all__ = ["Cluster", "Node", "_encode", "_read", "cli_binary", "command", "free_port", "server_binary"]


class _UidServer(Server):
    """A Server whose process runs as another uid (a fault injector tells its packets apart by it)."""

    def __init__(self, uid: int, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.uid = uid

    def _spawn(self) -> None:
        os.chown(self.workdir, self.uid, self.uid)
        for name in os.listdir(self.workdir):
            os.chown(os.path.join(self.workdir, name), self.uid, self.uid)
        conf = self._write_conf()
        os.chown(conf, self.uid, self.uid)
        cmd = [
            "setpriv",
            f"--reuid={self.uid}",
            f"--regid={self.uid}",
            "--clear-groups",
            "--pdeathsig",
            "KILL",
        ]
        self.proc = subprocess.Popen(
            [*cmd, "--", server_binary(), conf, *self.args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.paused = False


class Node:
    """One cluster node: a Server (tests/rmserver.py) with cluster mode on. Its port and bus
    port stay the same across restarts (start() after kill(): it comes back empty, with its
    nodes.conf, and rejoins). uid: run it as that uid."""

    def __init__(self, workdir: str, args: Sequence[str] = (), uid: int | None = None) -> None:
        self.dir = tempfile.mkdtemp(prefix="node-", dir=workdir)
        # The bus port is chosen too: port + 10000 may be out of range or taken.
        self.bus_port = free_port()
        self.uid = uid
        conf = (
            "cluster-enabled yes\ncluster-config-file nodes.conf\ncluster-node-timeout 1000\n"
            f"cluster-port {self.bus_port}\n"
        )
        if uid is None:
            self.server = Server(self.dir, conf=conf, args=args, port=free_port())
        else:
            self.server = _UidServer(uid, self.dir, conf=conf, args=args, port=free_port())

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def proc(self) -> subprocess.Popen[bytes] | None:
        return self.server.proc

    def start(self) -> None:
        self.server.start()

    def kill(self) -> None:
        self.server.kill()

    @property
    def alive(self) -> bool:
        return self.server.alive


class Cluster:
    def __init__(
        self,
        masters: int = 3,
        replicas: int = 1,
        args: Sequence[str] = (),
        uids: dict[int, int] | None = None,
    ) -> None:
        """uids: node index -> the uid that node runs as (the others run as this process)."""
        self.masters, self.replicas = masters, replicas
        self.workdir = tempfile.mkdtemp(prefix="redmutex-cluster-")
        os.chmod(self.workdir, 0o755)
        self.nodes = [Node(self.workdir, args, (uids or {}).get(i)) for i in range(masters * (1 + replicas))]
        self.unreachable: set[int] = set()  # ports of nodes a fault cut off: not asked meanwhile

    @property
    def url(self) -> str:
        return "redis://" + ",".join(f"127.0.0.1:{n.port}" for n in self.nodes) + "/0"

    def command(self, port: int, *args: Any) -> Any:
        return command(port, *args)

    def any_port(self) -> int:
        return next(n.port for n in self.nodes if n.alive and n.port not in self.unreachable)

    def owner(self, key: str | bytes) -> int:
        """The port of the master that owns key's slot."""
        slot = command(self.any_port(), "CLUSTER", "KEYSLOT", key)
        for first, last, master, *_ in command(self.any_port(), "CLUSTER", "SLOTS"):
            if first <= slot <= last:
                return int(master[1])
        raise RuntimeError(f"slot {slot} has no master")

    def node(self, port: int) -> Node:
        return next(n for n in self.nodes if n.port == port)

    def node_id(self, port: int) -> str:
        return command(port, "CLUSTER", "MYID").decode()

    def master_ports(self) -> list[int]:
        """The masters that own slots, as a live node sees them."""
        return sorted({int(e[2][1]) for e in command(self.any_port(), "CLUSTER", "SLOTS")})

    def replica_of(self, port: int) -> Node | None:
        """A live replica of the master at port whose link to it is up."""
        for n in self.nodes:
            if n.alive and n.port != port and n.port not in self.unreachable:
                info = command(n.port, "INFO", "replication")
                if (
                    isinstance(info, bytes)
                    and f"master_port:{port}\r\n".encode() in info
                    and b"master_link_status:up" in info
                ):
                    return n
        return None

    def migrate(self, slot: int, to_port: int, midway: Any = None) -> None:
        """Moves slot and its keys to the master at to_port: IMPORTING/MIGRATING, MIGRATE ... KEYS,
        then SETSLOT NODE on every master (the new owner first). midway() runs once the slot is marked."""
        frm = next(int(e[2][1]) for e in command(self.any_port(), "CLUSTER", "SLOTS") if e[0] <= slot <= e[1])
        if frm == to_port:
            return
        src_id, dst_id = self.node_id(frm), self.node_id(to_port)
        for port, args in ((to_port, ("IMPORTING", src_id)), (frm, ("MIGRATING", dst_id))):
            r = command(port, "CLUSTER", "SETSLOT", slot, *args)
            if isinstance(r, Exception):
                raise r
        if midway:
            midway()
        while keys := command(frm, "CLUSTER", "GETKEYSINSLOT", slot, 100):
            r = command(frm, "MIGRATE", "127.0.0.1", to_port, "", 0, 5000, "KEYS", *keys)
            if isinstance(r, Exception):
                raise r
        for port in [to_port, frm, *[p for p in self.master_ports() if p not in (to_port, frm)]]:
            command(port, "CLUSTER", "SETSLOT", slot, "NODE", dst_id)

    def ok(self) -> bool:
        owners = set()
        for n in self.nodes:
            if not n.alive or n.port in self.unreachable:
                continue
            try:
                info = command(n.port, "CLUSTER", "INFO")
                repl = command(n.port, "INFO", "replication")
                slots = command(n.port, "CLUSTER", "SLOTS")
            except OSError:
                return False
            if not isinstance(info, bytes) or b"cluster_state:ok" not in info:
                return False
            if b"role:slave" in repl and b"master_link_status:up" not in repl:
                return False
            if sum(e[1] - e[0] + 1 for e in slots) != 16384:
                return False
            owners.add(next(int(e[2][1]) for e in slots if e[0] == 0))
        return len(owners) == 1

    def wait_ok(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not self.ok():
            if time.monotonic() > deadline:
                raise RuntimeError("the cluster did not reach cluster_state:ok")
            time.sleep(0.05)

    def start(self) -> Cluster:
        for n in self.nodes:
            n.start()
        addrs = [f"127.0.0.1:{n.port}" for n in self.nodes]
        log = os.path.join(self.workdir, "create.log")
        with open(log, "w") as f:
            rc = subprocess.call(
                [
                    cli_binary(),
                    "--cluster",
                    "create",
                    *addrs,
                    "--cluster-replicas",
                    str(self.replicas),
                    "--cluster-yes",
                ],
                stdout=f,
                stderr=subprocess.STDOUT,
            )
        if rc != 0:
            raise RuntimeError(f"cluster create failed (see {log})")
        self.wait_ok()
        return self

    def stop(self) -> None:
        for n in self.nodes:
            n.kill()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> Cluster:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()
