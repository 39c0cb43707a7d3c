"""Stray documents (issue 16, item 4): a document another program, a hand edit or a
look-alike collection stored with fields of the wrong type never crashes a reader.

Lists skip and count such a document, `doctor` names it (collection, id, what is
wrong), and a read of that one document fails with one line. The fixtures are
inserted with pymongo directly, as the other program would.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from pymongo import MongoClient
from pymongo.database import Database

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.backend.domain.documents import Activity, DeadLetterRecord, Event
from runnerq_cli.backend.domain.models import MalformedDocument
from runnerq_cli.backend.domain.pause import PauseState
from runnerq_cli.backend.queue.workers import WorkerInfo
from runnerq_cli.cli.exits import ExitCode
from tests.helpers import drive_to


@pytest.fixture
def raw(server, db_name) -> Iterator[Database]:
    """The test database through a plain pymongo client (another program's view)."""
    with MongoClient(server.uri, uuidRepresentation="standard", tz_aware=True) as client:
        yield client[db_name]


def _activity(**fields) -> dict:
    now = datetime.now(UTC)
    doc = {"_id": uuid.uuid4(), "activity_type": "job", "payload": {}, "priority": 2,
           "status": "pending", "created_at": now, "retry_count": 0, "max_retries": 3,
           "timeout_seconds": 300, "retry_delay_seconds": 1, "metadata": {}}
    doc.update(fields)
    return doc


STRAY_ACTIVITIES = {
    "created_at": _activity(created_at="yesterday"),
    "retry_count": _activity(retry_count="two"),
    "metadata": _activity(status="scheduled", scheduled_at=datetime.now(UTC), metadata=5),
    "activity_type": _activity(activity_type=["x"]),
}


@pytest.fixture
def strays(queue: RunnerQ, raw: Database) -> dict[str, object]:
    """One good activity and worker, and a stray document in each collection a reader uses."""
    good = queue.enqueue("job", {"n": 1}).activity_id
    queue.registry.register_worker("w-good", types=["job"], concurrency=2)
    names = queue.context.names
    raw[names.activities].insert_many(list(STRAY_ACTIVITIES.values()))
    raw[names.workers].insert_many([
        {"_id": "w-text", "concurrency": "a", "last_heartbeat": datetime.now(UTC)},
        {"_id": "w-five", "types": 5, "last_heartbeat": datetime.now(UTC)},
        {"_id": "w-mixed", "types": ["job", 7], "last_heartbeat": datetime.now(UTC)},
    ])
    raw[names.control].insert_one({"_id": "pause", "all": "no"})
    raw[names.dead_letter].insert_one({"_id": uuid.uuid4(), "activity": 5, "error": "x"})
    raw[names.events].insert_one({"_id": "e-bad", "activity_id": good, "event_type": 5,
                                  "timestamp": "noon"})
    return {"good": good}


# ------------------------------------------------------------- the readers' shape checks


@pytest.mark.parametrize("field", sorted(STRAY_ACTIVITIES))
def test_an_activity_of_the_wrong_shape_is_refused_by_name(field: str) -> None:
    with pytest.raises(MalformedDocument, match=field):
        Activity.from_doc(STRAY_ACTIVITIES[field])


def test_the_other_readers_check_their_shape_too() -> None:
    now = datetime.now(UTC)
    with pytest.raises(MalformedDocument, match="activity"):
        DeadLetterRecord.from_doc({"_id": 1, "activity": 5})
    with pytest.raises(MalformedDocument, match="event_type"):
        Event.from_doc({"_id": 1, "event_type": 5})
    for doc in ({"_id": "w", "concurrency": "a"}, {"_id": "w", "types": 5},
                {"_id": "w", "types": ["a", 1]}):
        with pytest.raises(MalformedDocument):
            WorkerInfo.from_doc(doc, now, 30.0)
    assert Activity.from_doc(_activity()).activity_type == "job"  # the good one still reads


@pytest.mark.parametrize("doc", [{"_id": "pause", "all": "no"}, {"_id": "pause", "all": 1},
                                 {"_id": "pause", "types": 5},
                                 {"_id": "pause", "types": [5]}])
def test_a_malformed_pause_does_not_read_as_paused(doc: dict) -> None:
    assert not PauseState.from_doc(doc).active
    assert PauseState.from_doc({"_id": "pause", "all": True}).active


# ------------------------------------------------------------- through the backend


def test_lists_skip_and_count_malformed_documents(queue: RunnerQ, strays) -> None:
    page = queue.inspector.list_page("pending")
    assert [a.id for a in page.items] == [strays["good"]]
    assert page.skipped == 3
    assert [a.id for a in queue.list_pending()] == [strays["good"]]
    assert queue.list_scheduled() == []
    assert queue.list_dead_letter() == []
    assert [w.worker_id for w in queue.registry.list_workers()] == ["w-good"]
    assert not queue.control.paused().active
    events = queue.get_activity_events(strays["good"])
    assert events and all(e.event_type != 5 for e in events)


def test_reading_one_malformed_activity_is_one_clean_error(queue: RunnerQ, run_cli,
                                                           strays) -> None:
    bad = STRAY_ACTIVITIES["created_at"]["_id"]
    with pytest.raises(MalformedDocument, match="created_at"):
        queue.get_activity(bad)
    res = run_cli("show", str(bad))
    assert res.code == ExitCode.FAILURE, res.stderr
    assert res.stderr.startswith("error: activity ") and "created_at" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr


def test_doctor_names_every_malformed_document(queue: RunnerQ, run_cli, strays) -> None:
    res = run_cli("doctor", "-o", "json")
    assert res.code in (0, 7), res.stderr
    checks = {c["name"]: c for c in json.loads(res.stdout)["checks"]}
    documents = checks["documents"]
    assert documents["status"] == "warn"
    found = {(m["collection"], m["id"]): m["problem"]
             for m in documents["facts"]["malformed"]}
    names = queue.context.names
    for field, doc in STRAY_ACTIVITIES.items():
        assert field in found[(names.activities, str(doc["_id"]))]
    assert "concurrency" in found[(names.workers, "w-text")]
    assert "types" in found[(names.workers, "w-five")]
    assert "types" in found[(names.workers, "w-mixed")]
    assert "all" in found[(names.control, "pause")]
    assert (names.activities, str(strays["good"])) not in found
    assert checks["pause"]["status"] == "ok"  # {all: "no"} is not a pause
    assert checks["workers"]["facts"]["live"] == 1


def test_doctor_on_a_clean_queue_finds_no_malformed_document(queue: RunnerQ) -> None:
    queue.enqueue("waiting", {})
    queue.registry.register_worker("w", types=[], concurrency=1)
    drive_to(queue, "dead_letter")
    check = next(c for c in queue.diagnosis.doctor(server=False) if c.name == "documents")
    assert check.status.value == "ok" and check.facts["malformed"] == []


@pytest.mark.parametrize("args", [("workers",), ("queues",), ("doctor", "--all-queues"), ("stats",),
                                  ("stats", "-o", "json"), ("audit",),
                                  ("list", "pending"), ("list", "dead-letter")])
def test_commands_read_past_stray_documents(run_cli, strays, args) -> None:
    res = run_cli(*args)
    assert res.code in (0, 7), (args, res.stderr)
    assert "Traceback" not in res.stderr and "internal error" not in res.stderr


def test_explain_reads_past_stray_workers_and_pause(queue: RunnerQ, run_cli, strays) -> None:
    res = run_cli("explain", str(strays["good"]), "-o", "json")
    assert res.code == 0, res.stderr
    found = json.loads(res.stdout)
    assert found["reason"] == "pending" and found["facts"]["paused"] is False
    assert found["facts"]["live_workers"] == 1


def test_a_paused_backlog_is_the_pause_s_doing(queue: RunnerQ, clock) -> None:
    queue.enqueue("job", {})
    queue.control.pause(reason="maintenance", actor="ops")
    clock.advance(600)  # the activity waits past the backlog warning
    checks = {c.name: c for c in queue.diagnosis.doctor(server=False)}
    assert checks["pause"].status.value == "warn"
    assert "paused" in checks["pause"].message and "maintenance" in checks["pause"].message
    assert "resume" in (checks["pause"].fix or "")
    backlog = checks["backlog"]
    assert backlog.status.value == "warn" and "is paused" in backlog.message
    assert backlog.facts["paused"]["all"] is True
    assert "resume" in (backlog.fix or "") and "add workers" not in (backlog.fix or "")


def test_a_backlog_of_a_type_not_paused_still_asks_for_workers(queue: RunnerQ, clock) -> None:
    queue.enqueue("job", {})
    queue.control.pause(["other"], reason="maintenance")
    clock.advance(600)
    backlog = next(c for c in queue.diagnosis.doctor(server=False) if c.name == "backlog")
    assert backlog.status.value == "warn" and "paused" not in backlog.message
    assert "add workers" in (backlog.fix or "")


@pytest.fixture
def stray_finished(queue: RunnerQ, raw: Database) -> dict[str, object]:
    """A good dead-lettered and a good failed activity, and a stray one in each status."""
    names = queue.context.names
    good_dead = drive_to(queue, "dead_letter", "dead")
    good_failed = drive_to(queue, "failed", "broken")
    now = datetime.now(UTC)
    raw[names.activities].insert_many([
        _activity(status="dead_letter", retry_count="two", completed_at=now),
        _activity(status="failed", retry_count="two", completed_at=now),
    ])
    raw[names.dead_letter].insert_one({"_id": uuid.uuid4(), "failed_at": now,
                                       "activity": {"activity_type": 5, "retry_count": "x"}})
    return {"dead": good_dead, "failed": good_failed}


def test_dlq_export_skips_malformed_documents(run_cli, stray_finished) -> None:
    res = run_cli("dlq", "export")
    assert res.code == 0, res.stderr
    lines = [json.loads(line) for line in res.stdout.splitlines() if line.strip()]
    assert [line["original_id"] for line in lines] == [str(stray_finished["dead"])]


def test_retry_dry_run_reads_past_malformed_documents(run_cli, stray_finished) -> None:
    res = run_cli("retry", "--status", "failed", "--dry-run", "-o", "json")
    assert res.code == 0, res.stderr
    assert "Traceback" not in res.stderr and "internal error" not in res.stderr


def test_tail_skips_a_malformed_stored_event(queue: RunnerQ, raw: Database, run_cli) -> None:
    good = queue.enqueue("job", {}).activity_id
    now = datetime.now(UTC)
    raw[queue.context.names.events].insert_one({
        "_id": "e-bad", "activity_id": good, "event_type": 5, "timestamp": now,
        "ingested_at": now, "detail": {}})
    res = run_cli("tail", "events", "--no-follow", "-o", "jsonl")
    assert res.code == 0, res.stderr
    events = [json.loads(line) for line in res.stdout.splitlines()]
    assert [e["event_type"] for e in events] == ["Enqueued"]
