"""redmutex run: mutual exclusion, waiting, exit statuses, fencing tokens."""

from __future__ import annotations

import os
import stat
import subprocess
import time

from conftest import Cli, Redis, wait_until

# A read-modify-write with a window in the middle: without mutual exclusion,
# two of these running together lose updates. mkdir is atomic, so a second
# process inside at the same time is also seen directly.
INCREMENT = (
    "mkdir inside.d 2>/dev/null || echo overlap >> overlaps; "
    "v=$(cat counter); sleep 0.01; echo $((v + 1)) > counter; "
    "rmdir inside.d"
)


def test_two_concurrent_loops_keep_a_shared_counter_exact(cli: Cli) -> None:
    rounds = 25
    with open(os.path.join(cli.cwd, "counter"), "w") as f:
        f.write("0\n")
    loop = f'for i in $(seq {rounds}); do "$0" run counter -- sh -c "$1" || exit 1; done'
    loops = [
        subprocess.Popen(
            ["sh", "-c", loop, cli.path, INCREMENT],
            cwd=cli.cwd,
            env=cli.env,
            stdin=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        for _ in range(2)
    ]
    for p in loops:
        _, err = p.communicate(timeout=90)
        assert p.returncode == 0, err
    assert not os.path.exists(os.path.join(cli.cwd, "overlaps")), "two commands ran under the lock at once"
    with open(os.path.join(cli.cwd, "counter")) as f:
        assert int(f.read()) == 2 * rounds


def test_nonblock_exits_75_at_once_without_running_cmd(cli: Cli, r: Redis) -> None:
    r.cmd("SET", "job", "someone-else", "PX", 60000)
    t0 = time.monotonic()
    res = cli.run("run", "-n", "job", "--", "touch", "ran")
    elapsed = time.monotonic() - t0
    assert res.returncode == 75, res.stderr
    assert elapsed < 2.0
    assert res.stderr == "", "a skipped run is silent unless stderr is a terminal (cron would mail it)"
    assert not os.path.exists(os.path.join(cli.cwd, "ran"))
    assert r.cmd("GET", "job") == "someone-else"


def test_options_may_follow_the_name_before_the_double_dash(cli: Cli, r: Redis) -> None:
    r.cmd("SET", "job", "someone-else", "PX", 60000)
    res = cli.run("run", "job", "-n", "-E", "9", "--", "touch", "-n")
    assert res.returncode == 9, res.stderr
    assert not os.path.exists(os.path.join(cli.cwd, "-n"))


def test_wait_exits_75_when_the_wait_runs_out(cli: Cli, r: Redis) -> None:
    r.cmd("SET", "job", "someone-else", "PX", 60000)
    t0 = time.monotonic()
    res = cli.run("run", "--wait", "1", "job", "--", "touch", "ran")
    elapsed = time.monotonic() - t0
    assert res.returncode == 75, res.stderr
    assert 1.0 <= elapsed < 4.0
    assert not os.path.exists(os.path.join(cli.cwd, "ran"))


def test_conflict_exit_code_replaces_75(cli: Cli, r: Redis) -> None:
    r.cmd("SET", "job", "someone-else", "PX", 60000)
    assert cli.run("run", "-n", "-E", "3", "job", "--", "true").returncode == 3
    assert cli.run("run", "--conflict-exit-code", "0", "--wait", "0.2", "job", "--", "true").returncode == 0


def test_wait_gets_the_lock_when_the_holder_finishes(cli: Cli, r: Redis) -> None:
    holder = cli.start("run", "job", "--", "sh", "-c", "touch holding; sleep 0.5")
    wait_until(lambda: os.path.exists(os.path.join(cli.cwd, "holding")), 10, "the holder to start")
    t0 = time.monotonic()
    res = cli.run("run", "--wait", "20", "job", "--", "sh", "-c", "echo second")
    assert res.returncode == 0, res.stderr
    assert res.stdout == "second\n"
    assert holder.wait(10) == 0
    # The holder's release publishes: the waiter does not sit out its lease.
    assert time.monotonic() - t0 < 5.0
    assert r.cmd("EXISTS", "job") == 0


def test_cmd_exit_status_is_passed_through_and_the_lock_released(cli: Cli, r: Redis) -> None:
    for code in (0, 1, 7, 255):
        res = cli.run("run", "job", "--", "sh", "-c", f"exit {code}")
        assert res.returncode == code, res.stderr
        assert r.cmd("EXISTS", "job") == 0


def test_cmd_killed_by_a_signal_gives_128_plus_the_signal(cli: Cli, r: Redis) -> None:
    res = cli.run("run", "job", "--", "sh", "-c", "kill -USR1 $$")
    assert res.returncode == 128 + 10
    res = cli.run("run", "job", "--", "sh", "-c", "kill -KILL $$")
    assert res.returncode == 128 + 9
    assert r.cmd("EXISTS", "job") == 0


def test_cmd_sees_its_arguments_stdin_and_stdout_untouched(cli: Cli) -> None:
    res = cli.run(
        "run",
        "job",
        "--",
        "sh",
        "-c",
        'cat; printf "%s|" "$@"',
        "sh",
        "a b",
        "-n",
        "--",
        input="from stdin\n",
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout == "from stdin\na b|-n|--|"


def test_a_command_that_cannot_run_exits_127_or_126_and_releases(cli: Cli, r: Redis) -> None:
    res = cli.run("run", "job", "--", "no-such-command-anywhere")
    assert res.returncode == 127
    assert "no-such-command-anywhere" in res.stderr
    script = os.path.join(cli.cwd, "not-executable")
    with open(script, "w") as f:
        f.write("#!/bin/sh\n")
    os.chmod(script, stat.S_IRUSR | stat.S_IWUSR)
    res = cli.run("run", "job", "--", script)
    assert res.returncode == 126
    assert r.cmd("EXISTS", "job") == 0


def test_fence_env_values_strictly_increase_over_runs(cli: Cli) -> None:
    env = dict(cli.env, REDMUTEX_FENCE="999999")  # an inherited value is replaced, not kept beside
    seen = []
    for _ in range(4):
        res = cli.run(
            "run",
            "--fence-env",
            "REDMUTEX_FENCE",
            "job",
            "--",
            "sh",
            "-c",
            'env | grep -c "^REDMUTEX_FENCE="; echo "$REDMUTEX_FENCE"',
            env=env,
        )
        assert res.returncode == 0, res.stderr
        count, value = res.stdout.split()
        assert count == "1"
        seen.append(int(value))
    assert all(b > a for a, b in zip(seen, seen[1:])), seen
    assert seen[0] != 999999


def test_fence_env_on_a_reentrant_lock_shares_the_counter(cli: Cli) -> None:
    a = cli.run("run", "--fence-env", "F", "job", "--", "sh", "-c", 'echo "$F"')
    b = cli.run("run", "--kind", "rlock", "--fence-env", "F", "job", "--", "sh", "-c", 'echo "$F"')
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    assert int(b.stdout) > int(a.stdout)


def test_a_lease_sets_the_ttl_and_no_watchdog_renews_it(cli: Cli, r: Redis) -> None:
    res = cli.run("run", "--lease", "5", "job", "--", "sh", "-c", "sleep 0.3")
    assert res.returncode == 0, res.stderr
    p = cli.start("run", "--lease", "5", "job", "--", "sleep", "30")
    ttl = wait_until(
        lambda: r.cmd("PTTL", "job") if r.cmd("EXISTS", "job") else 0, 10, "the lock to be taken"
    )
    assert 0 < ttl <= 5000
    p.kill()


def test_default_lease_is_renewed_by_the_watchdog(cli: Cli, r: Redis) -> None:
    p = cli.start("run", "job", "--", "sleep", "30")
    ttl = wait_until(
        lambda: r.cmd("PTTL", "job") if r.cmd("EXISTS", "job") else 0, 10, "the lock to be taken"
    )
    assert 20000 < ttl <= 30000
    p.kill()


def test_kind_rlock_stores_a_redisson_hash(cli: Cli, r: Redis) -> None:
    res = cli.run("run", "--kind", "rlock", "job", "--", "sh", "-c", "touch ran")
    assert res.returncode == 0, res.stderr
    p = cli.start("run", "--kind", "rlock", "job", "--", "sleep", "30")
    wait_until(lambda: r.cmd("EXISTS", "job"), 10, "the lock to be taken")
    assert r.cmd("TYPE", "job") == "hash"
    fields = r.cmd("HGETALL", "job")
    assert isinstance(fields, list) and len(fields) == 2 and fields[1] == "1"
    # A plain-lock run on the same name does not run: the name holds the other kind.
    res = cli.run("run", "-n", "job", "--", "touch", "ran-plain")
    assert res.returncode == 65, res.stderr
    assert not os.path.exists(os.path.join(cli.cwd, "ran-plain"))
    p.kill()


def test_a_key_of_another_type_is_reported_not_waited_for(cli: Cli, r: Redis) -> None:
    r.cmd("RPUSH", "job", "x")
    t0 = time.monotonic()
    res = cli.run("run", "--wait", "20", "job", "--", "touch", "ran")
    assert res.returncode == 65, res.stderr
    assert time.monotonic() - t0 < 5.0
    assert not os.path.exists(os.path.join(cli.cwd, "ran"))
    assert r.cmd("LRANGE", "job", 0, -1) == ["x"]
