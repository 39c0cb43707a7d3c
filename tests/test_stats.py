"""`runnerq-mongo stats`: exact counts, JSON schema, --check exit codes, --watch refreshes."""

from __future__ import annotations

import json
import time

import pytest

from runnerq_cli.backend.domain.snapshots import CHECK_DURATIONS, CHECK_NAMES
from runnerq_cli.backend.queue.queue import ActivitySpec
from runnerq_cli.backend.views.metrics import SCHEMA
from runnerq_cli.cli.exits import ExitCode
from runnerq_cli.cli.stats_checks import evaluate, parse_check
from runnerq_cli.errors import InvalidArgument
from tests.test_stats_reads import default_signals
from tests.waiting import LineReader


@pytest.fixture
def mix(queue, clock):
    """A known mix: 2 pending (1 high, 1 low), 1 scheduled, 1 processing,
    2 completed, 1 failed, 1 dead-lettered; types a and b."""
    queue.enqueue("a", {}, priority="high")  # -> completed
    queue.enqueue("a", {}, priority="high")  # -> completed
    queue.enqueue("b", {}, priority="critical")  # -> failed
    queue.enqueue("b", {}, priority="critical", max_retries=1)  # -> dead letter
    queue.enqueue("a", {}, priority="normal")  # -> processing
    clock.advance(2)
    claims = queue.dequeue("w1", limit=5)
    assert len(claims) == 5
    clock.advance(3)
    by_type = {c.activity.priority: [] for c in claims}
    for c in claims:
        by_type[c.activity.priority].append(c)
    for c in by_type[3]:
        queue.ack_success(c, {"ok": 1})
    # by max_retries, not claim order (a partitioned queue claims in rotation)
    failing, dead = sorted(by_type[4], key=lambda c: -c.activity.max_retries)
    queue.ack_failure(failing, "bad", retryable=False)
    queue.ack_failure(dead, "bad", retryable=True)
    queue.enqueue("a", {}, priority="high")
    queue.enqueue("b", {}, priority="low")
    queue.enqueue("a", {}, delay_seconds=3600)
    queue.registry.register_worker("w1", types=["a", "b"], concurrency=2)
    return queue


@pytest.mark.partitioned
def test_exact_counts_and_schema(mix, run_cli):
    res = run_cli("stats", "-o", "json", "--by", "type")
    assert res.code == 0, res.stderr
    snap = json.loads(res.stdout)
    assert snap["schema"] == SCHEMA
    assert set(snap) == {"schema", "queue", "generated_at", "total", "by_status", "by_priority",
                         "by_type", "oldest_pending", "throughput", "latency", "workers",
                         "pause", "estimated", "history", "malformed", "schedules", "limits"}
    assert snap["estimated"] == []  # a small queue: completed counted too
    assert snap["history"] is None and snap["malformed"] == []
    assert snap["pause"] == {"paused": False, "all": False, "types": [], "reason": None,
                             "actor": None, "at": None, "by_type": {}}
    assert snap["by_status"] == {"pending": 2, "scheduled": 1, "processing": 1, "waiting": 0,
                                 "completed": 2, "failed": 1, "dead_letter": 1, "cancelled": 0}
    assert snap["total"] == 8
    assert snap["by_priority"]["critical"] == {"failed": 1, "dead_letter": 1}
    assert snap["by_priority"]["high"] == {"pending": 1, "completed": 2}  # small: exact
    assert snap["by_priority"]["low"] == {"pending": 1}
    assert next(iter(snap["by_priority"])) == "critical"
    assert snap["by_type"]["a"] == {"processing": 1, "pending": 1, "scheduled": 1,
                                    "completed": 2}
    assert snap["by_type"]["b"] == {"failed": 1, "dead_letter": 1, "pending": 1}
    assert snap["oldest_pending"]["age_seconds"] >= 0
    tp = snap["throughput"]
    assert (tp["completed"], tp["failed"], tp["dead_letter"]) == (2, 1, 1)
    # over the time the window covers: the queue is seconds old, not 5 minutes
    assert 10 <= tp["covered_seconds"] < 300
    assert tp["completed_per_minute"] == pytest.approx(2 * 60 / tp["covered_seconds"], rel=1e-3)
    lat = snap["latency"]
    # The fake clock: every finished one waited 2 s for its claim and ran 3 s.
    assert lat["queue_wait_seconds"] == {"count": 4, "p50": 2.0, "p95": 2.0, "p99": 2.0}
    assert lat["run_seconds"] == {"count": 4, "p50": 3.0, "p95": 3.0, "p99": 3.0}
    assert snap["workers"] == {"live": 1, "stale": 0, "in_flight": 0}


