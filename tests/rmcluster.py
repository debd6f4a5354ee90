"""A real Redis (or Valkey) Cluster for the Python, CLI and chaos tests.

    with Cluster(masters=3, replicas=1) as cl:
        cl.url            # redis://127.0.0.1:p1,127.0.0.1:p2,.../0 (every node a seed)
        cl.command(port, "CLUSTER", "INFO")

Nodes are started on free loopback ports (each with its own cluster bus
port) in temporary directories, joined with ``redis-cli --cluster create``,
and waited for until every node reports cluster_state:ok, every replica is
in sync and all agree on the owner of slot 0. They are killed on exit.

The server binary is $REDMUTEX_TEST_SERVER (default redis-server); the
cluster tool is $REDMUTEX_TEST_CLI, else the "-cli" next to that server
(valkey-server -> valkey-cli), else redis-cli. Needs only the standard
library: Redis is spoken to with the small RESP client below.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from typing import Any


def server_binary() -> str:
    return os.environ.get("REDMUTEX_TEST_SERVER") or shutil.which("redis-server") or "/usr/bin/redis-server"


def cli_binary() -> str:
    cli = os.environ.get("REDMUTEX_TEST_CLI")
    if cli:
        return cli
    srv = os.environ.get("REDMUTEX_TEST_SERVER", "")
    if "-server" in srv:
        guess = srv.replace("-server", "-cli")
        if os.access(guess, os.X_OK):
            return guess
    return shutil.which("redis-cli") or "/usr/bin/redis-cli"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _encode(args: tuple[Any, ...]) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        b = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


def _read(f: Any) -> Any:
    line = f.readline()
    if not line:
        raise ConnectionError("closed")
    kind, rest = line[:1], line[1:-2]
    if kind == b"+":
        return rest.decode()
    if kind == b"-":
        return RuntimeError(rest.decode())
    if kind == b":":
        return int(rest)
    if kind == b"$":
        n = int(rest)
        if n < 0:
            return None
        data = f.read(n + 2)[:-2]
        return data
    if kind == b"*":
        n = int(rest)
        return None if n < 0 else [_read(f) for _ in range(n)]
    raise ConnectionError(f"bad reply {line!r}")


def command(port: int, *args: Any, timeout: float = 5.0) -> Any:
    """One command on a fresh connection to 127.0.0.1:port; errors come back as RuntimeError values."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(_encode(args))
        return _read(s.makefile("rb"))


class Node:
    def __init__(self, workdir: str, uid: int | None = None) -> None:
        self.dir = tempfile.mkdtemp(prefix="node-", dir=workdir)
        self.port = free_port()
        self.bus_port = free_port()  # kept across restarts: the other nodes know it
        self.uid = uid  # run as this uid (a fault injector can then tell its packets apart)
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Starts the node (again, after kill(): same port, bus port and nodes.conf; no data)."""
        conf = os.path.join(self.dir, "node.conf")
        with open(conf, "w") as f:
            f.write(
                f'port {self.port}\nbind 127.0.0.1\nsave ""\nappendonly no\ndir {self.dir}\n'
                f"logfile {self.dir}/node.log\nprotected-mode no\ncluster-enabled yes\n"
                f"cluster-config-file nodes.conf\ncluster-node-timeout 1000\ncluster-port {self.bus_port}\n"
            )
        cmd = [server_binary(), conf]
        if self.uid is not None:
            os.chown(self.dir, self.uid, self.uid)
            for name in os.listdir(self.dir):
                os.chown(os.path.join(self.dir, name), self.uid, self.uid)
            cmd = ["setpriv", f"--reuid={self.uid}", f"--regid={self.uid}", "--clear-groups", *cmd]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if command(self.port, "PING") == "PONG":
                    return
            except OSError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError(f"{server_binary()} exited at start (see {self.dir}/node.log)")
            time.sleep(0.02)
        raise RuntimeError("cluster node did not start")

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class Cluster:
    def __init__(self, masters: int = 3, replicas: int = 1, uids: dict[int, int] | None = None) -> None:
        """uids: node index -> the uid that node runs as (others run as this process)."""
        self.masters, self.replicas = masters, replicas
        self.workdir = tempfile.mkdtemp(prefix="redmutex-cluster-")
        os.chmod(self.workdir, 0o755)
        self.nodes = [Node(self.workdir, (uids or {}).get(i)) for i in range(masters * (1 + replicas))]
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


def serve(masters: int, replicas: int) -> None:
    """A cluster for tests in other languages, driven over stdin/stdout.

    Prints ``URL <url>`` once the cluster is up, then answers one line per
    request line: ``owner NAME`` -> the port of the master of NAME's slot,
    ``exists NAME`` -> 1 or 0 on that master. End of input stops the cluster.
    """
    import sys

    with Cluster(masters=masters, replicas=replicas) as cl:
        print("URL " + cl.url, flush=True)
        for line in sys.stdin:
            verb, _, name = line.rstrip("\n").partition(" ")
            if verb == "owner":
                print(cl.owner(name), flush=True)
            elif verb == "exists":
                print(cl.command(cl.owner(name), "EXISTS", name), flush=True)
            else:
                print(f"ERR unknown request {verb!r}", flush=True)


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="Serve a test cluster over stdin/stdout (see serve()).")
    parser.add_argument("command", choices=["serve"])
    parser.add_argument("--masters", type=int, default=3)
    parser.add_argument("--replicas", type=int, default=0)
    args = parser.parse_args()
    serve(args.masters, args.replicas)
