"""Operator actions: allowed states, refused states change nothing, events recorded; the CLI."""

from __future__ import annotations

import json
import threading
import uuid
from datetime import timedelta

import pytest

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.cli.exits import ExitCode
from runnerq_cli.errors import InvalidArgument, NotFound, WrongState
from tests.helpers import ALL_STATES, raw
from tests.helpers import drive_to as make

# ----------------------------------------------------------------- helpers


def event_types(queue: RunnerQ, aid: uuid.UUID) -> list[str]:
    return [e.event_type for e in reversed(queue.get_activity_events(aid))]


def check_refused(queue: RunnerQ, action, allowed: set[str]) -> None:
    """Every state outside `allowed` is refused with WrongState and the document is unchanged."""
    for state in ALL_STATES:
        if state in allowed:
            continue
        aid = make(queue, state, activity_type=f"t_{state}")
        before = raw(queue, aid)
        events = event_types(queue, aid)
        with pytest.raises(WrongState) as info:
            action(aid)
        assert info.value.status == state
        assert raw(queue, aid) == before, state
        assert event_types(queue, aid) == events


# ----------------------------------------------------------------- backend


def test_cancel_pending_and_scheduled(queue: RunnerQ, clock) -> None:
    for state in ("pending", "scheduled"):
        aid = make(queue, state)
        result = queue.operator.cancel(aid, reason="not needed")
        assert (result.previous_status, result.status) == (state, "cancelled")
        doc = raw(queue, aid)
        assert doc["status"] == "cancelled"
        assert doc["completed_at"] == clock.now
        events = queue.get_activity_events(aid)
        assert events[0].event_type == "Cancelled"
        assert events[0].worker_id == "operator"
        assert events[0].detail == {"previous_status": state, "reason": "not needed"}
    assert queue.dequeue("w2") == []  # nothing left to claim


def test_cancel_refuses_other_states(queue: RunnerQ) -> None:
    check_refused(queue, queue.operator.cancel, {"pending", "scheduled", "processing"})


def test_an_action_on_running_work_says_why(queue: RunnerQ) -> None:
    """Cancel reaches a running activity through its claim (tests/test_running_control.py);
    every other action still refuses it."""
    aid = make(queue, "processing")
    with pytest.raises(WrongState, match=r"running.*worker holds it"):
        queue.operator.run_now(aid)


def test_unknown_and_invalid_ids(queue: RunnerQ) -> None:
    for action in (queue.operator.cancel, queue.operator.retry, queue.operator.run_now):
        with pytest.raises(NotFound):
            action(uuid.uuid4())
        with pytest.raises(InvalidArgument):
            action("not-a-uuid")
    with pytest.raises(InvalidArgument):
        queue.operator.set_priority(make(queue, "pending"), "urgent")


@pytest.mark.parametrize("state", ["failed", "dead_letter", "cancelled"])
def test_retry_restarts_terminal_activity(queue: RunnerQ, state: str) -> None:
    aid = make(queue, state)
    result = queue.operator.retry(aid)
    assert (result.previous_status, result.status) == (state, "pending")
    doc = raw(queue, aid)
    assert doc["status"] == "pending"
    assert doc["retry_count"] == 0
    for gone in ("completed_at", "last_outcome", "last_lease_id", "scheduled_at"):
        assert gone not in doc
    assert event_types(queue, aid)[-1] == "Retried"
    assert queue.context.dead_letter.count_documents({"_id": aid}) == 0
    claims = queue.dequeue("w2")
    assert [c.activity_id for c in claims] == [aid]


def test_retry_refuses_live_states(queue: RunnerQ) -> None:
    check_refused(queue, queue.operator.retry, {"failed", "dead_letter", "cancelled"})


