"""A reader that stops reading (`| head`) is not an error: exit 0, no traceback."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest


@pytest.mark.parametrize("args", [["tail", "events", "--since", "1h", "--no-follow"],
                                  ["tail", "events", "--since", "1h", "--no-follow", "-o",
                                   "jsonl"],
                                  ["list", "pending", "--limit", "50"]])
def test_closed_stdout_exits_zero(queue, cli_env, args) -> None:
    from runnerq_cli.backend.queue.queue import ActivitySpec

    queue.enqueue_many([ActivitySpec("t", {"i": i}) for i in range(30)])
    proc = subprocess.Popen([sys.executable, "-m", "runnerq_cli", *args], env=cli_env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    proc.stdout.close()  # the reader is gone before the first line is written
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert b"Traceback" not in err


# ------------------------------------------------------------------ signals on a pipe
# `enqueue --from -` and `dlq import -` read a pipe whose producer may stay silent: a
# SIGTERM must stop them at once, with every line read done and reported (issue 23 #7).


def _ndjson(count: int, start: int = 0, *, original: bool = False) -> bytes:
    import json
    import uuid

    return b"".join(json.dumps({"type": "t", "payload": {"n": n}, **(
        {"original_id": str(uuid.uuid4())} if original else {})}).encode() + b"\n"
        for n in range(start, start + count))


def _signalled(command: list[str], cli_env: dict[str, str], activities: Any, *,
               lines: int | bytes, batch: int,
               gaps: tuple[float, ...]) -> tuple[int, str, float]:
    """Feed `lines` (a count, or the input itself) to `command` with --batch-size `batch`
    and keep the pipe open (a silent producer); once the first batch is written, send
    SIGTERM, then one more after each of `gaps` seconds. Returns (exit code, stderr,
    seconds from the first signal to the exit)."""
    import signal
    import time

    from tests.helpers import default_signals
    from tests.waiting import wait_until

    proc = subprocess.Popen([sys.executable, "-m", "runnerq_cli", *command, "--batch-size",
                             str(batch), "-q"], env=cli_env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=default_signals)
    assert proc.stdin is not None
    try:
        proc.stdin.write(lines if isinstance(lines, bytes)
                         else _ndjson(lines, original=command[0] == "dlq"))
        proc.stdin.flush()
        wait_until(lambda: activities.count_documents({}) >= batch, timeout=60,
                   interval=0.01, message="the first batch")
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        for gap in gaps:
            time.sleep(gap)  # the interval under test between two signals
            proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)  # the producer has not closed the pipe
        waited = time.monotonic() - sent
        err = proc.stderr.read().decode() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stdin.close()
    assert "Traceback" not in err
    return code, err, waited


@pytest.mark.parametrize("command", [["enqueue", "--from", "-"], ["dlq", "import", "-"]])
def test_sigterm_while_the_producer_is_silent_stops_at_once_with_every_line_read(
        backend, cli_env, command: list[str]) -> None:
    activities = backend.context.activities
    # Three lines in one write: the first batch (2) is written, the third line is read
    # and waits for its batch; the producer then keeps the pipe open, silent.
    code, err, waited = _signalled(command, cli_env, activities, lines=3, batch=2, gaps=())
    assert code == 130, err
    assert waited < 10, waited  # not waiting for the producer (generous for a busy host)
    assert len(err.splitlines()) == 1, err
    assert activities.count_documents({}) == 3  # the line read is not dropped
    if command[0] == "enqueue":
        assert "3 lines done, 3 enqueued; last line reached 3" in err, err
    else:
        assert "stopped after line 3 (3 lines done: 3 enqueued)" in err, err


@pytest.mark.parametrize("command", [["enqueue", "--from", "-"], ["dlq", "import", "-"]])
def test_two_signals_20_ms_apart_name_the_last_line_written_and_a_rerun_writes_none_twice(
        backend, cli_env, tmp_path, command: list[str]) -> None:
    """The second signal lets the batch being written finish too: the line named is the
    last one written, exactly, so the rerun the report advises (`--skip-lines N`; for `dlq
    import` the same command) writes every other line once. Lines without idempotency
    keys: a half-written batch would be written twice."""
    import re

    activities = backend.context.activities
    data = _ndjson(300, original=command[0] == "dlq")
    code, err, _ = _signalled(command, cli_env, activities, lines=data, batch=5,
                              gaps=(0.02,))
    assert code == 130, err
    [line] = err.splitlines()
    found = re.search(r"(?:last line reached|stopped after line) (\d+)", line)
    assert found, line
    done = int(found.group(1))
    assert 5 <= done < 300 and activities.count_documents({}) == done, line
    numbers = [d["payload"]["n"] for d in activities.find({}, {"payload": 1})]
    assert sorted(numbers) == list(range(done)), line  # lines 1..done, each once

    source = tmp_path / "lines.ndjson"
    source.write_bytes(data)
    rerun = [*command[:-1], str(source), "-q"]
    if command[0] == "enqueue":
        advised = re.search(r"run again with --skip-lines (\d+)", line)
        assert advised and int(advised.group(1)) == done, line
        rerun += ["--skip-lines", advised.group(1)]
    finished = subprocess.run([sys.executable, "-m", "runnerq_cli", *rerun], env=cli_env,
                              capture_output=True, timeout=120)
    assert finished.returncode == 0, finished.stderr
    numbers = [d["payload"]["n"] for d in activities.find({}, {"payload": 1})]
    assert sorted(numbers) == list(range(300))  # one activity per line


@pytest.mark.parametrize("command", [["enqueue", "--from", "-"], ["dlq", "import", "-"]])
def test_a_signal_after_the_interrupted_report_still_exits_130(
        backend, cli_env, command: list[str]) -> None:
    """The second signal lands once the report is out, while the process exits: it had
    the default action back (killed, exit 143 / -15), now it changes nothing."""
    import signal
    import time

    from tests.helpers import default_signals
    from tests.waiting import wait_until

    activities = backend.context.activities
    proc = subprocess.Popen([sys.executable, "-m", "runnerq_cli", *command, "--batch-size",
                             "2", "-q"], env=cli_env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=default_signals)
    assert proc.stdin is not None and proc.stderr is not None
    try:
        proc.stdin.write(_ndjson(3, original=command[0] == "dlq"))
        proc.stdin.flush()
        wait_until(lambda: activities.count_documents({}) >= 2, timeout=60, interval=0.01,
                   message="the first batch")
        proc.send_signal(signal.SIGTERM)
        line = proc.stderr.readline().decode()  # the report's one line: the work is over
        assert "interrupted" in line, line
        while proc.poll() is None:  # signals all the way to the exit
            proc.send_signal(signal.SIGTERM)
            time.sleep(0.005)
        assert proc.wait(timeout=30) == 130, line
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stdin.close()
