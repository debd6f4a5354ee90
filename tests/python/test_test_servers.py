"""tests/rmserver.py, the one server helper every suite uses (C, Python, CLI,
chaos, the bindings): a missing server binary fails each suite instead of
skipping it, a served server dies with the process that reads it, and no
suite starts redis-server on its own again."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import redmutex

from conftest import make_certs
from rmtest_util import wait_until

ROOT = Path(__file__).resolve().parents[2]
RMSERVER = ROOT / "tests" / "rmserver.py"


def serve(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(RMSERVER), "serve", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def info_of(line: str) -> dict[str, str]:
    return dict(pair.split("=", 1) for pair in line.split())


def gone(pid: int) -> bool:
    """Not running: no such process, or a zombie nobody reaped yet."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


@pytest.mark.parametrize(
    "suite, module",
    [("tests/python", "test_lock.py"), ("tests/cli", "test_run.py"), ("tests/chaos", "test_proxy.py")],
)
def test_a_missing_server_binary_fails_the_suite_instead_of_skipping(
    suite: str, module: str, tmp_path: Path
) -> None:
    missing = str(tmp_path / "no-such-redis-server")
    env = dict(os.environ, REDMUTEX_TEST_SERVER=missing, REDMUTEX_CLI="/bin/true")
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", module],
        cwd=ROOT / suite,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = res.stdout + res.stderr
    assert res.returncode == 1, out  # 1: tests failed; 0 would mean they passed or skipped
    assert "skipped" not in out, out
    assert missing in out and "apt-get install redis-server" in out, out


def test_serve_without_a_server_binary_fails_with_a_message(tmp_path: Path) -> None:
    p = serve("--unix", env=dict(os.environ, REDMUTEX_TEST_SERVER=str(tmp_path / "none")))
    out, err = p.communicate(timeout=60)
    assert p.returncode == 1
    assert out == ""  # the bindings' helpers read no server, and fail
    assert "REDMUTEX_TEST_SERVER" in err and "apt-get install redis-server" in err


def test_a_served_server_dies_with_the_process_that_reads_it() -> None:
    # The reader is a process of its own, killed with SIGKILL: no exit handler runs.
    code = (
        "import subprocess, sys, time\n"
        f"argv = [sys.executable, {str(RMSERVER)!r}, 'serve', '--unix']\n"
        "p = subprocess.Popen(argv, stdout=subprocess.PIPE)\n"
        "sys.stdout.write(p.stdout.readline().decode()); sys.stdout.flush(); time.sleep(120)\n"
    )
    reader = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        info = info_of(reader.stdout.readline())  # type: ignore[union-attr]
        pid, socket = int(info["pid"]), info["socket"]
        assert info["url"] == f"unix://{socket}" and not gone(pid)
        with redmutex.Client(info["url"]) as c, c.lock("served") as lk:
            assert lk.locked()
    finally:
        reader.send_signal(signal.SIGKILL)
        reader.wait(10)
    wait_until(lambda: gone(pid), 10, what="the server to stop after its reader died")
    wait_until(lambda: not os.path.exists(info["dir"]), 10, what="the server's directory to go")


def test_serve_gives_a_tls_server_and_a_cluster(tmp_path: Path) -> None:
    certs = make_certs(tmp_path / "certs")
    p = serve("--tls", str(certs))
    try:
        info = info_of(p.stdout.readline())  # type: ignore[union-attr]
        assert info["url"] == f"rediss://127.0.0.1:{info['tls_port']}" and info["port"] == "0"
        with redmutex.Client(info["url"], ssl_ca_certs=certs / "ca.pem") as c, c.lock("tls") as lk:
            assert lk.locked()
    finally:
        p.stdout.close()  # type: ignore[union-attr]
        p.wait(30)
    p = serve("--cluster", "3:0")
    try:
        info = info_of(p.stdout.readline())  # type: ignore[union-attr]
        assert len(info["ports"].split(",")) == 3 and info["url"].startswith("redis://127.0.0.1:")
        with redmutex.Client(info["url"]) as c, c.lock("{a}x") as lk:
            assert lk.locked()
    finally:
        p.stdout.close()  # type: ignore[union-attr]
        p.wait(30)


# What starts a server: an argument list or a command line that begins with the
# binary, or a PATH lookup of it.
STARTS_A_SERVER = re.compile(
    r"""which\(\s*["']redis-server|["']redis-server["']\s*,|(^|[\s(\[{"'])redis-server\s+--|exec\s+["']?redis-server"""
)
ALLOWED = {"tests/rmserver.py"}


def test_no_suite_starts_redis_server_on_its_own() -> None:
    """The rules live in one place: every suite's server comes from tests/rmserver.py
    (tests/c/harness.c follows them in C and runs the binary it names)."""
    tracked = subprocess.run(
        ["git", "ls-files", "tests", "bindings"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    offenders = []
    for rel in tracked:
        if rel in ALLOWED or rel.endswith(".md"):
            continue
        try:
            text = (ROOT / rel).read_text()
        except (UnicodeDecodeError, FileNotFoundError):
            continue
        offenders += [
            f"{rel}:{n}: {line.strip()}"
            for n, line in enumerate(text.splitlines(), 1)
            if STARTS_A_SERVER.search(line)
        ]
    assert not offenders, json.dumps(offenders, indent=1)
