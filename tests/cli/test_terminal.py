"""redmutex run in the foreground of a terminal: CMD gets the terminal, as a shell's job would."""

from __future__ import annotations

import os
import pty
import select
import shutil
import signal
import sys
import termios
import time

import pytest

from conftest import Cli, Redis, default_signals, wait_until

FG_JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fg_job.py")


def spawn_on_terminal(
    cli: Cli, *args: str, as_job: bool = False, env: dict[str, str] | None = None, program: str = ""
) -> tuple[int, int]:
    """Runs redmutex on a new pseudo-terminal, in its foreground process group.

    Without as_job, redmutex is the terminal's session leader (its process
    group is orphaned, so the terminal never stops it); with as_job, it runs
    as an interactive shell's foreground job would (fg_job.py), where the
    terminal's SIGTTOU, SIGTTIN and SIGTSTP do stop it.
    """
    argv = [program or cli.path, *args]
    if as_job:
        argv = [sys.executable, FG_JOB, *argv]
    pid, fd = pty.fork()
    if pid == 0:
        try:
            default_signals(None)  # a runner that ignores SIGINT must not hide Ctrl-C
            os.chdir(cli.cwd)
            os.execve(argv[0], argv, env or cli.env)
        finally:
            os._exit(127)
    return pid, fd


def read_until(fd: int, text: bytes, timeout: float) -> bytes:
    buf = b""
    deadline = time.monotonic() + timeout
    while text not in buf:
        left = deadline - time.monotonic()
        ready, _, _ = select.select([fd], [], [], max(left, 0))
        if not ready:
            raise AssertionError(f"no {text!r} on the terminal within {timeout} s; got {buf!r}")
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # EIO: the other side is gone
            chunk = b""
        if not chunk:
            raise AssertionError(f"the terminal closed before {text!r}; got {buf!r}")
        buf += chunk
    return buf


