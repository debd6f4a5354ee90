"""redmutex status and redmutex release --force."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time

from conftest import Cli, Redis, RedisServer, Tls, make_certs, wait_for_subscribers, wait_until


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


# ---- every kind, through the library's own connections (TLS, ACL users) ------


def test_status_of_a_read_write_lock_shows_its_mode_writer_and_readers(cli: Cli, r: Redis) -> None:
    # Redisson's RReadWriteLock: a hash with "mode"; a writer that also reads.
    r.cmd("HSET", "job", "mode", "write", "c0ffee:7:write", 1, "c0ffee:7", 2)
    r.cmd("PEXPIRE", "job", 30000)
    code, doc = status_json(cli)
    assert code == 0, doc
    assert doc["kind"] == "rwlock" and doc["mode"] == "write"
    assert doc["owner"] == "c0ffee:7:write" and doc["holds"] == 1 and doc["readers"] == 1
    text = cli.run("status", "job").stdout
    assert "rwlock" in text and "write" in text and "mode" not in text.split("owner")[1].split("\n")[0]
    r.cmd("DEL", "job")
    r.cmd("HSET", "job", "mode", "read", "aaaa:1", 1, "bbbb:2", 3)
    r.cmd("PEXPIRE", "job", 30000)
    code, doc = status_json(cli)
    assert doc["kind"] == "rwlock" and doc["mode"] == "read" and doc["readers"] == 2
    assert doc["owner"] == "aaaa:1", "the first reader, never the mode field"


def test_status_of_a_fair_lock_shows_its_queue(cli: Cli, r: Redis) -> None:
    r.cmd("HSET", "job", "c0ffee:7", 1)
    r.cmd("PEXPIRE", "job", 30000)
    r.cmd("RPUSH", "redisson_lock_queue:{job}", "c0ffee:8", "c0ffee:9")
    code, doc = status_json(cli)
    assert code == 0
    assert doc["kind"] == "fair" and doc["queue"] == 2 and doc["owner"] == "c0ffee:7"
    assert "2 waiting" in cli.run("status", "job").stdout


def test_status_exits_74_when_its_output_cannot_be_written(cli: Cli, r: Redis) -> None:
    r.cmd("SET", "job", "tok", "PX", 60000)
    with open("/dev/full", "w") as full:
        p = subprocess.run(
            [cli.path, "status", "job"],
            cwd=cli.cwd,
            env=cli.env,
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
        )
    assert p.returncode == 74, p.stderr
    assert "cannot write" in p.stderr


def test_status_lists_each_server_with_its_url_redacted(cli: Cli, r: Redis, server: RedisServer) -> None:
    r.cmd("SET", "job", "tok-abcdefghijkl", "PX", 60000)
    r.cmd("CONFIG", "SET", "requirepass", "hunter22")
    try:
        res = cli.run("status", "--json", "-u", f"redis://127.0.0.1:{server.port}?password=hunter22", "job")
    finally:
        r.cmd("AUTH", "hunter22")
        r.cmd("CONFIG", "SET", "requirepass", "")
    assert res.returncode == 0, res.stderr
    assert "hunter22" not in res.stdout + res.stderr
    doc = json.loads(res.stdout)
    assert doc["servers"][0]["reachable"] is True and doc["servers"][0]["owner"] == "tok-abcd"
    assert doc["servers"][0]["url"] == f"redis://127.0.0.1:{server.port}?password=***"


LOCKER = [
    "ACL", "SETUSER", "locker", "on", ">locker-pw", "resetkeys", "resetchannels", "-@all",
    "~app:*", "~redisson_lock_token:{app:*", "~redisson_unlock_latch:{app:*",
    "~redisson_lock__channel:{app:*", "&redisson_lock__channel:{app:*",
    "+set", "+get", "+del", "+pttl", "+pexpire", "+type", "+exists", "+hexists", "+hincrby", "+hget",
    "+incr", "+publish", "+evalsha", "+eval", "+script|load", "+subscribe", "+unsubscribe", "+wait",
    "+info", "+select",
]  # fmt: skip


def test_status_works_for_a_user_with_the_documented_least_privilege_acl(
    cli: Cli, r: Redis, server: RedisServer
) -> None:
    r.cmd(*LOCKER)
    try:
        url = f"redis://locker:locker-pw@127.0.0.1:{server.port}"
        env = dict(cli.env, REDMUTEX_URL=url)
        holder = cli.start("run", "--fence-env", "F", "app:job", "--", "sleep", "60", env=env)
        wait_until(lambda: r.cmd("EXISTS", "app:job"), 10, "the lock to be taken")
        res = cli.run("status", "--json", "app:job", env=env)
        assert res.returncode == 0, res.stderr
        doc = json.loads(res.stdout)
        assert doc["held"] is True and doc["kind"] == "lock" and len(doc["owner"]) == 8
        assert doc["fence"] is not None and doc["servers"][0]["reachable"] is True
        holder.kill()
    finally:
        r.cmd("ACL", "DELUSER", "locker")


def test_status_reads_a_tls_server(cli: Cli, tmp_path: object) -> None:
    certs = str(make_certs(os.path.join(str(tmp_path), "certs")))
    s = RedisServer(os.path.join(str(tmp_path), "redis-tls"), tls=Tls(certs, plain_port=True)).start()
    tls_port = s.tls_port
    try:
        c = s.client()
        c.cmd("SET", "job", "tls-token-12345678", "PX", 60000)
        c.cmd("SET", "redisson_lock_token:{job}", 7)
        url = f"rediss://127.0.0.1:{tls_port}?ssl_ca_certs={os.path.join(certs, 'ca.pem')}"
        res = cli.run("status", "--json", "-u", url, "job")
        assert res.returncode == 0, res.stderr
        doc = json.loads(res.stdout)
        assert doc["held"] is True and doc["owner"] == "tls-toke" and doc["fence"] == 7
        assert doc["servers"][0]["reachable"] is True
        c.close()
    finally:
        s.stop()


def test_release_force_of_a_read_write_lock_wakes_its_waiters_at_once(
    cli: Cli, r: Redis, server: RedisServer
) -> None:
    r.cmd("HSET", "job", "mode", "write", "c0ffee:7:write", 1)
    r.cmd("PEXPIRE", "job", 30000)
    sub = subscribe(server, "redisson_rwlock:{job}")  # where Redisson's read-write waiters listen
    res = cli.run("release", "--force", "job")
    assert res.returncode == 0, res.stderr
    assert r.cmd("EXISTS", "job") == 0
    sub.settimeout(5)
    assert b"message" in sub.recv(4096), "the waiters of a read-write lock were not told"
    sub.close()


def test_release_force_of_a_fair_lock_passes_it_to_the_head_of_the_queue(
    cli: Cli, r: Redis, server: RedisServer
) -> None:
    r.cmd("HSET", "job", "c0ffee:7", 1)
    r.cmd("PEXPIRE", "job", 30000)
    r.cmd("RPUSH", "redisson_lock_queue:{job}", "c0ffee:8")
    r.cmd("ZADD", "redisson_lock_timeout:{job}", int(time.time() * 1000) + 300000, "c0ffee:8")
    sub = subscribe(server, "redisson_lock__channel:{job}:c0ffee:8")  # the head's own channel
    res = cli.run("release", "--force", "job")
    assert res.returncode == 0, res.stderr
    assert r.cmd("EXISTS", "job") == 0
    sub.settimeout(5)
    assert b"message" in sub.recv(4096), "the head of the queue was not told"
    sub.close()
