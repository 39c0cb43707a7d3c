"""Progress that shows progress (issue 25, point 7): count, rate and time left, on a
terminal, redrawn while the work runs; nothing on a pipe."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
import time

from runnerq_cli.cli.progress import progress_text
from tests.bulk_fixtures import insert_activities


def test_progress_text() -> None:
    assert progress_text(8700, 20_000, 458.0, "lines") == "8,700 / 20,000 lines  19/s  " \
                                                          "9m55s left"
    assert progress_text(8700, None, 458.0, "lines") == "8,700 lines  19/s"
    assert progress_text(0, 10, 0.0, "activities") == "0 / 10 activities  0.0/s"


def test_a_bulk_action_on_a_terminal_shows_count_rate_and_time_left(backend, cli_env) -> None:
    insert_activities(backend.context, 50, "pending")
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "runnerq_cli", "cancel", "--status",
                             "pending", "--max", "100", "--yes", "--batch-size", "2"],
                            env={**cli_env, "COLUMNS": "100"}, stdout=subprocess.PIPE,
                            stderr=slave, text=True)
    os.close(slave)
    seen = b""
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                break  # the child closed the terminal
            if not chunk:
                break
            seen += chunk
    finally:
        out = proc.communicate(timeout=60)[0]
        os.close(master)
    assert proc.returncode == 0, seen.decode(errors="replace")
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", seen.decode(errors="replace"))
    shown = re.findall(r"(\d+) / 50 activities\s+[\d.,]+/s\s+(\S+) left", text)
    assert shown, text[-500:]
    assert "cancel: matched 50" in out