def exit_status(pid: int, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            raise AssertionError(f"redmutex did not exit within {timeout} s")
        time.sleep(0.01)


def test_cmd_can_read_the_terminal(cli: Cli) -> None:
    # Without the terminal, CMD's background group would be stopped by SIGTTIN at `read`.
    pid, fd = spawn_on_terminal(
        cli, "run", "job", "--", "sh", "-c", 'echo ready; read line; echo "got:$line"'
    )
    try:
        read_until(fd, b"ready", 10)
        os.write(fd, b"hello\n")
        read_until(fd, b"got:hello", 10)
        assert exit_status(pid, 10) == 0
    finally:
        os.close(fd)


# Says "ready" only once SIGINT would kill it (a shell may still be catching SIGINT after an echo).
SLEEPER = (
    "import signal, time; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "print('ready', flush=True); time.sleep(30)"
)


@pytest.mark.parametrize("as_job", [False, True], ids=["session leader", "shell job"])
def test_ctrl_c_on_the_terminal_reaches_cmd_and_redmutex_dies_of_it(cli: Cli, r: Redis, as_job: bool) -> None:
    pid, fd = spawn_on_terminal(cli, "run", "job", "--", sys.executable, "-c", SLEEPER, as_job=as_job)
    try:
        read_until(fd, b"ready", 10)
        os.write(fd, b"\x03")
        # Killed by SIGINT, not exit(130): only then does a calling shell stop too.
        assert exit_status(pid, 10) == -signal.SIGINT
        assert r.cmd("EXISTS", "job") == 0
    finally:
        os.close(fd)


LOOP = 'for i in 1 2 3; do "$0" run job -- "$1" -c "$2"; echo "after $i"; done; echo "loop ended"'


def drain(fd: int) -> bytes:
    out = b""
    while select.select([fd], [], [], 0.3)[0]:
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # EIO: the other side is gone
            break
        if not chunk:
            break
        out += chunk
    return out


@pytest.mark.skipif(not shutil.which("bash"), reason="bash is not installed")
def test_ctrl_c_stops_a_shell_script_looping_over_redmutex_runs(cli: Cli) -> None:
    # bash without job control: redmutex runs in the script's process group,
    # and gives the terminal to CMD's; the script stops only if Ctrl-C
    # reaches it too, as it would without redmutex.
    bash = shutil.which("bash") or "bash"
    pid, fd = spawn_on_terminal(cli, "-c", LOOP, cli.path, sys.executable, SLEEPER, program=bash)
    try:
        read_until(fd, b"ready", 10)
        os.write(fd, b"\x03")
        assert exit_status(pid, 10) == -signal.SIGINT
        out = drain(fd)
        assert b"after" not in out and b"loop ended" not in out, out
    finally:
        os.close(fd)


@pytest.mark.skipif(not shutil.which("bash"), reason="bash is not installed")
def test_ctrl_c_stops_an_interactive_shell_loop_over_redmutex_runs(cli: Cli) -> None:
    # An interactive bash runs each redmutex as a job of its own and breaks a
    # loop only when that job dies of SIGINT (exiting 130 is not enough).
    bash = shutil.which("bash") or "bash"
    env = dict(cli.env, PS1="$ ", RM=cli.path, PY=sys.executable, SLEEPER=SLEEPER)
    pid, fd = spawn_on_terminal(cli, "--norc", "--noprofile", "-i", env=env, program=bash)
    try:
        loop = (
            'for i in 1 2 3; do "$RM" run job -- "$PY" -c "$SLEEPER"; echo "after-$i"; done; '
            'echo "loop-$((6*7))"'
        )
        os.write(fd, loop.encode() + b"\n")
        read_until(fd, b"ready", 10)
        os.write(fd, b"\x03")
        os.write(fd, b'echo "status-$((40+2))"\n')
        out = read_until(fd, b"status-42", 10)  # what came after "ready"
        assert b"after-" not in out and b"loop-42" not in out, out
        os.write(fd, b"exit\n")
        exit_status(pid, 10)
    finally:
        os.close(fd)


def test_cmd_gets_the_terminal_when_stdin_is_not_it(cli: Cli) -> None:
    # `redmutex run job -- less FILE < /dev/null`: CMD reads the terminal itself
    # (/dev/tty); kept in the background it would be stopped by SIGTTIN.
    cmd = 'echo ready; read line < /dev/tty; echo "got:$line"'
    pid, fd = pty.fork()
    if pid == 0:
        try:
            default_signals(None)  # a runner that ignores SIGINT must not hide Ctrl-C
            os.chdir(cli.cwd)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.execve(cli.path, [cli.path, "run", "job", "--", "sh", "-c", cmd], cli.env)
        finally:
            os._exit(127)
    try:
        read_until(fd, b"ready", 10)
        os.write(fd, b"hello\n")
        read_until(fd, b"got:hello", 10)
        assert exit_status(pid, 10) == 0
    finally:
        os.close(fd)


def process_state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def test_redmutex_is_not_stopped_by_the_terminal_while_cmd_has_it(cli: Cli, r: Redis) -> None:
    # With `stty tostop` (or a CMD that sets it), a background process that
    # writes to the terminal is stopped by SIGTTOU. redmutex is in the
    # background while CMD has the terminal, and writes when the lock is
    # lost: stopped there, it would neither stop CMD nor renew anything.
    cmd = "stty tostop; echo ready; while :; do sleep 0.05; done"
    pid, fd = spawn_on_terminal(
        cli, "run", "--lease", "1.5", "--kill-after", "1", "job", "--", "sh", "-c", cmd, as_job=True
    )
    try:
        read_until(fd, b"ready", 10)
        assert termios.tcgetattr(fd)[3] & termios.TOSTOP
        assert exit_status(pid, 15) == 76
        out = drain(fd)
        assert b"lease of 1.5 s ran out" in out
        assert b"fg_job: stopped" not in out, "redmutex was stopped by the terminal"
    finally:
        os.close(fd)


def test_a_conflict_is_reported_on_a_terminal(cli: Cli, r: Redis) -> None:
    r.cmd("SET", "job", "someone-else", "PX", 60000)
    pid, fd = spawn_on_terminal(cli, "run", "-n", "job", "--", "touch", "ran")
    try:
        read_until(fd, b"lock 'job' is held by another owner", 10)
        assert exit_status(pid, 10) == 75
    finally:
        os.close(fd)


# Marks every time it is continued; dies of SIGTERM (the default) first if that is pending too.
CONTINUED = (
    "import signal, time\n"
    "signal.signal(signal.SIGINT, signal.SIG_DFL)\n"
    "signal.signal(signal.SIGCONT, lambda *a: open('continued', 'a').write('x'))\n"
    "print('ready', flush=True)\n"
    "time.sleep(60)\n"
)


def test_cmd_suspended_longer_than_the_lease_is_not_continued_without_the_lock(cli: Cli, r: Redis) -> None:
    # Ctrl-Z suspends CMD and redmutex, and nothing renews the lease
    # meanwhile. When the job is continued after the lease ran out, CMD must
    # get SIGTERM before it can run on: the lock is gone.
    env = dict(cli.env, FG_JOB_CONTINUE_AFTER="3")
    pid, fd = spawn_on_terminal(
        cli, "run", "--lease", "1.5", "job", "--", sys.executable, "-c", CONTINUED, as_job=True, env=env
    )
    try:
        read_until(fd, b"ready", 10)
        os.write(fd, b"\x1a")  # Ctrl-Z
        out = read_until(fd, b"fg_job: continued", 10)
        assert exit_status(pid, 10) == 76
        assert not os.path.exists(os.path.join(cli.cwd, "continued")), "CMD ran on after the lease ran out"
        assert b"while the command was suspended" in out + drain(fd)
    finally:
        os.close(fd)


def test_cmd_suspended_within_the_lease_goes_on_with_the_lock(cli: Cli, r: Redis) -> None:
    env = dict(cli.env, FG_JOB_CONTINUE_AFTER="0.2")
    pid, fd = spawn_on_terminal(
        cli, "run", "job", "--", sys.executable, "-c", CONTINUED, as_job=True, env=env
    )
    try:
        read_until(fd, b"ready", 10)
        os.write(fd, b"\x1a")
        read_until(fd, b"fg_job: continued", 10)
        wait_until(lambda: os.path.exists(os.path.join(cli.cwd, "continued")), 10, "CMD to be continued")
        assert r.cmd("EXISTS", "job") == 1
        os.write(fd, b"\x03")
        assert exit_status(pid, 10) == -signal.SIGINT
    finally:
        os.close(fd)
