"""The contract exact again (issue 34): what a second implementation, written from
docs/design.md alone, found where the project and its text disagreed.

- a malformed activity proves no derived step: `events ID` and the tail show its
  stored events only, for every malformed shape (a text `timeout_seconds` as well as a
  double `priority`, and the large fields the tail does not read along);
- an empty `activity_type` is malformed (the table says 1-200 characters): set aside by a
  claim that takes it, named by doctor, explained, counted by stats;
- `stats`' malformed counts what is set aside and the table's mismatches, and a
  double priority is no `normal` work;
- problem texts in a form any language produces (JSON-style values, types in words).
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from bson import ObjectId
from pymongo import MongoClient
from pymongo.database import Database

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.backend.domain.documents import Activity, neutral, wanted
from runnerq_cli.backend.domain.models import MalformedDocument


@pytest.fixture
def raw(server, db_name) -> Iterator[Database]:
    """The test database through a plain pymongo client (another program's view)."""
    with MongoClient(server.uri, uuidRepresentation="standard", tz_aware=True) as client:
        yield client[db_name]


def _doc(**fields: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "_id": uuid.uuid4(), "activity_type": "job", "payload": {}, "priority": 2,
        "status": "pending", "created_at": datetime.now(UTC) - timedelta(minutes=1),
        "retry_count": 0, "max_retries": 3, "timeout_seconds": 300,
        "retry_delay_seconds": 1, "metadata": {}}
    doc.update(fields)
    return doc


def _problem(doc: dict[str, Any]) -> str:
    with pytest.raises(MalformedDocument) as caught:
        Activity.from_doc(doc)
    return caught.value.problem


# ------------------------------------------------------------------ the problem texts


@pytest.mark.parametrize(("field", "value", "problem"), [
    ("timeout_seconds", "300", 'timeout_seconds is "300", not a number'),
    ("retry_delay_seconds", True, "retry_delay_seconds is true, not a number"),
    ("timeout_seconds", math.nan, "timeout_seconds is NaN, not a finite number"),
    ("retry_delay_seconds", -math.inf, "retry_delay_seconds is -Infinity, not a finite number"),
    ("priority", 2.0, "priority is 2.0, not an integer"),
    ("priority", "high", 'priority is "high", not an integer'),
    ("max_retries", 3.5, "max_retries is 3.5, not an integer"),
    ("started_at", 17, "started_at is 17, not a date or null"),
    ("metadata", ["a"], "metadata is an array, not a document or null"),
    ("last_error", {"x": 1}, "last_error is a document, not a string or null"),
    ("worker_id", datetime(2026, 1, 1, tzinfo=UTC), "worker_id is a date, not a string or null"),
    ("claims", datetime(2026, 1, 1, tzinfo=UTC), "claims is a date, not an integer"),
    ("lease_id", ObjectId("0" * 24), "lease_id is an ObjectId, not a string or null"),
    ("activity_type", "", 'activity_type is "", not 1-200 characters'),
    ("activity_type", "é" * 201, f'activity_type is "{"é" * 50}"..., not 1-200 characters'),
    ("activity_type", None, "activity_type is null, not a string"),
])
def test_problems_are_said_in_a_form_any_language_produces(field: str, value: Any,
                                                           problem: str) -> None:
    assert _problem(_doc(**{field: value})) == problem


def test_the_words_and_values_of_a_problem() -> None:
    assert wanted((int, float)) == "a number" and wanted((str, type(None))) == "a string or null"
    assert neutral('say "hi"\n') == '"say \\"hi\\"\\n"'  # JSON's escapes
    assert neutral(math.inf) == "Infinity" and neutral(False) == "false"
    assert neutral(uuid.UUID(int=0)) == "a UUID" and neutral(b"x") == "binary"
    assert Activity.from_doc(_doc(activity_type="é" * 200)).activity_type == "é" * 200


# ------------------------------------------- defect 1: no derived step of a malformed one


MALFORMED_FIELDS = {
    "timeout_seconds-text": {"timeout_seconds": "300"},
    "priority-double": {"priority": 2.0},
    "payload-text": {"payload": "text"},  # a large field: read by a query, not along
    "metadata-list": {"metadata": ["a"]},
    "last_error-number": {"last_error": 5},
    "claims-date": {"claims": datetime(2026, 1, 1, tzinfo=UTC)},
}


@pytest.mark.parametrize("case", sorted(MALFORMED_FIELDS))
def test_a_set_aside_activity_shows_its_stored_events_only(
        case: str, backend: RunnerQ, raw: Database, run_cli) -> None:
    doc = _doc(**MALFORMED_FIELDS[case])
    names = backend.context.names
    raw[names.activities].insert_one(doc)
    assert backend.dequeue("w", types=["job"]) == []  # taken, and set aside at once
    stored = raw[names.activities].find_one({"_id": doc["_id"]})
    assert stored["status"] == "dead_letter", stored
    assert stored["last_error"] == f"malformed document: {_problem(doc)}"
    res = run_cli("events", str(doc["_id"]), "-o", "json")
    assert res.code == 0, res.stderr
    assert [e["event_type"] for e in json.loads(res.stdout)["events"]] == ["DeadLetter"]
    res = run_cli("tail", "events", "--no-follow", "-o", "jsonl")
    assert res.code == 0, res.stderr
    tailed = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
    assert [e["event_type"] for e in tailed if e["activity_id"] == str(doc["_id"])] == [
        "DeadLetter"]


def test_a_well_formed_activity_still_shows_its_derived_steps(backend: RunnerQ,
                                                               run_cli) -> None:
    aid = backend.enqueue("job", {"big": "x" * 1000}, metadata={"k": "v"}).activity_id
    backend.ack_success(backend.dequeue("w", types=["job"])[0], {"ok": True})
    res = run_cli("events", str(aid), "-o", "json")
    assert {e["event_type"] for e in json.loads(res.stdout)["events"]} == {
        "Enqueued", "Dequeued", "Started", "Completed", "ResultStored"}


# ----------------------------------------------------- defect 2: an empty activity_type


def test_an_empty_activity_type_is_malformed_everywhere(backend: RunnerQ, raw: Database,
                                                        run_cli) -> None:
    names = backend.context.names
    waiting, taken = _doc(activity_type=""), _doc(activity_type="")
    raw[names.activities].insert_one(waiting)
    # A worker claims by its handlers' types: none is "", so it stays pending ...
    assert backend.dequeue("w", types=["job"]) == []
    assert raw[names.activities].find_one({"_id": waiting["_id"]})["status"] == "pending"
    found = json.loads(run_cli("explain", str(waiting["_id"]), "-o", "json").stdout)
    assert found["reason"] == "malformed", found
    assert found["facts"]["problem"] == 'activity_type is "", not 1-200 characters'
    assert "no worker claims it" in found["sentence"] and "stays pending" in found["sentence"]
    res = run_cli("doctor", "-o", "json")
    check = next(c for c in json.loads(res.stdout)["checks"] if c["name"] == "documents")
    assert {m["id"] for m in check["facts"]["malformed"]} == {str(waiting["_id"])}
    stats = json.loads(run_cli("stats", "-o", "json").stdout)
    assert [line for line in stats["malformed"] if str(waiting["_id"]) in line]
    # ... and a claim of every type takes it and sets it aside, as any malformed one.
    raw[names.activities].delete_one({"_id": waiting["_id"]})
    raw[names.activities].insert_one(taken)
    assert backend.dequeue("w") == []
    doc = raw[names.activities].find_one({"_id": taken["_id"]})
    assert doc["status"] == "dead_letter"
    assert doc["last_error"] == 'malformed document: activity_type is "", not 1-200 characters'


# ------------------------------------------------------ defect 3: stats' malformed count


def test_stats_count_what_is_set_aside_and_what_show_refuses(backend: RunnerQ, raw: Database,
                                                             run_cli) -> None:
    names = backend.context.names
    backend.enqueue("job", {})
    aside = [_doc(timeout_seconds="300") for _ in range(3)]
    raw[names.activities].insert_many(aside)
    assert backend.dequeue("w", types=["job"], limit=1)  # the good one; the three set aside
    double = _doc(priority=2.0)
    raw[names.activities].insert_one(double)  # pending, not claimed yet
    res = run_cli("show", str(double["_id"]))
    assert res.code == 1 and "priority is 2.0, not an integer" in res.stderr
    snap = json.loads(run_cli("stats", "-o", "json").stdout)
    named = "\n".join(snap["malformed"])
    assert len(snap["malformed"]) == 4, snap["malformed"]
    for doc in (*aside, double):
        assert str(doc["_id"]) in named
    # by priority: a double is no normal work (the three set aside have priority 2)
    assert snap["by_priority"] == {"normal": {"processing": 1, "dead_letter": 3},
                                   "malformed": {"pending": 1}}
    res = run_cli("stats", "--check", "malformed == 0")
    assert res.code != 0, res.stdout


def test_a_claims_date_is_set_aside_not_counted_on(backend: RunnerQ, raw: Database) -> None:
    """A date-valued `claims` does not fail the claim's `$add` (a date plus a number is a
    date): the claim returns it and sets it aside; it never reaches a handler."""
    doc = _doc(claims=datetime(2026, 1, 1, tzinfo=UTC))
    raw[backend.context.names.activities].insert_one(doc)
    good = backend.enqueue("job", {}).activity_id
    [claim] = backend.dequeue("w", types=["job"], limit=2)
    assert claim.activity_id == good
    stored = raw[backend.context.names.activities].find_one({"_id": doc["_id"]})
    assert stored["status"] == "dead_letter" and isinstance(stored["claims"], datetime)
    assert stored["last_error"] == "malformed document: claims is a date, not an integer"


# ------------------------------------------------------------------ pauses (sentence 13)


def test_a_type_paused_under_a_whole_queue_pause_keeps_the_queue_s_reason(
        backend: RunnerQ, raw: Database) -> None:
    backend.control.pause(reason="maintenance", actor="ops")
    state = backend.control.pause(["mail"], reason="smtp down", actor="dev")
    assert state.all and state.reason == "maintenance" and state.actor == "ops"
    doc = raw[backend.context.names.control].find_one({"_id": "pause"})
    assert doc["all"] is True and doc["types"] == ["mail"] and doc["reason"] == "maintenance"
    assert [(n["type"], n["reason"]) for n in doc["notes"]] == [("mail", "smtp down")]
    with pytest.raises(Exception, match="the whole queue is paused"):
        backend.control.resume(["mail"])
    assert not backend.control.resume().active  # the whole queue's resume: no document
    assert raw[backend.context.names.control].find_one({"_id": "pause"}) is None
    events = raw[backend.context.names.events].find(
        {"activity_id": None, "event_type": {"$in": ["Paused", "Resumed"]}}).sort("_id", 1)
    details = [e["detail"] for e in events]
    assert [d["paused"] for d in details[:2]] == ["all", ["mail"]]
    assert details[2]["still_paused"] is None
    assert backend.control.resume().active is False  # nothing paused: nothing written
    assert raw[backend.context.names.events].count_documents({"event_type": "Resumed"}) == 1


# ------------------------------------------- sentences 10-12: bounds and rounding, exact


def test_an_error_text_s_cut_mark_is_within_its_bytes_and_counts_code_points() -> None:
    from runnerq_cli.backend.domain.error_text import error_text
    from runnerq_cli.backend.domain.sizes import ERROR_TEXT_MAX_BYTES

    text = "é" * 3000  # 3000 code points, 6000 bytes (4000 UTF-16 units would be 3000 too)
    cut = error_text(text)
    assert len(cut.encode()) <= ERROR_TEXT_MAX_BYTES
    assert cut.endswith("… [cut: 3000 characters in all]")
    assert error_text("😀" * 1024) == "😀" * 1024  # 4096 bytes exactly: not cut
    assert error_text("😀" * 1025).endswith("[cut: 1025 characters in all]")  # code points


def test_a_result_nests_at_most_63_levels_below_data() -> None:
    from runnerq_cli.backend.domain.results import checked_result
    from runnerq_cli.errors import InvalidArgument

    def nested(depth: int) -> Any:
        value: Any = 1
        for _ in range(depth):
            value = [value]
        return value

    checked_result(nested(63))
    with pytest.raises(InvalidArgument, match="nested deeper"):
        checked_result(nested(64))


def test_a_delay_is_rounded_to_the_millisecond_halves_to_even() -> None:
    from runnerq_cli.backend.store.servertime import ServerTime

    assert [ServerTime(timedelta(seconds=s)).millis for s in (0.0025, 0.0035, 0.0002, 2.0)] \
        == [2, 4, 0, 2000]
