"""Progress that shows progress (issue 25, point 7): count, rate and time left, on a
terminal, redrawn while the work runs; nothing on a pipe."""

from __future__ import annotations

import re

from runnerq_cli.cli.progress import progress_text
from tests.bulk_fixtures import insert_activities
from tests.terminal import on_terminal


def test_progress_text() -> None:
    assert progress_text(8700, 20_000, 458.0, "lines") == "8,700 / 20,000 lines  19/s  " \
                                                          "9m55s left"
    assert progress_text(8700, None, 458.0, "lines") == "8,700 lines  19/s"
    assert progress_text(0, 10, 0.0, "activities") == "0 / 10 activities  0.0/s"


def test_a_bulk_action_on_a_terminal_shows_count_rate_and_time_left(backend, cli_env) -> None:
    """(tests/test_bulk_batches.py checks the bar stays off standard output.)"""
    insert_activities(backend.context, 50, "pending")
    code, shown = on_terminal({**cli_env, "COLUMNS": "100"}, "cancel", "--status", "pending",
                              "--max", "100", "--yes", "--batch-size", "2", columns=100)
    assert code == 0, shown
    assert re.findall(r"(\d+) / 50 activities\s+[\d.,]+/s\s+(\S+) left", shown), shown[-500:]
    assert "cancel: matched 50" in shown
