"""Cluster rows K1-K4: the workload against a real Redis Cluster (3 masters + 3
replicas, tests/rmcluster.py) while its masters fail over, its slots move and a
master is cut off. The standalone lock servers of the other rows are not started
(the resource server is); the drivers get the cluster's seed list as their URL.

- K1: SIGKILL of the master of the lock's slot, its replica promoted at once (CLUSTER FAILOVER
  TAKEOVER). No WAIT: UNSAFE (the replica's link is cut first, so the last grant is lost);
  min_replicas=1: SAFE. Needs nft (the link is cut by its two ports).
- K2: CLUSTER FAILOVER (coordinated) of the masters of the workload's names, under load: SAFE.
- K3: the slots of the workload's names moved between masters under load: SAFE, 0 orphans.
- K4: the master cut off from clients and cluster alike (nft), its replica promoted: as K1; the
  old master lives on, unreachable, and rejoins as a replica when the cut heals.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Callable

from .faults import Partitions
from .scenario import Env, Row, Run, run_row, skip_row

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from rmcluster import Cluster, command  # tests/rmcluster.py, shared with the other suites

# K4's nodes run as uids of their own (CUT_UID + index): nft tells a node's packets apart by it.
CUT_UID = 42470


def keys_of(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i}" for i in range(n)]


def is_full(env: Env) -> bool:
    return env.profile.name == "full"


def start_cluster(run: Run, uids: dict[int, int] | None = None) -> Cluster:
    """The row's cluster; its masters are scanned for orphan keys at the end."""
    rc = Cluster(masters=3, replicas=1, uids=uids).start()
    run.cluster.lock_nodes = rc.master_ports
    run.history.harness("cluster", url=rc.url)
    return rc


def wait_owner(rc: Cluster, key: str, port: int, timeout: float = 15.0) -> bool:
    """Waits until every live node names the node at port as the owner of key's slot."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if rc.owner(key) == port and rc.ok():
                return True
        except (OSError, ConnectionError, StopIteration, RuntimeError):
            pass
        time.sleep(0.05)
    return False


def redirects(rc: Cluster) -> str:
    """What the nodes answered instead of running a command (INFO errorstats), for the row's notes."""
    counts = {"MOVED": 0, "ASK": 0, "TRYAGAIN": 0, "CLUSTERDOWN": 0}
    for n in rc.nodes:
        if not n.alive or n.port in rc.unreachable:
            continue
        info = command(n.port, "INFO", "errorstats")
        for line in info.decode().splitlines() if isinstance(info, bytes) else []:
            name, _, rest = line.partition(":count=")
            if name.removeprefix("errorstat_") in counts and rest:
                counts[name.removeprefix("errorstat_")] += int(rest)
    return "the cluster answered " + ", ".join(f"{k} {v}" for k, v in counts.items()) + " times"


def settle(rc: Cluster, timeout: float = 30.0) -> None:
    """Every node back, every replica in sync: ready for the next round."""
    for n in rc.nodes:
        if not n.alive:
            n.start()
    rc.wait_ok(timeout)


# ---- K1 / K4: the master of the lock's slot lost, its replica promoted -----------------------------


def replication_link(master: int) -> int | None:
    """The local port of the master's (only) replica's connection to it (CLIENT LIST TYPE replica)."""
    listing = command(master, "CLIENT", "LIST", "TYPE", "replica")
    for line in listing.decode().splitlines() if isinstance(listing, bytes) else []:
        for field in line.split():
            if field.startswith("addr="):
                return int(field.rsplit(":", 1)[1])
    return None


def _failover_rows(env: Env, sid: str, lose: Callable[[Run, Cluster, int], Callable[[], None]]) -> list[Row]:
    """Each round: a holder is in its critical section on the slot's master; the master is
    lost (lose() returns how to bring it back) and its replica is promoted at once. The
    replica's link to its master is cut (nft, that connection only) to decide what it has:
    without WAIT, before the holder's grant, so that grant is lost with the master and another
    client gets the lock on the promoted replica (UNSAFE: fencing must reject the older
    holder's writes); with min_replicas=1, only after the grant, which WAIT put on the replica
    before acquire returned - the hold must survive (SAFE)."""
    rows = []
    for mode, min_replicas, expect in (("no WAIT", 0, "UNSAFE"), ("min_replicas=1", 1, "SAFE")):

        def body(run: Run, min_replicas: int = min_replicas) -> None:
            lease = run.p.lease_ms
            prefix = f"{sid.lower()}:"
            key = prefix + "0"
            parts = Partitions()
            rc = start_cluster(run, {k: CUT_UID + k for k in range(6)} if sid == "K4" else None)
            try:
                run.start_many(
                    4,
                    keys=1,
                    prefix=prefix,
                    urls=[rc.url],
                    min_replicas=min_replicas,
                    replica_timeout_ms=run.p.cmd_timeout_ms,
                    cs_ms=(lease, 2 * lease),
                    wait_ms=4 * lease,
                )
                run.wait_started()

                def cut_replication(master: int) -> None:
                    link = replication_link(master)
                    if link is None:
                        raise RuntimeError("the master has no replica connected")
                    parts.drop_flow(master, link)
                    run.fault("replication_cut", str(master), "begin", link=link)

                for _ in range(env.profile.rounds):
                    master = rc.owner(key)
                    replica = rc.replica_of(master)
                    if replica is None:
                        run.row.notes.append("no replica in sync: round skipped")
                        settle(rc)
                        continue
                    mark = run.history.mark()
                    if not min_replicas:
                        cut_replication(master)  # writes from now on never reach the replica
                        mark = run.history.mark()
                    if run.history.wait_for(lambda e: e.get("ev") == "cs_read", 15.0, mark) is None:
                        run.row.notes.append("no holder in this round")
                    if min_replicas:
                        cut_replication(master)
                        run.sleep(0.1)
                    restore = lose(run, rc, master)
                    # Promoted at once, as an operator (or a platform) forces it: the cluster's own
                    # failure detection (node timeout + election, 2-3 s) would outlast the holder's
                    # validity at these leases, and hide what a failover can cost.
                    command(replica.port, "CLUSTER", "FAILOVER", "TAKEOVER")
                    run.fault("failover_takeover", str(replica.port))
                    if not wait_owner(rc, key, replica.port):
                        raise RuntimeError("the replica was not promoted")
                    run.fault("promoted", str(replica.port))
                    run.heal()  # from here on acquisitions must work again (C5)
                    run.sleep(2 * lease / 1000)
                    parts.clear()
                    restore()
                    settle(rc)
                run.finish([prefix], keys_of(prefix, 1))
                run.row.notes.append(redirects(rc))
                run.judge()
            finally:
                parts.clear()
                rc.stop()

        rows.append(run_row(env, sid, mode, expect, body, {"n": 0}))
    return rows


