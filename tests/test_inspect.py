"""list / show / events / result / wait / workers: each status, pagination, every exit code."""

from __future__ import annotations

import json
import sys
import threading
import time
import uuid
from datetime import timedelta

import pytest

from runnerq_cli.cli.exits import ExitCode
from tests.helpers import drive_to
from tests.waiting import wait_until


def jsonl(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


# What each status's activity carries, as the tests below look for it.
ERRORS = {"failed": "no good", "dead_letter": "gave up", "retrying": "again"}


def finish(queue, clock, kind: str, outcome: str, **options):
    """Enqueue one activity of `kind` and drive it to `outcome` (see tests/helpers.py)."""
    return drive_to(queue, outcome, kind, payload={"k": kind}, result={"answer": 42},
                    error=ERRORS.get(outcome, "boom"), clock=clock, **options)


@pytest.fixture
def every_status(queue, clock):
    ids = {
        "pending": finish(queue, clock, "t_pending", "pending"),
        "processing": finish(queue, clock, "t_processing", "processing"),
        "completed": finish(queue, clock, "t_completed", "completed"),
        "failed": finish(queue, clock, "t_failed", "failed"),
        "dead_letter": finish(queue, clock, "t_dead", "dead_letter", max_retries=1),
        "scheduled": finish(queue, clock, "t_sched", "retrying"),
        "cancelled": finish(queue, clock, "t_cancel", "cancelled"),
    }
    return ids


@pytest.mark.parametrize("status", ["pending", "scheduled", "processing", "running",
                                    "completed", "failed", "dead-letter", "cancelled"])
def test_list_each_status(every_status, run_cli, status):
    key = {"running": "processing", "dead-letter": "dead_letter"}.get(status, status)
    res = run_cli("list", status, "-o", "jsonl")
    assert res.code == 0, res.stderr
    assert [r["id"] for r in jsonl(res.stdout)] == [str(every_status[key])]
    text = run_cli("list", status)
    # Text tables show an id's unique prefix (its first 8 hex digits here).
    assert str(every_status[key])[:8] in text.stdout
    assert str(every_status[key]) not in text.stdout


def test_list_filters_and_json(queue, clock, run_cli):
    queue.enqueue("a", {}, metadata={"team": "x"})
    clock.advance(120)
    b = queue.enqueue("b", {}, metadata={"team": "y"}).activity_id
    c = queue.enqueue("a", {}, metadata={"team": "y"}).activity_id
    res = run_cli("list", "pending", "-o", "json", "--metadata", "team=y")
    data = json.loads(res.stdout)
    assert {r["id"] for r in data["items"]} == {str(b), str(c)} and data["next_cursor"] is None
    res = run_cli("list", "pending", "-o", "jsonl", "--type", "a", "--metadata", "team=y")
    assert [r["id"] for r in jsonl(res.stdout)] == [str(c)]
    since = (clock() - timedelta(seconds=60)).isoformat()
    res = run_cli("list", "pending", "-o", "jsonl", "--since", since)
    assert {r["id"] for r in jsonl(res.stdout)} == {str(b), str(c)}
    assert run_cli("list", "nonsense").code == ExitCode.USAGE
    assert run_cli("list", "pending", "--metadata", "$where=1").code == ExitCode.USAGE
    assert run_cli("list", "pending", "--after", "garbage").code == ExitCode.USAGE


def test_pagination_under_concurrent_inserts(queue, clock, run_cli):
    """Paging through pending while new activities keep arriving: every activity present
    at the start is seen exactly once, in claim order."""
    original = []
    for i in range(9):
        original.append(queue.enqueue("a", {"i": i}, priority="high" if i % 3 == 0
                                      else "normal").activity_id)
        clock.advance(0.001)
    seen: list[str] = []
    after = None
    for page_no in range(20):
        args = ["list", "pending", "-o", "json", "--limit", "2"]
        if after:
            args += ["--after", after]
        data = json.loads(run_cli(*args).stdout)
        seen += [r["id"] for r in data["items"]]
        # Inserts between pages: some sort before the cursor (high), some after (low).
        queue.enqueue("a", {"new": page_no}, priority="critical" if page_no % 2 else "low")
        clock.advance(0.001)
        after = data["next_cursor"]
        if after is None:
            break
    assert len(seen) == len(set(seen)), "an activity was repeated"
    assert {str(a) for a in original} <= set(seen), "an activity was skipped"
    # The text table prints the next cursor on stderr.
    res = run_cli("list", "pending", "--limit", "1")
    assert "next page: --after " in res.stderr


def test_show_and_events(every_status, run_cli):
    aid = every_status["failed"]
    res = run_cli("show", str(aid))
    assert res.code == 0
    for text in (str(aid), "t_failed", "no good", "non_retryable", "Enqueued", "Failed",
                 '"k": "t_failed"'):
        assert text in res.stdout
    data = json.loads(run_cli("show", str(aid), "-o", "json").stdout)
    assert data["activity"]["status"] == "failed"
    assert data["result"]["state"] == "Err"
    assert [e["event_type"] for e in data["events"]] == ["Enqueued", "Dequeued", "Started",
                                                         "Failed"]
    events = run_cli("events", str(aid), "-o", "jsonl")
    assert [e["event_type"] for e in jsonl(events.stdout)] == ["Enqueued", "Dequeued",
                                                               "Started", "Failed"]
    assert "Failed" in run_cli("events", str(aid)).stdout
    # --limit N keeps the newest N, still oldest first (as its help and the docs say).
    every = jsonl(events.stdout)
    newest_two = jsonl(run_cli("events", str(aid), "--limit", "2", "-o", "jsonl").stdout)
    assert newest_two == every[-2:]
    help_text = " ".join(run_cli("events", "--help").stdout.split())
    assert "printed oldest first (--limit keeps the newest)" in help_text
    missing = str(uuid.uuid4())
    assert run_cli("show", missing).code == ExitCode.NOT_FOUND
    assert run_cli("events", missing).code == ExitCode.NOT_FOUND
    assert run_cli("show", "not-a-uuid").code == ExitCode.USAGE


@pytest.mark.parametrize("key,code", [
    ("completed", ExitCode.OK), ("failed", ExitCode.ACTIVITY_FAILED),
    ("dead_letter", ExitCode.ACTIVITY_DEAD_LETTERED), ("pending", ExitCode.NO_RESULT),
    ("cancelled", ExitCode.ACTIVITY_CANCELLED),
])
def test_result_exit_codes(every_status, run_cli, key, code):
    res = run_cli("result", str(every_status[key]))
    assert res.code == code, res.stderr
    if key == "completed":
        assert json.loads(res.stdout) == {"answer": 42}
    data = json.loads(run_cli("result", str(every_status[key]), "-o", "json").stdout)
    assert data["exit_code"] == code


def test_result_not_found(run_cli, queue):
    assert run_cli("result", str(uuid.uuid4())).code == ExitCode.NOT_FOUND


@pytest.mark.parametrize("key,code", [
    ("completed", ExitCode.OK), ("failed", ExitCode.ACTIVITY_FAILED),
    ("dead_letter", ExitCode.ACTIVITY_DEAD_LETTERED), ("cancelled", ExitCode.ACTIVITY_CANCELLED),
])
def test_wait_terminal_exit_codes(every_status, run_cli, key, code):
    res = run_cli("wait", str(every_status[key]), "--timeout", "5s")
    assert res.code == code, res.stderr
    if key == "completed":
        assert json.loads(res.stdout) == {"answer": 42}


def test_wait_timeout_and_not_found(every_status, run_cli):
    start = time.monotonic()
    res = run_cli("wait", str(every_status["pending"]), "--timeout", "0.5s", "-o", "json")
    assert res.code == ExitCode.WAIT_TIMEOUT
    assert time.monotonic() - start < 5
    data = json.loads(res.stdout)
    assert data["timed_out"] is True and data["status"] == "pending"
    assert run_cli("wait", str(uuid.uuid4()), "--timeout", "1s").code == ExitCode.NOT_FOUND


def polling_in(thread: threading.Thread) -> bool:
    """True while `thread` sleeps between two polls of `wait` (so after its first look).

    Read from the thread's stack: its innermost frame outside the standard library's
    threading module is a `wait...` function of runnerq_cli (so it is in a sleep or an
    Event wait, not in the middle of a query).
    """
    frame = sys._current_frames().get(thread.ident)
    while frame is not None and frame.f_code.co_filename == threading.__file__:
        frame = frame.f_back
    return (frame is not None and frame.f_code.co_name.startswith("wait")
            and "/runnerq_cli/" in frame.f_code.co_filename)


def test_wait_blocks_until_done(queue, run_cli):
    aid = queue.enqueue("slow", {}).activity_id

    waiter = threading.current_thread()

    def work():
        # Finish it only once `wait` has seen it unfinished and is between two polls.
        wait_until(lambda: polling_in(waiter), message="`wait` to poll")
        [claim] = queue.dequeue("w1")
        queue.ack_success(claim, "done!")

    thread = threading.Thread(target=work)
    thread.start()
    res = run_cli("wait", str(aid), "--timeout", "30s")
    thread.join()
    assert res.code == 0 and res.stdout.strip() == "done!"


def test_workers(queue, clock, run_cli):
    clock.advance(-300)
    queue.registry.register_worker("w-old", concurrency=1)  # last heard of five minutes ago
    clock.advance(300)
    queue.registry.register_worker("w-live", types=["a"], concurrency=4)
    queue.registry.heartbeat_worker("w-live", in_flight=2, counters={"claimed": 7, "succeeded": 5})
    data = json.loads(run_cli("workers", "-o", "json").stdout)
    by_id = {w["worker_id"]: w for w in data["workers"]}
    assert by_id["w-live"]["stale"] is False and by_id["w-old"]["stale"] is True
    assert by_id["w-live"]["in_flight"] == 2 and by_id["w-live"]["counters"]["claimed"] == 7
    assert by_id["w-live"]["types"] == ["a"] and by_id["w-live"]["pid"] > 0
    text = run_cli("workers").stdout
    assert "w-live" in text and "stale" in text and "live" in text


def test_enqueue_wait(queue, run_cli):
    """`enqueue --wait` shares `wait`'s reporting: timeout 13, success 0 with the result."""
    res = run_cli("enqueue", "job", "--payload", "{}", "--wait", "--wait-timeout", "0.5s")
    assert res.code == ExitCode.WAIT_TIMEOUT, res.stderr
    assert run_cli("enqueue", "job", "--wait-timeout", "1s").code == ExitCode.USAGE

    def work():
        claims = wait_until(lambda: queue.dequeue("w1", types=["fails"]), timeout=20,
                            message="the enqueued activity")
        queue.ack_failure(claims[0], "boom", retryable=False)

    thread = threading.Thread(target=work)
    thread.start()
    res = run_cli("enqueue", "fails", "--payload", "{}", "--wait", "--wait-timeout", "30s")
    thread.join()
    assert res.code == ExitCode.ACTIVITY_FAILED, res.stderr
    assert "boom" in res.stderr


def test_enqueue_wait_json_is_one_document(queue, run_cli):
    """A CI job parses `enqueue --wait -o json` as one JSON document."""

    def work():
        claims = wait_until(lambda: queue.dequeue("w1", types=["ok_job"]), timeout=20,
                            message="the enqueued activity")
        queue.ack_success(claims[0], {"done": True})

    thread = threading.Thread(target=work)
    thread.start()
    res = run_cli("enqueue", "ok_job", "--payload", "{}", "--wait", "--wait-timeout", "30s",
                  "-o", "json")
    thread.join()
    assert res.code == ExitCode.OK, res.stderr
    doc = json.loads(res.stdout)  # exactly one document
    assert doc["created"] is True
    assert doc["status"] == "completed" and doc["exit_code"] == 0


def test_list_tries_are_attempts_made_of_allowed(every_status, queue, clock, run_cli):
    """`tries` is attempts made / attempts allowed (`max_retries` counts attempts, not
    retries): spent is n/n, never claimed 0/n, the one running counts."""
    spent = queue.enqueue("t_spent", {}, max_retries=3, retry_delay_seconds=0).activity_id
    for _ in range(3):
        clock.advance(0.01)
        claim, = queue.dequeue("w", types=["t_spent"])
        queue.ack_failure(claim, "boom", retryable=True)
    assert queue.get_activity(spent).status == "dead_letter"
    expected = {"pending": "0/3", "processing": "1/3", "completed": "1/3", "failed": "1/3",
                "scheduled": "1/5"}
    for status, tries in expected.items():
        row = next(line for line in run_cli("list", status).stdout.splitlines()
                   if str(every_status[status])[:8] in line)
        assert f" {tries} " in f"{row} ", (status, row)
    rows = {line.split()[0]: line for line in run_cli("list", "dead-letter").stdout.splitlines()
            if line.strip()}
    assert " 1/1 " in rows[str(every_status["dead_letter"])[:8]]
    assert " 3/3 " in rows[str(spent)[:8]]
