"""redmutex status and redmutex release --force."""

from __future__ import annotations

import json
import os
import socket
import time

from conftest import Cli, Redis, RedisServer, wait_for_subscribers, wait_until


def status_json(cli: Cli, name: str = "job") -> tuple[int, dict]:
    res = cli.run("status", "--json", name)
    assert res.stderr == ""
    return res.returncode, json.loads(res.stdout)


def hold(cli: Cli, r: Redis, *args: str) -> None:
    cli.start("run", *args, "job", "--", "sleep", "60")
    wait_until(lambda: r.cmd("EXISTS", "job"), 10, "the lock to be taken")


def test_status_of_a_free_lock_exits_1(cli: Cli) -> None:
    res = cli.run("status", "job")
    assert res.returncode == 1
    assert res.stdout.startswith("job: free")
    code, doc = status_json(cli)
    assert code == 1
    assert doc["held"] is False and doc["kind"] is None and doc["owner"] is None and doc["ttl_ms"] is None


def test_status_of_a_plain_lock_shows_owner_prefix_ttl_and_fence(cli: Cli, r: Redis) -> None:
    hold(cli, r, "--fence-env", "F")
    token = r.cmd("GET", "job")
    assert isinstance(token, str)
    code, doc = status_json(cli)
    assert code == 0
    assert doc["held"] is True and doc["kind"] == "lock"
    assert doc["owner"] == token[:8], "only the start of the token: the whole token lets anyone release it"
    assert doc["holds"] == 1
    assert 0 < doc["ttl_ms"] <= 30000
    assert doc["fence"] == int(r.cmd("GET", "redisson_lock_token:{job}"))  # type: ignore[arg-type]
    assert doc["servers"][0]["reachable"] is True and doc["servers"][0]["type"] == "string"
    text = cli.run("status", "job")
    assert text.returncode == 0
    assert token[:8] in text.stdout and token not in text.stdout
    assert "kind    lock" in text.stdout


def test_status_of_a_reentrant_lock_shows_the_redisson_field(cli: Cli, r: Redis) -> None:
    hold(cli, r, "--kind", "rlock")
    field, count = r.cmd("HGETALL", "job")  # type: ignore[misc]
    code, doc = status_json(cli)
    assert code == 0
    assert doc["kind"] == "rlock" and doc["owner"] == field and doc["holds"] == int(count) == 1
    assert doc["fence"] is None


def test_status_of_a_lock_without_ttl_reports_minus_one(cli: Cli, r: Redis) -> None:
    r.cmd("SET", "job", "redis-py-token-without-timeout")  # redis-py Lock(timeout=None)
    code, doc = status_json(cli)
    assert code == 0 and doc["ttl_ms"] == -1
    assert "never expires" in cli.run("status", "job").stdout


def test_status_json_escapes_any_name(cli: Cli, r: Redis) -> None:
    name = 'we"ird\\name\t\u00e9'
    r.cmd("SET", name, "t", "PX", 60000)
    code, doc = status_json(cli, name)
    assert code == 0 and doc["name"] == name
    raw = name.encode() + b"\xff"  # not UTF-8: shown as U+FFFD, the output still parses
    code, doc = status_json(cli, os.fsdecode(raw))
    assert code == 1 and doc["name"] == name + "\ufffd"


def test_status_of_a_key_that_is_not_a_lock_exits_65(cli: Cli, r: Redis) -> None:
    r.cmd("RPUSH", "job", "x")
    res = cli.run("status", "job")
    assert res.returncode == 65
    assert "not a lock" in res.stderr


def test_release_needs_force_and_changes_nothing_without_it(cli: Cli, r: Redis) -> None:
    r.cmd("SET", "job", "tok", "PX", 60000)
    res = cli.run("release", "job")
    assert res.returncode == 64
    assert "--force" in res.stderr
    assert r.cmd("GET", "job") == "tok"


def subscribe(server: RedisServer, channel: str) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    s.sendall(b"*2\r\n$9\r\nSUBSCRIBE\r\n$%d\r\n%s\r\n" % (len(channel), channel.encode()))
    data = b""
    while data.count(b"\r\n") < 6:  # the subscribe confirmation
        data += s.recv(4096)
    return s


def test_release_force_deletes_and_wakes_waiters(cli: Cli, r: Redis, server: RedisServer) -> None:
    r.cmd("SET", "job", "tok", "PX", 60000)
    sub = subscribe(server, "redisson_lock__channel:{job}")
    waiter = cli.start("run", "--wait", "30", "job", "--", "echo", "waiter ran")
    wait_for_subscribers(r, "job", 2)
    t0 = time.monotonic()
    res = cli.run("release", "--force", "job")
    assert res.returncode == 0, res.stderr
    assert b"message" in sub.recv(4096), "the release is published"
    out, err = waiter.communicate(timeout=10)
    assert waiter.returncode == 0, err
    assert out == "waiter ran\n"
    assert time.monotonic() - t0 < 5.0
    sub.close()


def test_release_force_of_a_reentrant_lock_and_of_nothing(cli: Cli, r: Redis) -> None:
    r.cmd("HSET", "job", "some-java-client:1", 2)
    assert cli.run("release", "--force", "job").returncode == 0
    assert r.cmd("EXISTS", "job") == 0
    res = cli.run("release", "--force", "job")
    assert res.returncode == 1
    assert "not held" in res.stderr


def test_release_force_refuses_a_key_that_is_not_a_lock(cli: Cli, r: Redis) -> None:
    r.cmd("RPUSH", "job", "x")
    assert cli.run("release", "--force", "job").returncode == 65
    assert r.cmd("LRANGE", "job", 0, -1) == ["x"]