def _kill(run: Run, rc: Cluster, master: int) -> Callable[[], None]:
    node = rc.node(master)
    node.kill()
    run.fault("master_killed", str(master))
    return node.start  # it comes back empty and rejoins as the new master's replica


def _cut_off(run: Run, rc: Cluster, master: int) -> Callable[[], None]:
    node = rc.node(master)
    assert node.uid is not None
    Partitions().cut_off(node.uid, [node.port, node.bus_port])
    rc.unreachable.add(master)
    run.fault("master_cut_off", str(master), "begin")

    def heal() -> None:  # the rules went with the round's parts.clear()
        rc.unreachable.discard(master)
        run.fault("master_cut_off", str(master), "end")

    return heal


def k1(env: Env) -> list[Row]:
    if not env.nft.ok:
        return [
            skip_row(env, "K1", m, e, env.nft.reason)
            for m, e in (("no WAIT", "UNSAFE"), ("min_replicas=1", "SAFE"))
        ]
    return _failover_rows(env, "K1", _kill)


def k4(env: Env) -> list[Row]:
    if not env.nft.ok:
        return [
            skip_row(env, "K4", m, e, env.nft.reason)
            for m, e in (("no WAIT", "UNSAFE"), ("min_replicas=1", "SAFE"))
        ]
    if os.geteuid() != 0:
        return [skip_row(env, "K4", "min_replicas=1", "SAFE", "running a node under another uid needs root")]
    return _failover_rows(env, "K4", _cut_off)


# ---- K2: CLUSTER FAILOVER under load -------------------------------------------------------------


def k2(env: Env) -> list[Row]:
    """A coordinated failover (the master stops writes, the replica catches up, then takes
    over) of the masters of the workload's names, round after round, under contention: no
    write is lost, so no WAIT is needed for it to be SAFE."""

    def body(run: Run) -> None:
        prefix = "k2:"
        rc = start_cluster(run)
        try:
            run.start_many(6, keys=3, prefix=prefix, urls=[rc.url], cs_ms=(5, 30), wait_ms=4 * run.p.lease_ms)
            run.wait_started()
            for r in range(env.profile.rounds):
                run.sleep(1.0)
                key = prefix + str(r % 3)
                master = rc.owner(key)
                replica = rc.replica_of(master)
                if replica is None:
                    run.row.notes.append("no replica in sync: round skipped")
                    continue
                command(replica.port, "CLUSTER", "FAILOVER")
                run.fault("cluster_failover", str(replica.port))
                if not wait_owner(rc, key, replica.port):
                    raise RuntimeError("CLUSTER FAILOVER did not complete")
                run.heal()
                settle(rc)
            run.sleep(1.0)
            run.finish([prefix], keys_of(prefix, 3))
            run.row.notes.append(redirects(rc))
            run.judge()
        finally:
            rc.stop()

    return [run_row(env, "K2", "CLUSTER FAILOVER under load", "SAFE", body, {"n": 0})]


# ---- K3: slots moved under load ------------------------------------------------------------------


def k3(env: Env) -> list[Row]:
    """The slot of one of the workload's names moves to another master, again and again, while
    six clients contend for the names: held locks move with their keys (MIGRATE keeps the TTL),
    requests follow MOVED and ASK, half-moved releases retry TRYAGAIN. No double holder, no key
    left behind."""

    def body(run: Run) -> None:
        prefix = "k3:"
        rc = start_cluster(run)
        try:
            run.start_many(6, keys=4, prefix=prefix, urls=[rc.url], cs_ms=(5, 30), wait_ms=4 * run.p.lease_ms)
            run.wait_started()
            moves = 3 * env.profile.rounds
            for _ in range(moves):
                run.sleep(run.rng.uniform(0.2, 0.6))
                key = prefix + str(run.rng.randrange(4))
                slot = command(rc.any_port(), "CLUSTER", "KEYSLOT", key)
                to = run.rng.choice([p for p in rc.master_ports() if p != rc.owner(key)])
                run.fault("slot_migration", str(slot), "begin", to=to)
                # Half moved for a moment: requests meet ASK and TRYAGAIN.
                rc.migrate(slot, to, midway=lambda: run.sleep(run.rng.uniform(0.0, 0.2)))
                run.fault("slot_migration", str(slot), "end", to=to)
            run.heal()
            run.sleep(1.0)
            run.finish([prefix], keys_of(prefix, 4))
            run.row.notes.append(redirects(rc))
            run.judge()
        finally:
            rc.stop()

    return [run_row(env, "K3", "slots moved under load", "SAFE", body, {"n": 0})]
