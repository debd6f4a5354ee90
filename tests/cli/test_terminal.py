"""redmutex run in the foreground of a terminal: CMD gets the terminal, as a shell's job would."""

from __future__ import annotations

import os
import pty
import select
import sys
import time

from conftest import Cli, Redis


def spawn_on_terminal(cli: Cli, *args: str) -> tuple[int, int]:
    """Runs redmutex as the session leader of a new pseudo-terminal, in its foreground group."""
    pid, fd = pty.fork()
    if pid == 0:
        try:
            os.chdir(cli.cwd)
            os.execve(cli.path, [cli.path, *args], cli.env)
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


def test_ctrl_c_on_the_terminal_reaches_cmd(cli: Cli) -> None:
    pid, fd = spawn_on_terminal(cli, "run", "job", "--", sys.executable, "-c", SLEEPER)
    try:
        read_until(fd, b"ready", 10)
        os.write(fd, b"\x03")
        assert exit_status(pid, 10) == 130
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
