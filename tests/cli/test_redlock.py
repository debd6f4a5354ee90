"""redmutex over several independent masters (Redlock)."""

from __future__ import annotations

import json
import os

from conftest import Cli, RedisServer, wait_until


def urls(servers: list[RedisServer]) -> list[str]:
    args = []
    for s in servers:
        args += ["-u", s.url]
    return args


def test_redlock_runs_cmd_with_one_of_three_servers_down(cli: Cli, trio: list[RedisServer]) -> None:
    trio[2].stop()
    res = cli.run("run", *urls(trio), "job", "--", "sh", "-c", "echo ran")
    assert res.returncode == 0, res.stderr
    assert res.stdout == "ran\n"
    res = cli.run("run", "-n", *urls(trio), "job", "--", "sh", "-c", "echo ran")
    assert res.returncode == 0, res.stderr
    for s in trio[:2]:
        c = s.client()
        assert c.cmd("EXISTS", "job") == 0
        c.close()


def test_redlock_with_one_server_down_waits_for_the_holder(cli: Cli, trio: list[RedisServer]) -> None:
    trio[1].stop()
    holder = cli.start("run", *urls(trio), "job", "--", "sh", "-c", "touch holding; sleep 1")
    wait_until(lambda: os.path.exists(os.path.join(cli.cwd, "holding")), 10, "the holder to start")
    res = cli.run("run", "--wait", "0.3", *urls(trio), "job", "--", "touch", "ran")
    assert res.returncode == 75, res.stderr
    res = cli.run("run", "--wait", "20", *urls(trio), "job", "--", "sh", "-c", "echo waited")
    assert res.returncode == 0, res.stderr
    assert res.stdout == "waited\n"
    assert holder.wait(10) == 0
    assert not os.path.exists(os.path.join(cli.cwd, "ran"))


def test_redlock_from_redmutex_url_excludes_and_reports(cli: Cli, trio: list[RedisServer]) -> None:
    env = dict(cli.env, REDMUTEX_URL=",".join(s.url for s in trio))
    holder = cli.start("run", "job", "--", "sh", "-c", "touch holding; sleep 60", env=env)
    wait_until(lambda: os.path.exists(os.path.join(cli.cwd, "holding")), 10, "the holder to start")
    assert cli.run("run", "-n", "job", "--", "touch", "ran", env=env).returncode == 75
    trio[0].stop()
    res = cli.run("status", "--json", "job", env=env)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["held"] is True and doc["kind"] == "lock" and len(doc["owner"]) == 8
    assert [s["reachable"] for s in doc["servers"]] == [False, True, True]
    assert "127.0.0.1" in doc["servers"][0]["url"]
    holder.kill()
    assert not os.path.exists(os.path.join(cli.cwd, "ran"))


def test_redlock_with_two_of_three_down_exits_69(cli: Cli, trio: list[RedisServer]) -> None:
    trio[0].stop()
    trio[1].stop()
    res = cli.run("run", "-n", *urls(trio), "job", "--", "touch", "ran")
    assert res.returncode == 69, res.stderr
    assert not os.path.exists(os.path.join(cli.cwd, "ran"))
