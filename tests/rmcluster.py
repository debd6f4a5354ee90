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


class Node:
    """One cluster node: a Server (tests/rmserver.py) with cluster mode on."""

    def __init__(self, workdir: str, args: Sequence[str] = ()) -> None:
        self.dir = tempfile.mkdtemp(prefix="node-", dir=workdir)
        # The bus port is chosen too: port + 10000 may be out of range or taken.
        conf = (
            "cluster-enabled yes\ncluster-config-file nodes.conf\ncluster-node-timeout 1000\n"
            f"cluster-port {free_port()}\n"
        )
        self.server = Server(self.dir, conf=conf, args=args, port=free_port())

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
    def __init__(self, masters: int = 3, replicas: int = 1, args: Sequence[str] = ()) -> None:
        self.masters, self.replicas = masters, replicas
        self.workdir = tempfile.mkdtemp(prefix="redmutex-cluster-")
        self.nodes = [Node(self.workdir, args) for _ in range(masters * (1 + replicas))]

    @property
    def url(self) -> str:
        return "redis://" + ",".join(f"127.0.0.1:{n.port}" for n in self.nodes) + "/0"

    def command(self, port: int, *args: Any) -> Any:
        return command(port, *args)

    def any_port(self) -> int:
        return next(n.port for n in self.nodes if n.alive)

    def owner(self, key: str | bytes) -> int:
        """The port of the master that owns key's slot."""
        slot = command(self.any_port(), "CLUSTER", "KEYSLOT", key)
        for first, last, master, *_ in command(self.any_port(), "CLUSTER", "SLOTS"):
            if first <= slot <= last:
                return int(master[1])
        raise RuntimeError(f"slot {slot} has no master")

    def ok(self) -> bool:
        owners = set()
        for n in self.nodes:
            if not n.alive:
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
