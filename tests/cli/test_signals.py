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
    p = cli.start("run", "--kill-after", "1", "job", "--", "sh", "-c", TRAPPING.format(sig=name))
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
    assert p.returncode == 3, err  # CMD handled the signal: its own status counts
    assert r.cmd("EXISTS", "job") == 0
    # sh starts background children with SIGINT ignored: that one is
    # SIGKILLed --kill-after CMD's end; the others die of the signal itself.
    assert not alive(bgpid), "the lock was released while CMD's background child still ran"


# CMD: exits at once on SIG, leaving a child in its process group that
# ignores SIGTERM and SIGINT.
LEAVES_A_CHILD = """
sh -c 'trap "" TERM INT; echo $$ > bgpid.tmp; mv bgpid.tmp bgpid; while :; do sleep 0.05; done' &
trap 'touch cmd-exited; exit 0' {sig}
touch started
while :; do sleep 0.05; done
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_child_left_in_cmds_group_holds_the_lock_until_killed_after_kill_after(
    cli: Cli, r: Redis, sig: signal.Signals
) -> None:
    p = cli.start(
        "run", "--kill-after", "1.5", "job", "--", "sh", "-c", LEAVES_A_CHILD.format(sig=sig.name[3:])
    )
    wait_until(lambda: os.path.exists(path(cli, "started")), 10, "CMD to start")
    wait_until(lambda: os.path.exists(path(cli, "bgpid")), 10, "CMD's child to start")
    with open(path(cli, "bgpid")) as f:
        bgpid = int(f.read())
    p.send_signal(sig)
    wait_until(lambda: os.path.exists(path(cli, "cmd-exited")), 10, "CMD to exit")
    t0 = time.monotonic()
    # CMD is gone, its child is not: the lock stays until the child is gone too.
    while alive(bgpid):
        assert r.cmd("EXISTS", "job") == 1, "the lock was released while CMD's child still ran"
        assert time.monotonic() - t0 < 10, "the child was not killed --kill-after CMD's end"
        time.sleep(0.02)
    assert time.monotonic() - t0 >= 1.0, "the child got less than --kill-after to end"
    p.communicate(timeout=10)
    assert r.cmd("EXISTS", "job") == 0


def test_a_child_left_in_cmds_group_after_a_normal_exit_holds_the_lock_while_it_runs(
    cli: Cli, r: Redis
) -> None:
    cmd = "sh -c 'echo $$ > bgpid.tmp; mv bgpid.tmp bgpid; while [ ! -e go ]; do sleep 0.05; done' & exit 4"
    p = cli.start("run", "job", "--", "sh", "-c", cmd)
    wait_until(lambda: os.path.exists(path(cli, "bgpid")), 10, "CMD's child to start")
    with open(path(cli, "bgpid")) as f:
        bgpid = int(f.read())
    # CMD has exited (or is about to); its child runs on, under the lock.
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        assert p.poll() is None and alive(bgpid), "redmutex ended while CMD's child ran"
        assert r.cmd("EXISTS", "job") == 1
        time.sleep(0.05)
    open(path(cli, "go"), "w").close()
    p.communicate(timeout=10)
    assert p.returncode == 4, "CMD's own status"
    assert not alive(bgpid)
    assert r.cmd("EXISTS", "job") == 0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT])
def test_cmd_killed_by_a_forwarded_signal_kills_redmutex_by_it_after_the_release(
    cli: Cli, r: Redis, sig: signal.Signals
) -> None:
    # A shell loop (`while :; do redmutex run ...; done`) stops on Ctrl-C only
    # when its child dies of SIGINT; exiting 130 makes it go on.
    cmd = (
        f"import signal, time; signal.signal(signal.{sig.name}, signal.SIG_DFL); "
        "open('started', 'w').close(); time.sleep(30)"
    )
    p = cli.start("run", "job", "--", sys.executable, "-c", cmd)
    wait_until(lambda: os.path.exists(path(cli, "started")), 10, "CMD to start")
    p.send_signal(sig)
    _, err = p.communicate(timeout=20)
    assert p.returncode == -sig, err
    assert r.cmd("EXISTS", "job") == 0, "released before redmutex died"
    assert not any(f.startswith("core") for f in os.listdir(cli.cwd)), "no core file of redmutex"


def test_sigterm_while_waiting_ends_the_wait_without_running_cmd(cli: Cli, r: Redis) -> None:
    r.cmd("SET", "job", "someone-else", "PX", 60000)
    p = cli.start("run", "--wait", "60", "job", "--", "touch", "ran")
    wait_for_subscribers(r, "job", 1)
    t0 = time.monotonic()
    p.send_signal(signal.SIGTERM)
    p.communicate(timeout=10)
    assert p.returncode == -signal.SIGTERM, "dies of the signal, as the shell expects"
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