def test_retry_keeps_a_newer_dead_letter_record(queue: RunnerQ, clock, monkeypatch) -> None:
    """The record is removed only if it is the dead-lettering the retry undid.

    A retry commits the activity, then removes its dead-letter record. Held up
    between the two, the retried activity is run and dead-lettered again: the
    late removal must keep the new record.
    """
    from pymongo.collection import Collection

    aid = make(queue, "dead_letter")
    dead_letter = queue.context.dead_letter.name
    committed, go_on = threading.Event(), threading.Event()
    real_delete_one = Collection.delete_one

    def held_delete_one(self, *args, **kwargs):  # the driver's own call, only delayed
        if self.name == dead_letter and threading.current_thread() is not main:
            committed.set()
            assert go_on.wait(20)
        return real_delete_one(self, *args, **kwargs)

    main = threading.current_thread()
    monkeypatch.setattr(Collection, "delete_one", held_delete_one)
    operator = threading.Thread(target=queue.operator.retry, args=(aid,))
    operator.start()
    assert committed.wait(20)  # the retry is committed, its record not yet removed
    clock.advance(5)
    claim = queue.dequeue("w3")[0]
    queue.ack_failure(claim, "again", retryable=True)  # max_retries 1: dead-lettered again
    go_on.set()
    operator.join(20)
    assert not operator.is_alive()
    record = queue.context.dead_letter.find_one({"_id": aid})
    assert record is not None and record["error"] == "again"
    assert queue.get_activity(aid).status == "dead_letter"


def test_run_now(queue: RunnerQ) -> None:
    aid = make(queue, "scheduled")
    due = raw(queue, aid)["scheduled_at"]
    result = queue.operator.run_now(aid)
    assert (result.previous_status, result.status) == ("scheduled", "pending")
    assert "scheduled_at" not in raw(queue, aid)
    event = queue.get_activity_events(aid)[0]
    assert event.event_type == "RunNow"
    assert event.detail["previous_scheduled_at"] == due
    check_refused(queue, queue.operator.run_now, {"scheduled"})


def test_reschedule(queue: RunnerQ, clock) -> None:
    at = clock.now + timedelta(hours=1)
    for state in ("pending", "scheduled"):
        aid = make(queue, state)
        result = queue.operator.reschedule(aid, at)
        assert result.status == "scheduled"
        doc = raw(queue, aid)
        assert (doc["status"], doc["scheduled_at"]) == ("scheduled", at)
        event = queue.get_activity_events(aid)[0]
        assert event.event_type == "Rescheduled"
        assert event.detail["scheduled_at"] == at
        assert event.detail["previous_status"] == state
    with pytest.raises(InvalidArgument, match="not in the future"):
        queue.operator.reschedule(make(queue, "pending"), clock.now - timedelta(seconds=1))
    check_refused(queue, lambda aid: queue.operator.reschedule(aid, at), {"pending", "scheduled"})
    # Due time reached: the scheduler makes it pending as usual.
    clock.advance(3601)
    assert queue.process_scheduled() >= 2


def test_set_priority(queue: RunnerQ) -> None:
    low = make(queue, "pending", priority="low")
    normal = make(queue, "pending")
    result = queue.operator.set_priority(low, "critical")
    assert result.detail == {"old_priority": 1, "new_priority": 4}
    assert raw(queue, low)["priority"] == 4
    event = queue.get_activity_events(low)[0]
    assert (event.event_type, event.detail) == ("PriorityChanged",
                                                {"old_priority": 1, "new_priority": 4})
    # Claim order follows the new priority.
    assert queue.dequeue("w1")[0].activity_id == low
    assert raw(queue, normal)["status"] == "pending"
    scheduled = make(queue, "scheduled")
    assert queue.operator.set_priority(scheduled, 3).status == "scheduled"
    check_refused(queue, lambda aid: queue.operator.set_priority(aid, "high"),
                  {"pending", "scheduled"})


