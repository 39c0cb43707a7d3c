"""With no test server at all (no URI, no Docker, no mongoeco: Python 3.11 on a bare
machine), the suite says once how to get one and runs what needs none; no errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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
    assert "passed" in out and "deselected" in out
    # The reason, with how to point the suite at a server, appears once (not per test).
    assert out.count("tests that need a MongoDB-compatible server were not run") == 1
    assert out.count("RUNNERQ_TEST_MONGO_URI to a MongoDB") == 1
    assert "dev-server" in out and "CONTRIBUTING.md" in out
