"""redmutex run --permits N: one permit of an N-permit semaphore per command (GNU sem for a fleet)."""

from __future__ import annotations

import os
import subprocess
import time

from conftest import Cli, Redis, wait_until

# Counts the commands inside at once with one directory each (mkdir is
# atomic): the most seen is appended to `most`, an excess to `overlaps`.
INSIDE = (
    'd=$(mktemp -d inside.XXXXXX); n=$(ls -d inside.* | wc -l); echo "$n" >> most; '
    '[ "$n" -le "$1" ] || echo overlap >> overlaps; sleep 0.05; rmdir "$d"'
)


def test_at_most_n_commands_run_at_once_and_n_do(cli: Cli, r: Redis) -> None:
    rounds = 6
    loop = f'for i in $(seq {rounds}); do "$0" run --permits 2 workers -- sh -c "$1" sh 2 || exit 1; done'
    loops = [
        subprocess.Popen(
            ["sh", "-c", loop, cli.path, INSIDE],
            cwd=cli.cwd,
            env=cli.env,
            stdin=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        for _ in range(4)
    ]
    for p in loops:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    assert not os.path.exists(os.path.join(cli.cwd, "overlaps")), "more than 2 commands ran at once"
    with open(os.path.join(cli.cwd, "most")) as f:
        seen = [int(line) for line in f]
    assert len(seen) == 4 * rounds and max(seen) == 2
    assert r.cmd("GET", "workers") == "2" and r.cmd("ZCARD", "{workers}:timeout") == 0


def test_no_permit_free_exits_75_without_running_cmd(cli: Cli, r: Redis) -> None:
    holder = cli.start("run", "--permits", "1", "one", "--", "sleep", "30")
    try:
        wait_until(lambda: r.cmd("ZCARD", "{one}:timeout") == 1, 10, "the first command's permit")
        t0 = time.monotonic()
        res = cli.run("run", "--permits", "1", "-n", "one", "--", "touch", "ran")
        assert res.returncode == 75, res.stderr
        assert time.monotonic() - t0 < 5
        res = cli.run("run", "--permits", "1", "--wait", "0.3", "-E", "9", "one", "--", "touch", "ran")
        assert res.returncode == 9, res.stderr
        assert not os.path.exists(os.path.join(cli.cwd, "ran"))
    finally:
        holder.terminate()
        holder.wait(30)
    assert r.cmd("GET", "one") == "1" and r.cmd("ZCARD", "{one}:timeout") == 0


def test_a_lost_permit_stops_cmd_and_exits_76(cli: Cli, r: Redis) -> None:
    p = cli.start("run", "--permits", "3", "--kill-after", "2", "lost", "--", "sleep", "60")
    try:
        wait_until(lambda: r.cmd("ZCARD", "{lost}:timeout") == 1, 10, "the permit")
        r.cmd("DEL", "{lost}:timeout")
        p.wait(60)
        assert p.returncode == 76
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(10)


def test_the_fencing_token_of_the_permit_is_exported(cli: Cli, r: Redis) -> None:
    cmd = ("sh", "-c", 'echo "$TOKEN"')
    res = cli.run("run", "--permits", "2", "--fence-env", "TOKEN", "fenced", "--", *cmd)
    assert res.returncode == 0, res.stderr
    assert int(res.stdout) == 1
    assert r.cmd("GET", "redisson_lock_token:{fenced}") == "1"


def test_bad_permits_and_another_capacity_exit_64_and_change_nothing(cli: Cli, r: Redis) -> None:
    for bad in ("0", "-1", "two", "1.5", "", "1000000001"):
        res = cli.run("run", "--permits", bad, "bad", "--", "true")
        assert res.returncode == 64, (bad, res.stderr)
        assert "--permits" in res.stderr
    res = cli.run("run", "--permits", "2", "--kind", "rlock", "bad", "--", "true")
    assert res.returncode == 64 and "exclude" in res.stderr
    assert r.cmd("KEYS", "*") == []
    r.cmd("SET", "sized", "3")
    res = cli.run("run", "--permits", "2", "sized", "--", "touch", "ran")
    assert res.returncode == 64, res.stderr
    assert "has 3 permits" in res.stderr
    assert not os.path.exists(os.path.join(cli.cwd, "ran"))
    assert r.cmd("GET", "sized") == "3" and r.cmd("EXISTS", "{sized}:timeout") == 0
