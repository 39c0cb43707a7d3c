"""A reader that stops reading (`| head`) is not an error: exit 0, no traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize("args", [["tail", "events", "--since", "1h", "--no-follow"],
                                  ["tail", "events", "--since", "1h", "--no-follow", "-o",
                                   "jsonl"],
                                  ["list", "pending", "--limit", "50"]])
def test_closed_stdout_exits_zero(queue, cli_env, args) -> None:
    from runnerq_cli.backend.queue import ActivitySpec

    queue.enqueue_many([ActivitySpec("t", {"i": i}) for i in range(30)])
    proc = subprocess.Popen([sys.executable, "-m", "runnerq_cli", *args], env=cli_env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    proc.stdout.close()  # the reader is gone before the first line is written
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert b"Traceback" not in err