def test_redrive_all_and_by_type(queue: RunnerQ) -> None:
    a1 = make(queue, "dead_letter", activity_type="email")
    a2 = make(queue, "dead_letter", activity_type="email")
    b1 = make(queue, "dead_letter", activity_type="report")
    other = make(queue, "failed", activity_type="email")
    preview = queue.operator.redrive(["email"], dry_run=True)
    assert {a["id"] for a in preview.activities} == {a1, a2}
    assert raw(queue, a1)["status"] == "dead_letter"  # dry run wrote nothing
    assert queue.context.dead_letter.count_documents({}) == 3
    done = queue.operator.redrive(["email"])
    assert done.count == 2
    assert raw(queue, a1)["status"] == raw(queue, a2)["status"] == "pending"
    assert raw(queue, a1)["retry_count"] == 0
    assert raw(queue, b1)["status"] == "dead_letter"
    assert raw(queue, other)["status"] == "failed"
    assert event_types(queue, a1)[-1] == "Redriven"
    assert queue.context.dead_letter.count_documents({}) == 1
    assert queue.operator.redrive().count == 1
    assert queue.context.dead_letter.count_documents({}) == 0
    assert queue.operator.redrive().count == 0


def test_redrive_removes_stale_records(queue: RunnerQ) -> None:
    """A crash between a retry's activity update and its record delete leaves a stale record."""
    aid = make(queue, "dead_letter")
    record = queue.context.dead_letter.find_one({"_id": aid})
    queue.operator.retry(aid)
    queue.context.dead_letter.insert_one(record)  # as if the delete never happened
    preview = queue.operator.redrive(dry_run=True)
    assert (preview.count, preview.stale_records) == (0, 1)
    assert queue.context.dead_letter.count_documents({}) == 1
    queue.operator.redrive()
    assert queue.context.dead_letter.count_documents({}) == 0
    assert raw(queue, aid)["status"] == "pending"


def test_purge_preview_and_purge(queue: RunnerQ, clock) -> None:
    done = make(queue, "completed")
    dead = make(queue, "cancelled")
    alive = make(queue, "pending")
    assert queue.operator.purge_preview() == {"completed": 0, "failed": 0}
    clock.advance(queue.settings.retention_failed + 1)
    assert queue.operator.purge_preview() == {"completed": 1, "failed": 1}
    assert queue.operator.purge() == {"completed": 1, "failed": 1}
    assert queue.context.activities.count_documents({"_id": {"$in": [done, dead]}}) == 0
    assert raw(queue, alive)["status"] == "pending"


# --------------------------------------------------------------------- CLI


@pytest.fixture
def cq(settings, cli_env) -> RunnerQ:
    """A backend on the CLI's database with the real clock."""
    backend = RunnerQ(settings)
    backend.maintenance.init_indexes()
    return backend


def test_cli_cancel_many_reports_each(run_cli, cq: RunnerQ) -> None:
    running = cq.enqueue("job", {}).activity_id
    assert cq.dequeue("w1")[0].activity_id == running
    waiting = cq.enqueue("job", {}).activity_id
    result = run_cli("cancel", str(waiting), str(running), str(uuid.uuid4()), "-o", "json")
    rows = json.loads(result.stdout)
    assert [r["ok"] for r in rows] == [True, True, False]
    assert rows[0]["status"] == rows[1]["status"] == "cancelled"
    assert rows[1]["previous_status"] == "processing"  # through its claim
    assert rows[2]["exit_code"] == ExitCode.NOT_FOUND
    assert result.code == ExitCode.NOT_FOUND
    assert result.stderr.count("error:") == 1
    assert cq.get_activity(waiting).status == "cancelled"
    assert cq.get_activity(running).status == "cancelled"
    again = run_cli("cancel", str(waiting), str(running), "-o", "json")
    assert again.code == ExitCode.WRONG_STATE  # a second cancel of each is refused


def test_cli_single_failure_kind_is_the_exit_code(run_cli, cq: RunnerQ) -> None:
    aid = cq.enqueue("job", {}).activity_id
    assert run_cli("cancel", str(aid)).code == 0
    again = run_cli("cancel", str(aid))
    assert again.code == ExitCode.WRONG_STATE
    assert "cancelled" in again.stderr
    assert run_cli("retry", "nope").code == ExitCode.USAGE
    assert run_cli("run-now", str(uuid.uuid4())).code == ExitCode.NOT_FOUND
    retried = run_cli("retry", str(aid))
    assert retried.code == 0
    assert f"retry: {aid} (job) cancelled -> pending" in retried.stdout


