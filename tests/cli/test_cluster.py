"""redmutex on a Redis Cluster: the same -u URL / REDMUTEX_URL, routed by slot.

One real cluster (3 masters + 3 replicas, tests/rmcluster.py) for the module.
REDMUTEX_URL's rule: a comma followed by host:port adds a seed to the URL
before it; a comma followed by a scheme starts the next deployment.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Iterator

import pytest

from conftest import Cli, wait_until

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from rmcluster import Cluster


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with Cluster(masters=3, replicas=1) as cl:
        yield cl


@pytest.fixture
def ccli(redmutex_bin: str, cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cli]:
    c = Cli(
        redmutex_bin, cluster.url, str(tmp_path_factory.mktemp("work")), str(tmp_path_factory.mktemp("san"))
    )
    yield c
    c.stop_all()
    reports = c.sanitizer_reports()
    assert not reports, reports


def test_run_holds_names_on_every_master_through_a_seed_list_in_redmutex_url(
    ccli: Cli, cluster: Cluster
) -> None:
    owners = set()
    for k in range(12):
        name = f"cli:cluster:{k}"
        owner = cluster.owner(name)
        owners.add(owner)
        # CMD sees the lock held on the master of its slot.
        res = ccli.run("run", name, "--", "sh", "-c", f"test -n \"$(redis-cli -p {owner} GET '{name}')\"")
        assert res.returncode == 0, res.stderr
        assert cluster.command(owner, "EXISTS", name) == 0
    assert len(owners) == 3


def test_a_busy_name_on_a_cluster_is_refused_with_75(ccli: Cli, cluster: Cluster) -> None:
    holder = ccli.start("run", "cli:busy", "--", "sleep", "30")
    owner = cluster.owner("cli:busy")
    deadline = time.monotonic() + 10
    while not cluster.command(owner, "EXISTS", "cli:busy") and time.monotonic() < deadline:
        time.sleep(0.02)
    res = ccli.run("run", "-n", "cli:busy", "--", "true")
    assert res.returncode == 75
    holder.terminate()


def test_a_seed_list_given_with_u_works_with_its_first_seed_down(ccli: Cli, cluster: Cluster) -> None:
    from conftest import free_port

    url = f"redis://127.0.0.1:{free_port()},127.0.0.1:{cluster.nodes[2].port}/0"
    res = ccli.run("run", "-u", url, "cli:seed", "--", "true")
    assert res.returncode == 0, res.stderr


def test_status_reads_a_lock_on_its_slots_master(ccli: Cli, cluster: Cluster) -> None:
    import json

    for kind, name in (("lock", "cli:status:plain"), ("rlock", "{cli}:status:re")):
        owner = cluster.owner(name)
        holder = ccli.start("run", "--kind", kind, "--fence-env", "F", name, "--", "sleep", "30")
        wait_until(lambda n=name, o=owner: cluster.command(o, "EXISTS", n), 10, "the lock to be taken")
        res = ccli.run("status", "--json", name)
        assert res.returncode == 0, res.stderr
        doc = json.loads(res.stdout)
        assert doc["held"] is True and doc["kind"] == kind and doc["holds"] == 1
        assert 0 < doc["ttl_ms"] <= 30000
        # Redisson's naming: braces added unless the name has its own hash tag.
        fence_key = f"redisson_lock_token:{name}" if "{" in name else f"redisson_lock_token:{{{name}}}"
        assert doc["fence"] == int(cluster.command(owner, "GET", fence_key))
        holder.terminate()
        holder.wait(10)
        wait_until(lambda n=name, o=owner: not cluster.command(o, "EXISTS", n), 10, "the lock to be released")
        res = ccli.run("status", name)
        assert res.returncode == 1 and res.stdout.startswith(f"{name}: free"), res.stdout + res.stderr


def test_release_force_on_a_cluster_deletes_on_the_slots_master_and_wakes_a_waiter(
    ccli: Cli, cluster: Cluster
) -> None:
    name = "cli:force"
    owner = cluster.owner(name)
    cluster.command(owner, "SET", name, "tok", "PX", 60000)
    waiter = ccli.start("run", "--wait", "30", name, "--", "echo", "waiter ran")
    wait_until(
        lambda: cluster.command(owner, "PUBSUB", "SHARDNUMSUB", f"redisson_lock__channel:{{{name}}}")[1] >= 1,
        10,
        "the waiter to subscribe on the slot's master",
    )
    t0 = time.monotonic()
    res = ccli.run("release", "--force", name)
    assert res.returncode == 0, res.stderr
    out, err = waiter.communicate(timeout=10)
    assert waiter.returncode == 0, err
    assert out == "waiter ran\n"
    assert time.monotonic() - t0 < 5.0  # woken by the sharded release message, not its 30 s wait
    assert cluster.command(owner, "EXISTS", name) == 0
    res = ccli.run("release", "--force", name)
    assert res.returncode == 1 and "not held" in res.stderr


def test_run_permits_holds_a_semaphore_permit_on_its_slots_master(ccli: Cli, cluster: Cluster) -> None:
    for name in ("cli:csem:a", "cli:csem:b", "cli:csem:c"):
        owner = cluster.owner(name)
        check = (
            f"test \"$(redis-cli -p {owner} GET '{name}')\" = 1 && "
            f"test \"$(redis-cli -p {owner} ZCARD '{{{name}}}:timeout')\" = 1"
        )
        res = ccli.run("run", "--permits", "2", name, "--", "sh", "-c", check)
        assert res.returncode == 0, res.stderr
        assert cluster.command(owner, "GET", name) == b"2"
        assert cluster.command(owner, "EXISTS", f"{{{name}}}:timeout") == 0


def test_status_reads_a_lock_on_a_cluster_through_the_librarys_routing(ccli: Cli, cluster: Cluster) -> None:
    name = "cli:status"
    owner = cluster.owner(name)
    cluster.command(owner, "SET", name, "cluster-token-12345678", "PX", 60000)
    cluster.command(owner, "SET", f"redisson_lock_token:{{{name}}}", 9)
    res = ccli.run("status", "--json", name)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["held"] is True and doc["kind"] == "lock" and doc["owner"] == "cluster-"
    assert doc["fence"] == 9 and 0 < doc["ttl_ms"] <= 60000
    cluster.command(owner, "DEL", name)
    res = ccli.run("status", name)
    assert res.returncode == 1, res.stderr
    assert "free" in res.stdout and "fence   9" in res.stdout
