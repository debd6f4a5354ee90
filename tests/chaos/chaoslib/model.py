"""M1: the model-based property test of the TTL rule ("no hold is cut short",
docs/wire-format.md), tests/python/test_ttl_model.py, with many more examples than
the normal Python suite runs, from a random seed: the run's seed, so --seed replays
the same examples (timings differ, the draws do not). Only in the full profile (or
with --only M1)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from .scenario import Env, Row, skip_row

ROOT = Path(__file__).resolve().parents[3]
TEST = ROOT / "tests" / "python" / "test_ttl_model.py"


def m1(env: Env) -> list[Row]:
    py = os.path.abspath(env.tools.python)  # it runs from tests/python; a venv's link must stay a link
    missing = subprocess.run([py, "-c", "import pytest, hypothesis, redis"], capture_output=True)
    if missing.returncode != 0:
        return [
            skip_row(
                env,
                "M1",
                "ttl model",
                "CHECK",
                f"{py} lacks pytest, hypothesis or redis (pip install pytest hypothesis redis)",
            )
        ]
    examples = 300 if env.profile.name == "full" else 60
    row = Row("M1", "ttl model", "CHECK", env.seed)
    log = env.workdir / "M1.log"
    child_env = dict(
        os.environ,
        REDMUTEX_MODEL_EXAMPLES=str(examples),
        REDMUTEX_MODEL_SEED=str(env.seed),
        # A failure here is worth the time it takes to shrink.
        REDMUTEX_MODEL_SHRINK="1",
    )
    started = time.monotonic()
    with log.open("w") as out:
        rc = subprocess.run(
            [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(TEST)],
            cwd=TEST.parent,
            env=child_env,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=4 * 3600,
        ).returncode
    row.duration_s = time.monotonic() - started
    row.notes.append(f"{examples} examples from seed {env.seed}; pytest output in {log}")
    if rc != 0:
        tail = [line for line in log.read_text().splitlines() if line.startswith("E ")][:6]
        row.fail(f"the model found a counterexample (pytest exit {rc})", *tail)
    return [row]