def test_cli_reschedule_run_now_set_priority(run_cli, cq: RunnerQ) -> None:
    aid = cq.enqueue("job", {}).activity_id
    res = run_cli("reschedule", str(aid), "--delay", "1h", "-o", "json")
    assert res.code == 0, res.stderr
    assert json.loads(res.stdout)[0]["status"] == "scheduled"
    assert run_cli("reschedule", str(aid)).code == ExitCode.USAGE
    assert run_cli("reschedule", str(aid), "--at", "2000-01-01T00:00:00Z").code == ExitCode.USAGE
    assert run_cli("reschedule", str(aid), "--at", "2999-01-01T00:00:00").code == 0
    assert cq.get_activity(aid).scheduled_at.year == 2999
    res = run_cli("set-priority", str(aid), "high")
    assert res.code == 0 and "priority normal -> high" in res.stdout
    assert run_cli("set-priority", str(aid), "urgent").code == ExitCode.USAGE
    assert run_cli("run-now", str(aid)).code == 0
    assert cq.get_activity(aid).status == "pending"
    assert run_cli("run-now", str(aid)).code == ExitCode.WRONG_STATE


def dead_letter(cq: RunnerQ, activity_type: str = "job") -> uuid.UUID:
    aid = cq.enqueue(activity_type, {}, max_retries=1).activity_id
    claim = cq.dequeue("w1", types=[activity_type])[0]
    cq.ack_failure(claim, "boom")
    return aid


def test_cli_redrive_needs_yes_and_dry_run_writes_nothing(run_cli, cq: RunnerQ) -> None:
    aid = dead_letter(cq)
    refused = run_cli("redrive")  # stdin is not a terminal
    assert refused.code == ExitCode.USAGE
    assert "--yes" in refused.stderr
    dry = run_cli("redrive", "--dry-run", "-o", "json")
    assert dry.code == 0
    report = json.loads(dry.stdout)
    assert (report["dry_run"], report["count"]) == (True, 1)
    assert report["activities"][0]["id"] == str(aid)
    assert cq.get_activity(aid).status == "dead_letter"
    assert cq.context.dead_letter.count_documents({}) == 1
    done = run_cli("redrive", "--yes", "--type", "job")
    assert done.code == 0, done.stderr
    assert "redrove 1 activity\n" in done.stdout
    assert cq.get_activity(aid).status == "pending"
    assert cq.context.dead_letter.count_documents({}) == 0
    assert run_cli("redrive").code == 0  # nothing to do needs no --yes


def test_cli_redrive_max_bounds_it_and_a_rerun_goes_on(run_cli, cq: RunnerQ) -> None:
    """`--max N`: at most N (the preview too), the dead-lettered longest first; the same
    command again redrives the next N. `--batch-size` as on the other bulk actions."""
    for _ in range(5):
        dead_letter(cq)

    def left() -> int:
        return cq.context.activities.count_documents({"status": "dead_letter"})

    dry = run_cli("redrive", "--error-contains", "boom", "--max", "2", "--dry-run", "-o", "json")
    assert dry.code == 0 and json.loads(dry.stdout)["count"] == 2, dry.stderr
    args = ("redrive", "--error-contains", "boom", "--yes", "--max", "2", "--batch-size", "1")
    done = run_cli(*args)
    assert done.code == 0 and "redrove 2 activities" in done.stdout, done.stderr
    assert left() == 3
    assert run_cli(*args).code == 0 and left() == 1
    for bad in (("--max", "0"), ("--batch-size", "0")):
        res = run_cli("redrive", "--yes", *bad)
        assert res.code == ExitCode.USAGE and bad[0] in res.stderr, res.stderr
    assert left() == 1
    [entry, *_] = cq.audit_log.audit()
    assert "--max=2" in entry.detail["command"] and "--batch-size=1" in entry.detail["command"]


