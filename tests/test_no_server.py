"""With no test server at all (no URI, no Docker, no mongoeco: Python 3.11 on a bare
machine), the suite says once how to get one and runs what needs none; no errors."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

# A long proof of our own logic (pyproject.toml, "proof"): the oldest-versions run
# of .ci/run leaves it out.
pytestmark = pytest.mark.proof

ROOT = Path(__file__).resolve().parents[1]


def test_no_server_tier_skips_with_one_reason() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNNERQ_")}
    env.update(RUNNERQ_TEST_NO_DOCKER="1", RUNNERQ_TEST_NO_MONGOECO="1")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "tests/test_idempotency.py", "tests/test_import_cost.py"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    out = proc.stdout
    assert proc.returncode == 0, out[-2000:]
    assert "error" not in out.lower().replace("errors.py", ""), out[-2000:]
    assert "passed" in out and "skipped" in out
    # One summary line for every test that needs a server, saying how to get one.
    reasons = [line for line in out.splitlines() if "no test server" in line]
    assert len(reasons) == 1, reasons
    folded = re.match(r"SKIPPED \[(\d+)\] tests/conftest\.py: no test server: set "
                      r"RUNNERQ_TEST_MONGO_URI", reasons[0])
    assert folded and int(folded.group(1)) > 10, reasons  # every such test, on one line
    assert "dev-server" in reasons[0] and "CONTRIBUTING.md" in reasons[0]
