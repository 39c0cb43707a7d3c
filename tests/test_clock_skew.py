"""Hosts whose clock is minutes off behave exactly as hosts with a true clock (issue 23,
part 6; docs/design.md, "Time").

Every time that decides what runs when is the server's: lease deadlines at claim and
renewal, the reaper's and the scheduler's "now", back-off and delays, a failure's
`completed_at`, stored events' timestamps. The suite runs workers, commands and backend
calls under libfaketime at -5m and +5m (Debian's faketime; skipped where it is not
installed) beside the true clock of the test process, which also hosts the test server.
Times are checked against the server's own (`hello.localTime`).

Update pipelines (`$$NOW`) carry every user value that could be read as an expression in
`$literal` (the rest bare, reading as itself): the last tests store payloads, metadata,
reasons and errors that look like field paths and operators, and each kind of value.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.backend.views.events import server_time
from tests.chaos_support import ROOT, faketime_prefix
from tests.waiting import wait_until

SKEWS = ("-5m", "+5m")
SKEW_SECONDS = {"-5m": -300.0, "+5m": 300.0}
SLACK = timedelta(seconds=10)  # a busy machine's delays between a write and the check


def skewed(offset: str) -> list[str]:
    """The faketime prefix for `offset` (else skip), the wall clock only: a host whose
    clock is off still has a true monotonic clock (it has no epoch), and a faked one
    makes libfaketime stretch every timed wait by the offset (a 0.5 s wait lasts 5 min
    at -5m: no lease would ever be renewed)."""
    prefix = faketime_prefix(offset)
    if not prefix:
        pytest.skip("faketime is not installed (Debian package faketime)")
    return ["env", "FAKETIME_DONT_FAKE_MONOTONIC=1", *prefix]


def server_now(rq: RunnerQ) -> datetime:
    now = server_time(rq.context.activities)
    assert now is not None
    return now


def activity(rq: RunnerQ, aid: Any) -> dict[str, Any]:
    doc = rq.context.activities.find_one({"_id": uuid.UUID(str(aid))})
    assert doc is not None
    return doc


def cli(env: dict[str, str], *args: str, offset: str | None = None,
        check: bool = True) -> subprocess.CompletedProcess[str]:
    command = [*(skewed(offset) if offset else []), sys.executable, "-m", "runnerq_cli",
               *args]
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def skewed_python(env: dict[str, str], offset: str, code: str) -> Any:
    """Run `code` (a function body that returns a JSON value; `rq` is a connected
    backend) in a Python process whose clock is `offset` off; its answer, after checking
    that the process's clock really was off by `offset`."""
    body = "\n".join("    " + line for line in code.strip().splitlines())
    script = ("import json, time\nfrom runnerq_cli import connect\n"
              f"def main(rq):\n{body}\n"
              "host = time.time()\n"
              "print(json.dumps({'answer': main(connect()), 'host': host}, default=str))\n")
    started = time.time()
    proc = subprocess.run([*skewed(offset), sys.executable, "-c", script], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert abs(out["host"] - started - SKEW_SECONDS[offset]) < 60, "faketime moved no clock"
    return out["answer"]


def worker(env: dict[str, str], *args: str, offset: str | None = None,
           ) -> subprocess.Popen[str]:
    """A worker process with the test handlers, in a process group of its own (what a
    kill must reach: the worker and any shell handler it started)."""
    command = [*(skewed(offset) if offset else []), sys.executable, "-m", "runnerq_cli",
               "worker", "--app", "tests.worker_handlers", "-n", "1", *args]
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def finish(proc: subprocess.Popen[str], timeout: float = 120) -> None:
    try:
        code = proc.wait(timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    stderr = proc.stderr.read() if proc.stderr else ""
    if proc.stderr:
        proc.stderr.close()
    assert code == 0, stderr


def runs(directory: Path) -> int:
    return len(list(directory.iterdir()))


# ------------------------------------------------------------------ leases


@pytest.mark.proof  # processes on a skewed clock (libfaketime)
@pytest.mark.parametrize("offset", SKEWS)
def test_a_claim_and_a_renewal_on_a_skewed_host_last_their_lease_by_the_server(
        backend: RunnerQ, cli_env, offset: str) -> None:
    """The deadline a claim and an extension write is the server's now + the lease; a
    delay of the batched enqueue (`enqueue_many`) counts from the server's time too."""
    aid = backend.enqueue("lease", {}).activity_id
    answer = skewed_python(cli_env, offset, """
from runnerq_cli.backend.queue.queue import ActivitySpec
[claim] = rq.dequeue("skewed", types=["lease"], lease_seconds=30)
claimed = claim.lease_deadline.isoformat()
rq.extend_lease(claim, 45)
done = rq.enqueue_many([ActivitySpec("batch", {"n": n}, delay_seconds=30) for n in range(3)])
return [claimed, str(claim.activity_id), [str(r.activity_id) for r in done]]
""")
    now = server_now(backend)
    doc = activity(backend, aid)
    assert answer[1] == str(aid)
    # The claim's deadline is its started_at (the server's) + 30 s, and the claimer knows it.
    assert datetime.fromisoformat(answer[0]) == doc["started_at"] + timedelta(seconds=30)
    assert now - SLACK < doc["started_at"] <= now
    # Renewed: the server's time of the renewal + 45 s, never 5 minutes off.
    assert now + timedelta(seconds=45) - SLACK < doc["lease_deadline"] \
        <= now + timedelta(seconds=45)
    [extended] = [e for e in backend.get_activity_events(aid) if e.event_type == "LeaseExtended"]
    assert extended.detail["lease_deadline"] == doc["lease_deadline"]
    assert doc["started_at"] <= extended.timestamp <= now
    for batched in answer[2]:
        doc = activity(backend, batched)
        assert doc["scheduled_at"] - doc["created_at"] == timedelta(seconds=30)


@pytest.mark.proof  # processes on a skewed clock (libfaketime)
@pytest.mark.parametrize("offset", SKEWS)
def test_the_reaper_and_the_scheduler_of_a_skewed_host_use_the_servers_now(
        backend: RunnerQ, cli_env, offset: str) -> None:
    """Ahead, its reaper would take live leases and its scheduler run work early; behind,
    its reaper would leave dead leases and its scheduler late work for 5 minutes."""
    live = backend.enqueue("live", {}).activity_id
    [held] = backend.dequeue("true-clock", types=["live"], lease_seconds=60)
    dead = backend.enqueue("dead", {}).activity_id
    backend.dequeue("true-clock", types=["dead"], lease_seconds=0.001)
    later = backend.enqueue("later", {}, delay_seconds=60).activity_id
    due = backend.enqueue("due", {}, delay_seconds=0.001).activity_id
    wait_until(lambda: server_now(backend) > activity(backend, due)["scheduled_at"],
               message="the short delay and lease past on the server")
    answer = skewed_python(cli_env, offset, """
return [rq.requeue_expired(), rq.process_scheduled()]
""")
    assert answer == [{"requeued": 1, "dead_lettered": 0, "malformed": 0}, 1]
    assert activity(backend, live)["lease_id"] == held.lease_id  # still held
    assert activity(backend, dead)["status"] == "pending"
    assert activity(backend, later)["status"] == "scheduled"
    assert activity(backend, due)["status"] == "pending"


@pytest.mark.proof  # processes on a skewed clock (libfaketime)
@pytest.mark.slow
def test_a_worker_5_minutes_behind_keeps_its_renewed_lease(backend: RunnerQ, cli_env,
                                                           tmp_path: Path) -> None:
    """Its handler outlives the lease, so only renewals keep it; a true-clock worker's
    reaper beside it takes nothing: the handler runs once, the first attempt succeeds."""
    skewed("-5m")
    marks = tmp_path / "marks"
    marks.mkdir()
    aid = backend.enqueue("mark_and_wait", {"dir": str(marks), "seconds": 6}).activity_id
    behind = worker(cli_env, "--burst", "--lease", "3s", "--worker-id", "behind",
                    offset="-5m")
    wait_until(lambda: activity(backend, aid)["status"] != "pending", timeout=60,
               message="the worker behind claims")
    beside = worker(cli_env, "--lease", "3s", "--worker-id", "true-clock")
    try:
        finish(behind)
    finally:
        beside.send_signal(signal.SIGTERM)
        finish(beside)
    doc = activity(backend, aid)
    assert (doc["status"], doc["retry_count"], doc["last_worker_id"]) == ("completed", 0,
                                                                        "behind")
    assert runs(marks) == 1
    assert not [e for e in backend.get_activity_events(aid) if e.event_type == "Requeued"]


@pytest.mark.proof  # processes on a skewed clock (libfaketime)
@pytest.mark.slow
def test_a_dead_worker_5_minutes_ahead_loses_its_lease_on_time(backend: RunnerQ, cli_env
                                                               ) -> None:
    """Killed while it holds a 3 s lease: the reaper of a true clock takes it back within
    seconds (not 5 minutes), and a true-clock worker runs attempt 2."""
    aid = backend.enqueue("slow_first", {}).activity_id
    ahead = worker(cli_env, "--lease", "3s", "--worker-id", "ahead", offset="+5m")
    try:
        wait_until(lambda: activity(backend, aid)["status"] == "processing", timeout=60,
                   message="the worker ahead claims")
    finally:
        os.killpg(ahead.pid, signal.SIGKILL)
        ahead.wait(10)
        if ahead.stderr:
            ahead.stderr.close()
    held = activity(backend, aid)
    assert held["lease_deadline"] - held["started_at"] <= timedelta(seconds=3)
    wait_until(lambda: backend.requeue_expired()["requeued"], timeout=20,
               interval=0.5, message="the dead worker's lease reaped")
    assert server_now(backend) - held["lease_deadline"] < SLACK
    finish(worker(cli_env, "--burst", "--worker-id", "true-clock"))
    result = backend.get_result(aid)
    assert result is not None and result.data == {"attempt": 2}


# --------------------------------------------------- back-off, failures, events


@pytest.mark.proof  # processes on a skewed clock (libfaketime)
@pytest.mark.slow
@pytest.mark.parametrize("offset", SKEWS)
def test_a_skewed_workers_failures_back_off_and_sort_by_the_server(
        backend: RunnerQ, cli_env, offset: str) -> None:
    """A retryable failure waits its full back-off (base 10 s, attempt 1: 20 s) from the
    server's time of the failure; a non-retryable one ends at the server's time; their
    events sort after the activity's Enqueued."""
    retried = backend.enqueue("boom", {}, retry_delay_seconds=10, max_retries=3).activity_id
    failed = backend.enqueue("fatal", {}).activity_id
    finish(worker(cli_env, "--burst", "--worker-id", "skewed", offset=offset))
    now = server_now(backend)
    doc = activity(backend, retried)
    assert doc["status"] == "scheduled"
    assert doc["scheduled_at"] - doc["last_error_at"] == timedelta(seconds=20)
    assert now - SLACK < doc["last_error_at"] <= now
    assert backend.process_scheduled() == 0  # not due yet, on any clock
    events = list(reversed(backend.get_activity_events(retried)))
    assert [e.event_type for e in events] == ["Enqueued", "Dequeued", "Started", "Retrying"]
    assert [e.timestamp for e in events] == sorted(e.timestamp for e in events)
    retrying = events[-1]
    assert retrying.timestamp == doc["last_error_at"]
    assert retrying.detail["scheduled_at"] == doc["scheduled_at"]
    raw = backend.context.events.find_one({"_id": retrying.id})
    assert raw is not None and isinstance(raw["detail"]["delay_seconds"], float)
    end = activity(backend, failed)
    assert end["status"] == "failed"
    assert end["created_at"] <= end["started_at"] <= end["completed_at"] <= now
    kinds = [e.event_type for e in reversed(backend.get_activity_events(failed))]
    assert kinds == ["Enqueued", "Dequeued", "Started", "Failed"]


@pytest.mark.proof  # processes on a skewed clock (libfaketime)
@pytest.mark.parametrize("offset", SKEWS)
def test_delays_from_a_skewed_command_count_from_the_servers_time(
        backend: RunnerQ, cli_env, offset: str) -> None:
    """`enqueue --delay`, `reschedule --delay` and `run-now` on a host 5 minutes off."""
    aid = cli(cli_env, "enqueue", "later", "--delay", "1m", "-q", offset=offset).stdout.strip()
    doc = activity(backend, aid)
    assert doc["scheduled_at"] - doc["created_at"] == timedelta(minutes=1)
    assert backend.process_scheduled() == 0
    cli(cli_env, "reschedule", aid, "--delay", "2m", "--yes", offset=offset)
    now = server_now(backend)
    at = activity(backend, aid)["scheduled_at"]
    assert now + timedelta(minutes=2) - SLACK < at <= now + timedelta(minutes=2)
    cli(cli_env, "run-now", aid, "--yes", offset=offset)
    doc = activity(backend, aid)
    assert doc["status"] == "pending"
    events = list(reversed(backend.get_activity_events(aid)))
    assert [e.event_type for e in events] == ["Scheduled", "Rescheduled", "RunNow"]
    assert [e.timestamp for e in events] == sorted(e.timestamp for e in events)
    assert events[-1].timestamp <= server_now(backend)


# ------------------------------------------------------------ $literal


# Values a pipeline would read as field paths and variables if they were not in $literal
# (keys stay plain: whether `$`-prefixed keys may be stored is the server's rule, not this).
HOSTILE = {"name": "$x", "field": "$status", "now": "$$NOW", "root": "$$ROOT",
           "list": ["$a", "$$NOW", {"path": "$payload.name"}], "empty": {}, "n": 2.0}


def test_user_values_in_pipeline_writes_are_stored_as_written(backend: RunnerQ) -> None:
    """Payloads, metadata, worker ids, errors and reasons that look like field paths,
    variables and operators are stored as written by every write that computes a time
    on the server (a delayed enqueue, a claim, a renewal, a back-off, a release, a
    dead-letter, an operator action)."""
    metadata = {"tag": "$name", "now": "$$NOW"}
    aid = backend.enqueue("hostile", HOSTILE, delay_seconds=0.001, metadata=metadata,
                          max_retries=2, idempotency_key="$key").activity_id
    stored = activity(backend, aid)
    assert (stored["payload"], stored["metadata"]) == (HOSTILE, metadata)
    assert stored["idempotency_key"] == "$key"
    wait_until(lambda: backend.process_scheduled(), message="due")
    [claim] = backend.dequeue("$worker", types=["hostile"])
    assert activity(backend, aid)["worker_id"] == "$worker"
    assert claim.activity.payload == HOSTILE
    backend.extend_lease(claim, 30)
    assert backend.ack_failure(claim, "$status").value == "retrying"
    doc = activity(backend, aid)
    assert (doc["last_error"], doc["last_worker_id"], doc["payload"]) == ("$status", "$worker",
                                                                         HOSTILE)
    backend.operator.run_now(aid, reason="$reason", actor="$$ROOT")
    [again] = backend.dequeue("$worker", types=["hostile"])
    assert backend.ack_failure(again, "{$literal: 1}").value == "dead_lettered"
    events = {e.event_type: e for e in backend.get_activity_events(aid)}
    assert events["Retrying"].detail["error"] == "$status"
    assert events["RunNow"].detail["reason"] == "$reason"
    assert events["RunNow"].detail["actor"] == "$$ROOT"
    assert events["DeadLetter"].detail["error"] == "{$literal: 1}"
    record = backend.context.dead_letter.find_one({"_id": aid})
    assert record is not None and record["activity"]["payload"] == HOSTILE
    backend.operator.retry(aid, reason="$reason")
    [third] = backend.dequeue("$worker", types=["hostile"])
    assert backend.release(third, reason="$$CURRENT")
    requeued = [e for e in backend.get_activity_events(aid) if e.event_type == "Requeued"]
    assert [e.detail["reason"] for e in requeued] == ["$$CURRENT"]
    assert activity(backend, aid)["payload"] == HOSTILE


def test_user_values_in_bulk_actions_and_the_reaper_are_stored_as_written(
        backend: RunnerQ) -> None:
    aids = [backend.enqueue("hostile", HOSTILE, metadata={"m": "$m"}).activity_id
            for _ in range(2)]
    report = backend.bulk.apply("cancel", aids, reason="$reason", actor="$actor")
    assert len(report.applied) == 2
    for aid in aids:
        doc = activity(backend, aid)
        assert (doc["status"], doc["payload"], doc["metadata"]) == ("cancelled", HOSTILE,
                                                                    {"m": "$m"})
        [cancelled] = [e for e in backend.get_activity_events(aid)
                       if e.event_type == "Cancelled"]
        assert (cancelled.detail["reason"], cancelled.detail["actor"]) == ("$reason",
                                                                           "$actor")
    aid = backend.enqueue("reaped", HOSTILE, max_retries=1).activity_id
    backend.dequeue("$w", types=["reaped"], lease_seconds=0.001)
    wait_until(lambda: backend.requeue_expired()["dead_lettered"],
               message="the lease reaped")
    doc = activity(backend, aid)
    assert (doc["status"], doc["last_error"], doc["payload"]) == (
        "dead_letter", "lease expired (worker $w)", HOSTILE)


def test_a_pipeline_stores_each_kind_of_value_as_written_with_its_type(
        backend: RunnerQ) -> None:
    """Bare where a value reads as itself (a claim and a failure are smaller), in
    `$literal` where it could be read as an expression: stored as written either way,
    and a document replaces the stored one (bare, a `$set` stage would merge it)."""
    from bson import Int64

    from runnerq_cli.backend.store.servertime import SERVER_NOW, server_update

    when = datetime(2026, 1, 2, 3, 4, 5, 6000).astimezone()
    values = {"plain": "plain", "path": "$x", "variable": "$$NOW", "braces": "{$literal: 1}",
              "empty": "", "int": 2, "long": Int64(5), "double": 2.0, "bool": True,
              "null": None, "date": when, "uuid": uuid.uuid4(), "bytes": b"\x00$",
              "plain_list": [1, "a", None], "hostile_list": ["a", "$a"],
              "doc": {"path": "$b", "inner": {"n": 1}}}
    # A document holding a server time (an outbox snapshot) is built field by field; it
    # too replaces the stored one, whose stale fields must not survive.
    stamped = {"at": SERVER_NOW, "n": 1, "inner": {"at": SERVER_NOW}}
    update = server_update({"$set": {**values, "at": SERVER_NOW + timedelta(seconds=1),
                                     "stamped": stamped}, "$inc": {"count": 1}})
    assert isinstance(update, list)  # a time from $$NOW: a pipeline
    stage = update[0]["$set"]
    assert stage["plain"] == "plain" and stage["path"] == {"$literal": "$x"}
    # no plain document at the top of the stage: there it would be a nested field spec
    assert not [k for k, v in stage.items() if isinstance(v, dict)
                and not any(key.startswith("$") for key in v)], stage
    collection = backend.db["pipeline_values"]
    collection.insert_one({"_id": 1, "doc": {"old": 1}, "count": 1,
                           "stamped": {"old": 1, "inner": {"old": 1}}})
    collection.update_one({"_id": 1}, update)
    stored = collection.find_one({"_id": 1})
    assert stored is not None
    for name, value in values.items():
        assert stored[name] == value and type(stored[name]) is type(value), name
    assert stored["count"] == 2 and isinstance(stored["at"], datetime)
    assert set(stored["stamped"]) == {"at", "n", "inner"} and stored["stamped"]["n"] == 1
    assert set(stored["stamped"]["inner"]) == {"at"}
    assert isinstance(stored["stamped"]["at"], datetime)


# ------------------------------------------- the contract: copies keep BSON types


def test_an_outbox_another_program_wrote_is_copied_with_its_bson_types(
        backend: RunnerQ) -> None:
    """A double stays a double (a copier that turned `delay_seconds` 2.0 into an int32 2
    broke the contract), an int64 an int64, an int32 an int32, a date a date."""
    from bson import Int64, ObjectId

    aid = uuid.uuid4()
    long_ago = server_now(backend) - timedelta(hours=1)
    event = {"_id": ObjectId(), "event_type": "Retrying", "timestamp": long_ago,
             "worker_id": "other", "detail": {"delay_seconds": 2.0, "retry_count": 1,
                                              "big": Int64(5), "scheduled_at": long_ago}}
    backend.context.activities.insert_one({
        "_id": aid, "activity_type": "other", "payload": {}, "priority": 2,
        "status": "scheduled", "scheduled_at": long_ago, "created_at": long_ago,
        "retry_count": 1, "max_retries": 3, "timeout_seconds": 300,
        "retry_delay_seconds": 1, "metadata": {},
        "outbox": {"seq": 1, "since": long_ago, "events": [event]}})
    assert backend.maintenance.repair_outboxes() == 1
    stored = backend.context.events.find_one({"_id": event["_id"]})
    assert stored is not None
    detail = stored["detail"]
    assert type(detail["delay_seconds"]) is float and detail["delay_seconds"] == 2.0
    assert type(detail["big"]) is Int64
    assert type(detail["retry_count"]) is int
    assert detail["scheduled_at"] == long_ago
