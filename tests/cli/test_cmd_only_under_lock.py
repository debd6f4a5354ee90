"""The rule of `redmutex run`: CMD runs only while the lock is held and renewed.

Whatever the options (-n, -E, --wait), CMD never starts without the lock,
and the exit status says why it did not.
"""

from __future__ import annotations

import os

import pytest

from conftest import Cli, Redis

WAITS = [["-n"], ["--wait", "0"], ["--wait", "0.3"]]


@pytest.mark.parametrize("wait", WAITS, ids=lambda w: " ".join(w))
@pytest.mark.parametrize("code", [None, "0", "1", "3", "75", "255"])
def test_a_busy_lock_never_runs_cmd_whatever_the_conflict_exit_code(
    cli: Cli, r: Redis, wait: list[str], code: str | None
) -> None:
    r.cmd("SET", "job", "someone-else", "PX", 60000)
    exit_code = ["-E", code] if code is not None else []
    res = cli.run("run", *wait, *exit_code, "job", "--", "touch", "ran")
    assert res.returncode == (int(code) if code is not None else 75), res.stderr
    assert not os.path.exists(os.path.join(cli.cwd, "ran")), "CMD ran without the lock"
    assert res.stderr == "", "a skipped run is silent (and never reports a release it did not make)"
    assert r.cmd("GET", "job") == "someone-else"
