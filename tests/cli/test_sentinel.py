"""redmutex behind Sentinel: the same -u URL / REDMUTEX_URL, redis+sentinel://.

One real Sentinel deployment (1 master + 2 replicas + 3 sentinels,
tests/rmsentinel.py) for the module. In REDMUTEX_URL the sentinels' commas
are seeds of the one URL (a comma followed by host:port), and a comma
followed by a scheme starts the next deployment, as everywhere.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Iterator

import pytest

from conftest import Cli

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from rmsentinel import Sentinels, command


@pytest.fixture(scope="module")
def sd() -> Iterator[Sentinels]:
    with Sentinels(sentinel_password="cli-sentinel-secret") as s:
        yield s


def url(sd: Sentinels) -> str:
    return sd.url_with(query=f"sentinel_password={sd.sentinel_password}")


@pytest.fixture
def scli(redmutex_bin: str, sd: Sentinels, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cli]:
    c = Cli(redmutex_bin, url(sd), str(tmp_path_factory.mktemp("work")), str(tmp_path_factory.mktemp("san")))
    yield c
    c.stop_all()
    reports = c.sanitizer_reports()
    assert not reports, reports


def test_run_holds_the_lock_on_the_master_the_sentinels_name(scli: Cli, sd: Sentinels) -> None:
    master = sd.master_port()
    res = scli.run("run", "cli:sn", "--", "sh", "-c", f'test -n "$(redis-cli -p {master} GET cli:sn)"')
    assert res.returncode == 0, res.stderr
    assert command(master, "EXISTS", "cli:sn") == 0
    # The same URL given with -u, and status through it.
    res = scli.run("status", "-u", url(sd), "cli:sn")
    assert res.returncode in (0, 1), res.stderr


def test_a_busy_name_behind_sentinel_is_refused_with_75(scli: Cli, sd: Sentinels) -> None:
    holder = scli.start("run", "cli:sn:busy", "--", "sleep", "30")
    deadline = time.monotonic() + 10
    while not command(sd.master_port(), "EXISTS", "cli:sn:busy"):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    res = scli.run("run", "-n", "cli:sn:busy", "--", "true")
    assert res.returncode == 75
    holder.terminate()


def test_wrong_sentinel_password_is_a_clear_error_without_the_password(scli: Cli, sd: Sentinels) -> None:
    res = scli.run("run", "-u", sd.url_with(query="sentinel_password=hunter22"), "cli:sn:x", "--", "true")
    assert res.returncode not in (0, 75)
    assert "sentinel" in res.stderr and "hunter22" not in res.stderr
