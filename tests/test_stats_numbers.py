"""Numbers that are right (issue 25, point 4), read as a user reads them: `stats -o json`
and the text view.

Nearest-rank percentiles (docs/cli.md), throughput over the time the window
covers, counts exact on a small queue, and an incident's failures kept in the
history after its dead letters are retried.
"""

from __future__ import annotations

import json
import re

from tests.helpers import drive_to


def _run(queue, clock, seconds: float, kind: str = "job", fail: bool = False) -> None:
    queue.enqueue(kind, {}, max_retries=1)
    claim = queue.dequeue("w", types=[kind])[0]
    clock.advance(seconds)
    if fail:
        queue.ack_failure(claim, "boom", retryable=True)
    else:
        queue.ack_success(claim, None)


def test_percentiles_are_nearest_rank(queue, clock, run_cli):
    for seconds in (7.6, 11.3, 14.6):
        _run(queue, clock, seconds)
    res = run_cli("stats", "-o", "json")
    run = json.loads(res.stdout)["latency"]["run_seconds"]
    assert (run["count"], run["p50"], run["p95"], run["p99"]) == (3, 11.3, 14.6, 14.6)
    text = run_cli("stats").stdout
    assert re.search(r"claim to done \(15m\)\s+p50 11\.3s\s+p95 14\.6s", text), text


def test_throughput_over_the_time_the_window_covers(queue, clock, run_cli):
    """One every 2 s for 80 s on a new queue is 30/min, not 8/min spread over 5 minutes."""
    clock.advance(-80)  # the run ends about now: the command's clock is the real one
    for _ in range(40):
        _run(queue, clock, 2)
    snap = queue.inspector.stats_snapshot()["throughput"]
    assert snap["completed"] == 40 and snap["covered_seconds"] == 80.0
    assert snap["completed_per_minute"] == 30.0
    text = run_cli("stats").stdout
    assert re.search(r"throughput \(1m[23]\ds\)\s+(29|30|2\d\.\d+) completed/min", text), text
    clock.advance(600)  # later, a full window of nothing: the rate over the whole window
    snap = queue.inspector.stats_snapshot()["throughput"]
    assert snap["covered_seconds"] == 300.0 and snap["completed_per_minute"] == 0.0


def test_a_one_activity_queue_is_counted_exactly(queue, run_cli):
    drive_to(queue, "completed")
    res = run_cli("stats")
    assert re.search(r"^completed\s+1\b", res.stdout, re.M)
    assert re.search(r"^total\s+1\b", res.stdout, re.M) and "≈" not in res.stdout


def test_an_incident_stays_in_the_history_after_a_retry(queue, clock, run_cli):
    for _ in range(3):
        _run(queue, clock, 1, kind="charge", fail=True)
    before = json.loads(run_cli("stats", "--since", "1h", "-o", "json").stdout)
    assert before["history"]["by_type"]["charge"]["dead_letter"] == 3
    assert run_cli("retry", "--status", "dead-letter", "--type", "charge", "--max", "3",
                   "--yes").code == 0
    after = json.loads(run_cli("stats", "--since", "1h", "-o", "json").stdout)
    charge = after["history"]["by_type"]["charge"]
    assert charge["dead_letter"] == 3 and sum(charge["per_bucket"]) == 3
    assert after["by_status"]["dead_letter"] == 0 and after["by_status"]["pending"] == 3


def test_doctor_and_stats_say_durations_and_rates_alike(queue, clock, run_cli):
    """The oldest pending wait in one duration form in `doctor` and `stats` (`2m50s`, not
    `171.831s` beside `2m49s`); rates to one decimal (`148.3/min`, not `148.265`)."""
    clock.advance(-170)  # the commands' clock is the real one: these are 170 s old
    for _ in range(7):
        _run(queue, clock, 1)
    queue.enqueue("charge", {})
    doctor = run_cli("doctor").stdout
    (backlog,) = [ln for ln in doctor.splitlines() if "oldest pending activity waits" in ln]
    assert re.search(r"waits 2m[45]\ds \(charge\)", backlog), backlog
    stats = run_cli("stats").stdout
    assert re.search(r"^oldest pending\s+2m[45]\ds \(", stats, re.M), stats
    (rates,) = [ln for ln in stats.splitlines() if ln.startswith("throughput")]
    assert re.fullmatch(r"throughput \(\S+\)\s+\d(\.\d)? completed/min, 0 failed/min",
                        rates.rstrip()), rates
