"""Signals: forwarded to CMD's process group, ending a wait, and redmutex itself killed."""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest

from conftest import Cli, Redis, alive, runs, wait_for_subscribers, wait_until

# CMD: traps SIG, reports it, cleans up until the test says go (10 s at
# most), exits 3. A background child shows whether the signal reached the
# whole process group.
TRAPPING = """
cleanup() {{
  echo {sig} > got
  i=0; while [ ! -e go ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done
  exit 3
}}
trap cleanup {sig}
sleep 60 >/dev/null 2>&1 & echo $! > bgpid
touch started
wait
"""


def path(cli: Cli, name: str) -> str:
    return os.path.join(cli.cwd, name)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_signal_reaches_cmd_and_the_lock_is_released_after_cmd_ends(
    cli: Cli, r: Redis, sig: signal.Signals
) -> None:
    name = sig.name[3:]
    p = cli.start("run", "job", "--", "sh", "-c", TRAPPING.format(sig=name))
    wait_until(lambda: os.path.exists(path(cli, "started")), 10, "CMD to start")
    with open(path(cli, "bgpid")) as f:
        bgpid = int(f.read())
    # Until the child has exec'd sleep it may still run the shell's trap
    # (dash resets traps after the fork): the signal would prove nothing.
    wait_until(lambda: runs(bgpid, "sleep"), 10, "the background child to run sleep")
    p.send_signal(sig)
    wait_until(lambda: os.path.exists(path(cli, "got")), 10, "CMD to get the signal")
    assert r.cmd("EXISTS", "job") == 1, "the lock must be held until CMD has ended"
    open(path(cli, "go"), "w").close()
    _, err = p.communicate(timeout=20)
    assert p.returncode == 3, err
    assert r.cmd("EXISTS", "job") == 0
    if sig != signal.SIGINT:  # sh starts background children with SIGINT ignored
        wait_until(lambda: not alive(bgpid), 5, "the background child to get the signal too")
    else:
        os.kill(bgpid, signal.SIGKILL)


def test_sigterm_while_waiting_ends_the_wait_without_running_cmd(cli: Cli, r: Redis) -> None:
    r.cmd("SET", "job", "someone-else", "PX", 60000)
    p = cli.start("run", "--wait", "60", "job", "--", "touch", "ran")
    wait_for_subscribers(r, "job", 1)
    t0 = time.monotonic()
    p.send_signal(signal.SIGTERM)
    p.communicate(timeout=10)
    assert p.returncode == 128 + signal.SIGTERM
    assert time.monotonic() - t0 < 2.0
    assert not os.path.exists(path(cli, "ran"))
    assert r.cmd("GET", "job") == "someone-else"


CHECK_SIGHUP = "import signal; print(signal.getsignal(signal.SIGHUP) == signal.SIG_IGN)"


def test_an_ignored_signal_stays_ignored_for_cmd_as_under_nohup(cli: Cli) -> None:
    def ignore_hup() -> None:
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    args = ["run", "job", "--", sys.executable, "-c", CHECK_SIGHUP]
    ignored = cli.start(*args, preexec_fn=ignore_hup).communicate(timeout=30)
    plain = cli.run(*args)
    assert (ignored[0], plain.stdout) == ("True\n", "False\n"), ignored[1] + plain.stderr


KILLED_PARENT = """
trap 'echo TERM > got; exit 0' TERM
touch started
while :; do sleep 0.05; done
"""


def test_redmutex_killed_the_lock_frees_after_its_lease_and_cmd_gets_sigterm(cli: Cli, r: Redis) -> None:
    p = cli.start("run", "--lease", "2", "job", "--", "sh", "-c", KILLED_PARENT)
    wait_until(lambda: os.path.exists(path(cli, "started")), 10, "CMD to start")
    p.kill()
    p.wait(10)
    killed_at = time.monotonic()
    ttl = r.cmd("PTTL", "job")
    assert isinstance(ttl, int) and 0 < ttl <= 2000, "nobody released it: it lasts until its lease ends"
    wait_until(lambda: os.path.exists(path(cli, "got")), 5, "CMD to get SIGTERM when redmutex died")
    wait_until(lambda: r.cmd("EXISTS", "job") == 0, 5, "the lease to end")
    assert time.monotonic() - killed_at < 2.0 + 1.5
    res = cli.run("run", "-n", "job", "--", "true")
    assert res.returncode == 0, res.stderr


def test_redmutex_killed_under_the_watchdog_leaves_a_lock_that_expires(cli: Cli, r: Redis) -> None:
    p = cli.start("run", "job", "--", "sleep", "60")
    wait_until(lambda: r.cmd("EXISTS", "job"), 10, "the lock to be taken")
    p.kill()
    p.wait(10)
    ttl = r.cmd("PTTL", "job")
    assert isinstance(ttl, int) and 0 < ttl <= 30000
