"""CMD is never started once the lock's validity has run out (review 22, F4).

A --lease that runs out between the acquire and the start of CMD must not let
CMD run without the lock. The gap is made as long as the test needs, and no
longer, by a fork() wrapper (LD_PRELOAD) that waits for a gate file: the test
sees the lock taken, waits until Redis has dropped it, then opens the gate.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from conftest import Cli, Redis, wait_until

GATE_SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* fork() waits (30 s at most) until the file $RM_TEST_FORK_GATE exists. */
pid_t fork(void)
{
    const char *gate = getenv("RM_TEST_FORK_GATE");
    for (int i = 0; gate && i < 3000 && access(gate, F_OK) != 0; i++)
        nanosleep(&(struct timespec){0, 10000000}, NULL);
    pid_t (*real)(void) = (pid_t(*)(void))dlsym(RTLD_NEXT, "fork");
    return real();
}
"""


@pytest.fixture(scope="module")
def fork_gate(tmp_path_factory: pytest.TempPathFactory) -> str:
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "a C compiler builds the fork() gate (the CLI was built with one)"
    d = tmp_path_factory.mktemp("gate")
    src, lib = d / "gate.c", d / "gate.so"
    src.write_text(GATE_SHIM)
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib), str(src), "-ldl"], check=True)
    return str(lib)


def test_a_lease_that_ran_out_before_the_spawn_never_starts_cmd(cli: Cli, r: Redis, fork_gate: str) -> None:
    gate = os.path.join(cli.cwd, "gate")
    env = dict(cli.env, LD_PRELOAD=fork_gate, RM_TEST_FORK_GATE=gate)
    # The sanitizers want their runtime first; the wrapper only delays fork().
    env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0"
    p = cli.start("run", "--lease", "0.3", "job", "--", "sh", "-c", "touch ran", env=env)
    wait_until(lambda: r.cmd("EXISTS", "job") == 1, 10, "redmutex to take the lock")
    wait_until(lambda: r.cmd("PTTL", "job") == -2, 10, "the lease to run out in Redis")
    open(gate, "w").close()
    _, err = p.communicate(timeout=20)
    assert not os.path.exists(os.path.join(cli.cwd, "ran")), "CMD ran without the lock"
    assert p.returncode == 76, err
    assert "lock 'job' expired before the command could start" in err


@pytest.mark.parametrize("lease", ["0.01", "0.05", "0.099"])
def test_a_lease_too_short_to_start_cmd_is_refused(cli: Cli, r: Redis, lease: str) -> None:
    res = cli.run("run", "--lease", lease, "job", "--", "sh", "-c", "touch ran")
    assert res.returncode == 64, res.stderr
    assert "--lease must be at least 0.1 seconds" in res.stderr
    assert not os.path.exists(os.path.join(cli.cwd, "ran"))
    assert r.cmd("EXISTS", "job") == 0


def test_the_shortest_lease_lets_cmd_start_under_the_lock(cli: Cli, r: Redis) -> None:
    res = cli.run("run", "--lease", "0.1", "job", "--", "sh", "-c", "touch ran")
    assert res.returncode in (0, 76), res.stderr
    assert os.path.exists(os.path.join(cli.cwd, "ran")) or "before the command could start" in res.stderr
