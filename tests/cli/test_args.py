"""Bad arguments exit 64 and change nothing; unreachable servers exit 69; --help and --version."""

from __future__ import annotations

import os
import re
import socket

import pytest

from conftest import Cli, Redis, free_port

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

BAD = [
    [],
    ["frobnicate"],
    ["run"],
    ["run", "job"],
    ["run", "job", "true"],
    ["run", "job", "--"],
    ["run", "--", "true"],
    ["run", "job", "extra", "--", "true"],
    ["run", "--wait", "-1", "job", "--", "true"],
    ["run", "--wait", "abc", "job", "--", "true"],
    ["run", "--wait", "nan", "job", "--", "true"],
    ["run", "--wait", "inf", "job", "--", "true"],
    ["run", "--wait", "1e30", "job", "--", "true"],
    ["run", "--wait", "2", "-n", "job", "--", "true"],
    ["run", "--lease", "0", "job", "--", "true"],
    ["run", "--lease", "0.0001", "job", "--", "true"],
    ["run", "--kill-after", "soon", "job", "--", "true"],
    ["run", "-E", "256", "job", "--", "true"],
    ["run", "-E", "-1", "job", "--", "true"],
    ["run", "-E"],
    ["run", "--kind", "mutex", "job", "--", "true"],
    ["run", "--fence-env", "1ABC", "job", "--", "true"],
    ["run", "--fence-env", "A-B", "job", "--", "true"],
    ["run", "--bogus", "job", "--", "true"],
    ["run", "-x", "job", "--", "true"],
    ["run", "", "--", "true"],
    ["run", "x" * 1025, "--", "true"],
    ["run", "-u", "http://127.0.0.1:6379", "job", "--", "true"],
    ["run", "-u", "redis://127.0.0.1:99999", "job", "--", "true"],
    ["status"],
    ["status", "a", "b"],
    ["status", "--force", "job"],
    ["status", "-u", "redis://h:1:2", "job"],
    ["release", "job"],
    ["release", "--force"],
    ["release", "--force", "--json", "job"],
]


@pytest.mark.parametrize("args", BAD, ids=lambda a: " ".join(a)[:40] or "(nothing)")
def test_bad_arguments_exit_64_with_a_message_and_change_nothing(cli: Cli, r: Redis, args: list[str]) -> None:
    res = cli.run(*args)
    assert res.returncode == 64, res.stderr
    assert res.stderr.startswith("redmutex: ")
    assert len(res.stderr) > 20
    assert res.stdout == ""
    assert r.cmd("DBSIZE") == 0
    assert not os.listdir(cli.cwd), "CMD must not run"


def test_a_malformed_redmutex_url_exits_64(cli: Cli) -> None:
    env = dict(cli.env, REDMUTEX_URL=cli.env["REDMUTEX_URL"] + ",,")
    res = cli.run("status", "job", env=env)
    assert res.returncode == 64
    assert "REDMUTEX_URL" in res.stderr


def test_redmutex_url_takes_a_comma_separated_list(cli: Cli, r: Redis) -> None:
    url = cli.env["REDMUTEX_URL"]
    env = dict(cli.env, REDMUTEX_URL=f"{url},{url}")
    res = cli.run("run", "job", "--", "true", env=env)
    assert res.returncode == 64, "the same server twice is refused: it would fake a majority"
    assert "same Redis server" in res.stderr


def test_without_u_or_redmutex_url_the_default_server_is_used(cli: Cli) -> None:
    env = {k: v for k, v in cli.env.items() if k != "REDMUTEX_URL"}
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", 6379))
        except OSError:
            pytest.skip("something listens on 127.0.0.1:6379")
        res = cli.run("status", "job", env=env)  # bound but not listening: refused
    assert res.returncode == 69
    assert "127.0.0.1:6379" in res.stderr


@pytest.mark.parametrize(
    "command",
    [
        ["run", "-n", "job", "--", "touch", "ran"],
        ["run", "--wait", "0.5", "job", "--", "touch", "ran"],  # tries again until the wait ends
        ["status", "job"],
        ["release", "--force", "job"],
    ],
)
def test_an_unreachable_server_exits_69_naming_it_without_the_password(cli: Cli, command: list[str]) -> None:
    port = free_port()
    res = cli.run(command[0], "-u", f"redis://alice:s3cret-pw@127.0.0.1:{port}/0", *command[1:])
    assert res.returncode == 69, res.stderr
    assert f"127.0.0.1:{port}" in res.stderr
    assert "s3cret" not in res.stderr
    assert not os.path.exists(os.path.join(cli.cwd, "ran"))


def test_wrong_password_exits_77(cli: Cli) -> None:
    url = cli.env["REDMUTEX_URL"].replace("redis://", "redis://:not-the-password@")
    res = cli.run("run", "-u", url, "job", "--", "true")
    assert res.returncode == 77, res.stderr
    assert "not-the-password" not in res.stderr


def test_help_lists_every_option_with_examples(cli: Cli) -> None:
    res = cli.run("--help")
    assert res.returncode == 0 and res.stderr == ""
    for option in (
        "-u",
        "--lease",
        "--wait",
        "--nonblock",
        "-E",
        "--kill-after",
        "--fence-env",
        "--kind",
        "--json",
        "--force",
        "REDMUTEX_URL",
        "Examples:",
        "redmutex run -n nightly-report",
    ):
        assert option in res.stdout
    assert cli.run("run", "--help").stdout == res.stdout


def test_version_matches_the_header(cli: Cli) -> None:
    with open(os.path.join(ROOT, "core", "include", "redmutex.h")) as f:
        version = re.search(r'#define REDMUTEX_VERSION_STRING "([^"]+)"', f.read()).group(1)  # type: ignore[union-attr]
    res = cli.run("--version")
    assert res.returncode == 0
    assert res.stdout.startswith(f"redmutex {version}")


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--lease", "0.005"], "--lease must be at least 0.1 seconds"),
        (["--lease", "0.0001"], "--lease must be at least 0.1 seconds"),  # positive, below a millisecond
        (["--lease", "0"], "--lease must be at least 0.1 seconds"),
        (["--lease", "-1"], "--lease needs a number of seconds"),
        (["--wait", "-0.0001"], "--wait needs a number of seconds >= 0"),
        (["--kill-after", "1e12"], "seconds >= 0 (at most 31622400)"),
    ],
)
def test_time_options_are_refused_in_seconds_the_unit_they_are_given_in(
    cli: Cli, args: list[str], words: str
) -> None:
    res = cli.run("run", *args, "job", "--", "touch", "ran")
    assert res.returncode == 64, res.stderr
    assert words in res.stderr
    assert "_ms" not in res.stderr and " ms" not in res.stderr, res.stderr
    assert not os.path.exists(os.path.join(cli.cwd, "ran"))


def test_a_wait_below_a_millisecond_is_a_wait_not_an_error(cli: Cli) -> None:
    res = cli.run("run", "--wait", "0.0001", "job", "--", "touch", "ran")
    assert res.returncode == 0, res.stderr
    assert os.path.exists(os.path.join(cli.cwd, "ran"))
