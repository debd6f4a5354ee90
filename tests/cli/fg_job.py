"""Runs a command as the foreground job of this terminal, as an interactive shell does.

Usage (on a terminal, as its session leader): fg_job.py CMD [ARG]...

The command gets a process group of its own and the terminal, so that its
group is not orphaned: the terminal's job-control signals (SIGTTOU, SIGTTIN,
SIGTSTP) act on it as they do under bash. When it stops, it is continued
after $FG_JOB_CONTINUE_AFTER seconds (default 0.5) with the terminal back,
as `fg` would, and "fg_job: stopped" / "fg_job: continued" are printed. This
process then exits the way the command did (dying of its signal).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time


def main() -> None:
    tty = sys.stdin.fileno()
    signal.signal(signal.SIGTTOU, signal.SIG_IGN)  # tcsetpgrp from the background
    pid = os.fork()
    if pid == 0:
        os.setpgid(0, 0)
        os.tcsetpgrp(tty, os.getpid())
        signal.signal(signal.SIGTTOU, signal.SIG_DFL)
        os.execvp(sys.argv[1], sys.argv[1:])
    # As the child does, whichever runs first; once it has exec'd (EACCES), it has.
    with contextlib.suppress(PermissionError):
        os.setpgid(pid, pid)
    continue_after = float(os.environ.get("FG_JOB_CONTINUE_AFTER", "0.5"))
    while True:
        _, status = os.waitpid(pid, os.WUNTRACED)
        if os.WIFSTOPPED(status):
            os.tcsetpgrp(tty, os.getpgrp())
            print("fg_job: stopped", flush=True)
            time.sleep(continue_after)
            os.tcsetpgrp(tty, pid)
            os.killpg(pid, signal.SIGCONT)
            print("fg_job: continued", flush=True)
            continue
        os.tcsetpgrp(tty, os.getpgrp())
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            signal.signal(sig, signal.SIG_DFL)
            os.kill(os.getpid(), sig)
        sys.exit(os.waitstatus_to_exitcode(status))


if __name__ == "__main__":
    main()
