"""A lock lost while CMD runs: SIGTERM to CMD's group, SIGKILL after --kill-after, exit 76."""

from __future__ import annotations

import os
import subprocess
import time

from conftest import Cli, Redis, alive, wait_until

GRACEFUL = """
trap 'echo TERM > got; exit 0' TERM
touch started
while :; do sleep 0.05; done
"""


def test_key_deleted_and_retaken_behind_its_back_stops_cmd_with_76(cli: Cli, r: Redis) -> None:
    p = cli.start("run", "job", "--", "sh", "-c", GRACEFUL)
    wait_until(lambda: os.path.exists(os.path.join(cli.cwd, "started")), 10, "CMD to start")
    r.cmd("DEL", "job")
    r.cmd("SET", "job", "another-owner", "PX", 60000)
    # The watchdog renews every 0.3 x 30 s: the loss is noticed within 9 s.
    _, err = p.communicate(timeout=25)
    assert p.returncode == 76, err
    assert "lock 'job' was lost" in err
    with open(os.path.join(cli.cwd, "got")) as f:
        assert f.read() == "TERM\n"
    assert r.cmd("GET", "job") == "another-owner", "redmutex must not delete the new owner's lock"


IGNORING = """
trap '' TERM
sleep 60 >/dev/null 2>&1 & echo $! > bgpid
touch started
wait
"""


def test_a_lease_that_runs_out_kills_the_group_after_kill_after(cli: Cli, r: Redis) -> None:
    t0 = time.monotonic()
    p = cli.start("run", "--lease", "1", "--kill-after", "1", "job", "--", "sh", "-c", IGNORING)
    wait_until(lambda: os.path.exists(os.path.join(cli.cwd, "started")), 10, "CMD to start")
    with open(os.path.join(cli.cwd, "bgpid")) as f:
        bgpid = int(f.read())
    _, err = p.communicate(timeout=20)
    elapsed = time.monotonic() - t0
    assert p.returncode == 76, err
    assert "lease of 1 s ran out" in err
    # SIGTERM when the lease's validity ends (1 s less the clock-drift allowance), SIGKILL 1 s later.
    assert 1.9 <= elapsed < 8.0
    wait_until(lambda: not alive(bgpid), 5, "CMD's background child to be killed")
    assert r.cmd("EXISTS", "job") == 0


def test_lost_with_stderr_a_broken_pipe_stops_cmd_and_exits_76(cli: Cli, r: Redis) -> None:
    # `redmutex run ... 2>&1 >/dev/null | true`: nobody reads stderr any more
    # when the lock is lost. CMD must still be stopped, and redmutex must not
    # die of SIGPIPE writing why.
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        p = subprocess.Popen(
            # CMD's own stderr is the broken pipe too: it writes elsewhere.
            [
                cli.path,
                "run",
                "--lease",
                "1",
                "--kill-after",
                "1",
                "job",
                "--",
                "sh",
                "-c",
                "exec 2>/dev/null" + GRACEFUL,
            ],
            cwd=cli.cwd,
            env=cli.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=write_end,
            start_new_session=True,
        )
    finally:
        os.close(write_end)
    cli.started.append(p)  # type: ignore[arg-type]
    wait_until(lambda: os.path.exists(os.path.join(cli.cwd, "started")), 10, "CMD to start")
    assert p.wait(20) == 76
    with open(os.path.join(cli.cwd, "got")) as f:
        assert f.read() == "TERM\n", "CMD was not stopped when the lock ran out"