def test_without_by_type_it_is_null(mix, run_cli):
    snap = json.loads(run_cli("stats", "-o", "json").stdout)
    assert snap["by_type"] is None


def test_text_view(mix, run_cli):
    res = run_cli("stats")
    assert res.code == 0
    for word in ("pending", "dead-letter", "oldest pending", "throughput", "p95", "workers"):
        assert word in res.stdout


def test_a_history_with_nothing_finished_says_so_in_full(queue, run_cli):
    # As a row of the 12-cell type column it read "(nothing fi…" at 80 columns.
    queue.enqueue("t", {})
    shown = run_cli("stats", "--since", "1h", env={"COLUMNS": "80"})
    assert shown.code == 0 and shown.stdout.rstrip().endswith(
        "per type, last 1h: nothing finished")
    assert "…" not in shown.stdout


def test_title_keeps_its_timestamp_on_one_line_on_a_terminal(queue, cli_env):
    """On a 200-column terminal the title wrapped at the narrow table's width (issue 11)."""
    import os
    import pty
    import re
    import subprocess
    import sys

    queue.enqueue("a", {})  # one priority column: a table narrower than its title
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "runnerq_cli", "stats"],
                            env={**cli_env, "COLUMNS": "200"}, stdout=slave, stderr=slave,
                            stdin=slave, close_fds=True, preexec_fn=default_signals)
    os.close(slave)
    output = b""
    try:
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            output += chunk
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    text = re.sub(rb"\x1b\[[0-9;]*m", b"", output).decode()
    first = text.splitlines()[0].rstrip()
    assert re.fullmatch(r"queue tests  \(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}Z\)", first), \
        text[:300]


def test_paused_line_shows_the_one_time_format(queue, run_cli):
    """`stats` and `stats --watch` print the pause's time as every text view does
    (`2026-12-01 19:47:41.940Z`), not the JSON's ISO form (issue 25, point 11)."""
    import re

    queue.enqueue("charge", {})
    assert run_cli("pause", "--type", "charge", "--actor", "ann").code == 0
    iso = json.loads(run_cli("stats", "-o", "json").stdout)["pause"]["at"]
    assert "T" in iso  # JSON keeps ISO-8601
    one_time = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}Z"
    for args in (("stats",), ("stats", "--watch", "--iterations", "1", "--interval", "0.1s")):
        res = run_cli(*args)
        assert res.code == 0, res.stderr
        (line,) = [ln for ln in res.stdout.splitlines() if ln.startswith("paused")]
        assert re.fullmatch(rf"paused\s+types charge since {one_time} by ann", line.rstrip()), \
            (args, line)


def test_check_exit_codes(mix, run_cli):
    ok = run_cli("stats", "-o", "json", "--check", "pending == 2", "--check", "workers >= 1",
                 "--check", "oldest_pending < 1h")
    assert ok.code == 0, ok.stderr
    bad = run_cli("stats", "-o", "json", "--check", "dead_letter == 0", "--check", "failed < 1",
                  "--check", "total == 8")
    assert bad.code == ExitCode.CHECK_FAILED
    lines = bad.stderr.strip().splitlines()
    assert len(lines) == 2
    assert "dead_letter == 0" in lines[0] and "actual dead_letter = 1" in lines[0]
    assert "failed < 1" in lines[1]
    assert run_cli("stats", "--check", "pending ==").code == ExitCode.USAGE
    assert run_cli("stats", "--check", "nosuch > 1").code == ExitCode.USAGE
    assert run_cli("stats", "--check", "__import__('os') > 1").code == ExitCode.USAGE


