"""The manual page says what --help says, and formats without warnings."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from conftest import cli_path

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MAN = os.path.join(ROOT, "cli", "redmutex.1")


def help_options() -> set[str]:
    out = subprocess.run([cli_path(), "--help"], capture_output=True, text=True, check=True).stdout
    return set(re.findall(r"(?<![\w-])--[a-z][a-z-]+", out))


def test_the_man_page_documents_every_long_option_and_exit_status() -> None:
    with open(MAN) as f:
        page = f.read().replace("\\-", "-")
    for option in help_options():
        assert option in page, f"{option} is in --help but not in the man page"
    for option in set(re.findall(r"(?<![\w-])--[a-z][a-z-]+", page)):
        assert option in help_options(), f"{option} is in the man page but not in --help"
    for status in ("64", "69", "75", "76", "77", "126", "127", "128"):
        assert re.search(rf"\b{status}\b", page), f"exit status {status} is not documented"


def test_the_man_page_formats_without_warnings() -> None:
    groff = shutil.which("groff")
    if not groff:
        pytest.fail("groff is not installed (apt-get install groff-base)")
    res = subprocess.run([groff, "-man", "-Tutf8", "-ww", "-z", MAN], capture_output=True, text=True)
    assert res.returncode == 0 and res.stderr == "", res.stderr