def test_cli_purge(run_cli, cq: RunnerQ) -> None:
    aid = cq.enqueue("job", {}).activity_id
    cq.operator.cancel(aid)
    env = {"RUNNERQ_RETENTION_FAILED": "1ms"}
    dry = run_cli("purge", "--dry-run", "-o", "json", env=env)
    assert dry.code == 0, dry.stderr
    assert json.loads(dry.stdout)["failed"] == 1
    assert cq.context.activities.count_documents({"_id": aid}) == 1
    assert run_cli("purge", env=env).code == ExitCode.USAGE
    assert cq.context.activities.count_documents({"_id": aid}) == 1
    done = run_cli("purge", "--yes", env=env)
    assert done.code == 0, done.stderr
    assert "purged 1 activity (" in done.stdout
    assert cq.context.activities.count_documents({"_id": aid}) == 0


def test_redrive_keeps_dead_letter_records_of_activities_aged_out(queue, clock):
    """docs/design.md keeps dead-letter records until an operator acts, even when the
    activity itself was purged by retention."""
    aid = queue.enqueue("t", {}, max_retries=1).activity_id
    queue.ack_failure(queue.dequeue("w")[0], "gone")
    clock.advance(queue.settings.retention_failed + 1)
    assert queue.maintenance.purge_expired()["failed"] == 1
    report = queue.operator.redrive()
    assert report.stale_records == 0
    assert queue.context.dead_letter.count_documents({"_id": aid}) == 1


def test_purge_deletes_no_more_than_the_operator_confirmed(queue, clock):
    for _ in range(3):
        queue.enqueue("t", {})
        queue.ack_success(queue.dequeue("w")[0], None)
    clock.advance(queue.settings.retention_completed + 1)
    shown = queue.operator.purge_preview()
    assert shown == {"completed": 3, "failed": 0}
    queue.enqueue("t", {})  # one more ages out after the preview was confirmed
    queue.ack_success(queue.dequeue("w")[0], None)
    clock.advance(queue.settings.retention_completed + 1)
    assert queue.operator.purge(limits=shown, batch=2) == {"completed": 3, "failed": 0}
    assert queue.operator.purge_preview() == {"completed": 1, "failed": 0}
    assert queue.operator.purge() == {"completed": 1, "failed": 0}


def _answer_on_a_terminal(args: list[str], env: dict[str, str], answer: bytes) -> str:
    """Run the CLI on a pseudo-terminal, answer its confirmation, return all it printed."""
    import os
    import pty
    import select
    import subprocess
    import sys
    import time

    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "runnerq_cli", *args], env=env,
                            stdin=slave, stdout=slave, stderr=slave, close_fds=True)
    os.close(slave)
    output, answered = b"", False
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                output += chunk
            if not answered and b"[y/N]" in output:
                os.write(master, answer)
                answered = True
            if proc.poll() is not None and not ready:
                break
        proc.wait(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    return output.decode(errors="replace").replace("\r\n", "\n")


def test_bulk_confirmations_show_what_will_be_acted_on(cli_env, cq: RunnerQ) -> None:
    """Issue 11: redrive and purge confirmations show a sample, not only a count."""
    ids = [dead_letter(cq, "job") for _ in range(12)]
    shown = _answer_on_a_terminal(["redrive"], cli_env, b"n\n")
    assert "dead-lettered activities to redrive (12):" in shown
    listed = [i for i in ids if str(i) in shown]
    assert len(listed) == 10 and "... and 2 more" in shown
    assert "  job  last error: boom\n" in shown
    assert "Redrive 12 dead-lettered activities? [y/N]" in shown
    assert "nothing changed" in shown
    assert all(cq.get_activity(i).status == "dead_letter" for i in ids)

    env = {**cli_env, "RUNNERQ_RETENTION_FAILED": "1ms"}
    shown = _answer_on_a_terminal(["purge"], env, b"n\n")
    assert "past their retention (deleted with their results and events):" in shown
    assert "12 failed, dead-lettered or cancelled, finished over" in shown
    assert "(retention.failed)" in shown and "0 completed" in shown
    assert cq.context.activities.count_documents({}) == 12