def test_check_values_say_number_or_duration_by_name(queue, run_cli):
    """A count is compared with a number ("expected a finite number" for 1e999, a
    duration refused); a name in seconds takes a duration and says "duration"."""
    for check, message in (
            ("dead_letter > 1e999", "expected a finite number, got '1e999'"),
            ("workers < 5m", "expected a number, got '5m'"),
            ("oldest_pending > 1e999", "expected a finite duration, got '1e999'"),
            ("wait_p95 < 5x", "expected a duration like 30s, 5m or 2h, got '5x'")):
        res = run_cli("stats", "--check", check)
        assert res.code == ExitCode.USAGE and res.stdout == "", (check, res)
        assert res.stderr == f"error: --check {check!r}: {message}\n", (check, res.stderr)
    assert run_cli("stats", "--check", "oldest_pending < 5m", "--check", "pending <= 1e3",
                   "--check", "run_p95 < 90").code == 0


def test_check_parser_units():
    check = parse_check("oldest_pending < 2m", CHECK_NAMES, CHECK_DURATIONS)
    assert check.value == 120
    assert evaluate([check], {"oldest_pending": 119}) == []
    assert evaluate([check], {"oldest_pending": 120})
    with pytest.raises(InvalidArgument):
        parse_check("pending == 1; drop", CHECK_NAMES, CHECK_DURATIONS)


def test_watch_refreshes_and_shows_deltas(queue, cli_env, run_cli):
    """Off a terminal each refresh is a block; a change between two shows as a delta."""
    import signal
    import subprocess
    import sys

    queue.enqueue("a", {})
    proc = subprocess.Popen([sys.executable, "-m", "runnerq_cli", "stats", "--watch",
                             "--interval", "0.2s"], env=cli_env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=default_signals)
    try:
        lines = LineReader(proc.stdout)
        lines.wait_for(lambda line: "refresh 2" in line, timeout=60,
                       message="a second refresh")  # the first block (pending 1) is out
        queue.enqueue_many([ActivitySpec("a", {}), ActivitySpec("a", {})])  # one insert
        lines.wait_for(lambda line: line.split()[:3] == ["pending", "3", "+2"],
                       message="pending going from 1 to 3 (+2)")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0, proc.stderr.read()
        lines.rest()
    finally:
        if proc.poll() is None:
            proc.kill()
    blocks = "".join(lines.lines).split("refresh ")[1:]
    assert len(blocks) >= 3
    assert blocks[0] != blocks[-1]
    assert run_cli("stats", "--watch", "-o", "json").code == ExitCode.USAGE


def test_watch_on_a_terminal_redraws_and_ctrl_c_exits_0(queue, cli_env):
    """Through a pseudo-terminal: rich Live redraws in place; SIGINT leaves with exit 0."""
    import os
    import pty
    import signal
    import subprocess
    import sys

    queue.enqueue("a", {})
    master, slave = pty.openpty()
    env = {k: v for k, v in cli_env.items() if k != "NO_COLOR"}
    proc = subprocess.Popen([sys.executable, "-m", "runnerq_cli", "stats", "--watch",
                             "--interval", "0.3s"], env=env, stdout=slave, stderr=slave,
                            stdin=slave, close_fds=True, preexec_fn=default_signals)
    os.close(slave)
    output = b""
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and output.count(b"pending") < 3:
            import select

            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    output += os.read(master, 65536)
                except OSError:
                    break
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    assert output.count(b"pending") >= 3, output[-500:]
    assert b"\x1b[" in output  # cursor movement: redrawn in place
    assert code == 0
