"""Poison documents (issue 23, item 1): an activity document another program wrote
without a required field, or with a field of the wrong type, stops only itself.

For each required field missing and each field of the wrong type, the bad document
is inserted with pymongo (as the other program would) beside good work of every
kind: pending, scheduled and due, and held under an expired lease by a worker that
died. Where the bad field allows, it is inserted in each of those three states too.
Then, as a user runs it, `worker --burst` must finish all good work and exit; the
bad document must end dead-lettered with an error naming the field (docs/design.md,
"Malformed documents"), or be left as it was (no worker may take it) and be named
by `doctor`; never running. The readers read past it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.database import Database

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.backend.domain.documents import Activity
from runnerq_cli.backend.domain.shapes import ACTIVITY, MALFORMED_LIMIT
from runnerq_cli.backend.queue.aside import checked
from runnerq_cli.backend.store.writes import new_event
from tests.helpers import partitions_for_tests

MISSING = object()  # the field is left out
# The fixtures' queue is partitioned (tests/helpers.py): hand-made documents get partition
# 0. Read once: run_cli clears RUNNERQ_* from the environment while it runs.
PARTITIONED = partitions_for_tests() > 1

# Each required field left out, and each field the contract types given another type.
CASES: dict[str, tuple[str, Any]] = {
    **{f"{name}-missing": (name, MISSING)
       for name in Activity._REQUIRED if name != "_id"},  # MongoDB always has an _id
    "activity_type-list": ("activity_type", ["job"]),  # matches a claim by type, too
    "activity_type-empty": ("activity_type", ""),  # 1-200 characters: names no handler
    "priority-text": ("priority", "high"),  # sorts before every number: claimed first
    "status-number": ("status", 5),
    "created_at-text": ("created_at", "yesterday"),
    "payload-text": ("payload", "text"),
    "retry_count-text": ("retry_count", "two"),
    "max_retries-float": ("max_retries", 3.5),
    "timeout_seconds-text": ("timeout_seconds", "5m"),
    "retry_delay_seconds-bool": ("retry_delay_seconds", True),
    # a double, but no number of seconds: claimed and run, a NaN timeout never expired
    "timeout_seconds-nan": ("timeout_seconds", float("nan")),
    "retry_delay_seconds-infinity": ("retry_delay_seconds", float("-inf")),
    "metadata-list": ("metadata", ["a"]),
    "scheduled_at-text": ("scheduled_at", "soon"),
    "started_at-number": ("started_at", 17),
    "completed_at-text": ("completed_at", "later"),
    "lease_deadline-text": ("lease_deadline", "soon"),
    "last_error_at-number": ("last_error_at", 5),
    "worker_id-number": ("worker_id", 5),
    "lease_id-number": ("lease_id", 5),
    "last_error-document": ("last_error", {"x": 1}),
    "claims-text": ("claims", "x"),  # the claim's own $inc fails on it
    "partition-text": ("partition", "0"),  # docs/design.md, "The partition field"
    # The outbox (docs/design.md, "The outbox"): a write must be able to add to it.
    "outbox-text": ("outbox", "s"),
    "outbox-events": ("outbox", {"seq": 1, "since": datetime(2026, 1, 1, tzinfo=UTC),
                                 "events": "x"}),
    "outbox-event-id": ("outbox", {"seq": 1, "since": datetime(2026, 1, 1, tzinfo=UTC),
                                   "events": [{"event_type": "Retrying"}]}),  # no copy
}


def test_every_field_the_contract_types_has_a_case() -> None:
    covered = {field for field, _ in CASES.values()}
    assert covered == (set(Activity._TYPES) | set(Activity._REQUIRED) | {"outbox"}) - {"_id"}


def _problem(doc: dict[str, Any]) -> str | None:
    """What a writer finds wrong with `doc` (aside.checked: its outbox included)."""
    return checked(doc)[1]


@pytest.fixture
def raw(server, db_name) -> Iterator[Database]:
    """The test database through a plain pymongo client (another program's view)."""
    with MongoClient(server.uri, uuidRepresentation="standard", tz_aware=True) as client:
        yield client[db_name]


def _bad(status: str, field: str, value: Any, now: datetime) -> dict[str, Any]:
    """An activity of type `job` in `status`, well formed but for `field`."""
    doc: dict[str, Any] = {
        "_id": uuid.uuid4(), "activity_type": "job", "payload": {"bad": field},
        "priority": 2, "status": status, "created_at": now - timedelta(minutes=5),
        "retry_count": 0, "max_retries": 3, "timeout_seconds": 300, "retry_delay_seconds": 1,
        "metadata": {}}
    if status == "scheduled":
        doc["scheduled_at"] = now - timedelta(seconds=30)  # due
    if status == "processing":  # held by a worker that died: the lease expired
        doc.update(started_at=now - timedelta(minutes=2), worker_id="dead-host-1",
                   lease_id="f" * 32, lease_deadline=now - timedelta(minutes=1), claims=1)
    if PARTITIONED:
        doc["partition"] = 0
    if value is MISSING:
        doc.pop(field, None)
    else:
        doc[field] = value
    return doc


@dataclass
class Poisoned:
    good: list[uuid.UUID]
    bad: dict[uuid.UUID, dict[str, Any]]  # id -> the document as inserted


def _poison(backend: RunnerQ, raw: Database, cases: list[str]) -> Poisoned:
    """Good work in every state a worker's pass moves, and the bad documents of `cases`."""
    start = datetime.now(UTC).replace(microsecond=0)  # as stored: to the millisecond
    # The past, for good work that is due and a lease that expired (no waiting).
    past = RunnerQ(backend.context.settings, clock=lambda: start - timedelta(minutes=2))
    held = past.enqueue("job", {"n": "held"}).activity_id
    assert past.dequeue("dead-host-2", types=["job"], lease_seconds=60)  # then it died
    good = [held, past.enqueue("job", {"n": "due"}, delay_seconds=60).activity_id,
            *(backend.enqueue("job", {"n": n}).activity_id for n in range(2))]
    bad: dict[uuid.UUID, dict[str, Any]] = {}
    for case in cases:
        field, value = CASES[case]
        statuses = ["pending"] if field == "status" else ["pending", "scheduled", "processing"]
        for status in statuses:
            doc = _bad(status, field, value, start)
            bad[doc["_id"]] = doc
    raw[backend.context.names.activities].insert_many(list(bad.values()))
    return Poisoned(good, bad)


# Fields a claim writes itself: a pending document wrong only there is well formed once
# claimed, and runs like any other.
CLAIM_WRITES = {"started_at", "worker_id", "lease_id", "lease_deadline"}


def _expected_fates(doc: dict[str, Any]) -> set[str]:
    """What a worker's pass may leave of a bad document: "set aside" (dead-lettered,
    the error naming what is wrong), "ran", "due" (the scheduler made it pending, and no
    claim matches it) or "untouched" (no worker may take it)."""
    assert _problem(doc) is not None
    status = doc.get("status")
    typed = doc.get("activity_type") == "job" or doc.get("activity_type") == ["job"]
    if status == "processing":  # the reaper: an expired lease, or one that never expires
        return {"set aside"}
    if status == "scheduled" and not isinstance(doc.get("scheduled_at"), datetime):
        # Never due on MongoDB (a date never compares to text); the dev server compares
        # them, and the claim then sets it aside.
        return {"untouched", "set aside"}
    if status not in ("pending", "scheduled"):
        return {"untouched"}  # no claim matches it
    if not typed:
        return {"due"} if status == "scheduled" else {"untouched"}
    if PARTITIONED and type(doc.get("partition")) is not int:
        # a partitioned queue's claim names an int partition: it never matches this one
        return {"due"} if status == "scheduled" else {"untouched"}
    if _problem({k: v for k, v in doc.items() if k not in CLAIM_WRITES}) is None:
        return {"ran"}
    return {"set aside"}


def _fate(inserted: dict[str, Any], doc: dict[str, Any]) -> str:
    if doc == inserted:
        return "untouched"
    if doc == {**inserted, "status": "pending"}:
        return "due"
    return {"dead_letter": "set aside", "completed": "ran"}.get(doc["status"], doc["status"])


def _burst(run) -> None:
    """`worker --burst` through `run` (run_cli, or run_cli_subprocess: a process of its
    own, as a user runs it); it must exit, 0."""
    res = run("worker", "--burst", "--concurrency", "2",
              "--handler", "job=tests.worker_handlers:echo")
    assert res.code == 0, res.stderr[-2000:]
    assert "Traceback" not in res.stderr, res.stderr[-2000:]


def _check_fates(backend: RunnerQ, raw: Database, poisoned: Poisoned) -> None:
    names = backend.context.names
    docs = {d["_id"]: d for d in raw[names.activities].find()}
    for aid in poisoned.good:
        assert docs[aid]["status"] == "completed", docs[aid]
    for aid, inserted in poisoned.bad.items():
        doc = docs[aid]
        fate = _fate(inserted, doc)
        assert fate in _expected_fates(inserted), (inserted, doc)
        if fate == "set aside":
            assert doc["last_error"] == f"malformed document: {_problem(inserted)}"
            assert "lease_id" not in doc and "outbox" not in doc, doc
            record = raw[names.dead_letter].find_one({"_id": aid})
            assert record is not None and record["error"] == doc["last_error"]
            event = raw[names.events].find_one({"activity_id": aid, "event_type": "DeadLetter"})
            assert event is not None and event["detail"]["error"] == doc["last_error"]
            assert raw[names.results].find_one({"_id": aid})["state"] == "Err"


@pytest.mark.timeout(60)  # a worker that hangs on it fails the case (issue 23: it did)
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_worker_finishes_the_good_work_beside_a_malformed_document(
        case: str, backend: RunnerQ, raw: Database, run_cli) -> None:
    poisoned = _poison(backend, raw, [case])
    _burst(run_cli)  # exits: nothing left running, no maintenance pass failed
    _check_fates(backend, raw, poisoned)
    assert backend.requeue_expired()["malformed"] == 0  # nothing left to set aside


def test_the_reaper_sets_aside_and_counts_a_malformed_lease_and_goes_on(
        backend: RunnerQ, raw: Database) -> None:
    """The pass that used to fail on the first malformed document: every other expired
    lease is recovered in the same pass, due work still moves."""
    poisoned = _poison(backend, raw, ["priority-missing", "retry_count-text"])
    counts = backend.requeue_expired()
    assert counts == {"requeued": 1, "dead_lettered": 0, "malformed": 2}
    assert backend.process_scheduled() >= 1
    names = backend.context.names
    statuses = {d["_id"]: d["status"] for d in raw[names.activities].find()}
    assert statuses[poisoned.good[0]] == "pending"  # the good held one, recovered
    assert statuses[poisoned.good[1]] == "pending"  # the good due one
    processing = [aid for aid in poisoned.bad if statuses[aid] == "processing"]
    assert processing == []


@pytest.mark.skipif(PARTITIONED, reason="the whole queue's claim order")
def test_a_claim_sets_aside_and_returns_the_good_work(backend: RunnerQ, raw: Database) -> None:
    """Through the API: the malformed one is never handed out and takes no place in the
    claim's limit."""
    poisoned = _poison(backend, raw, ["priority-text"])  # "high" sorts first
    claims = backend.dequeue("w", types=["job"], limit=2)
    assert [c.activity_id for c in claims] == poisoned.good[2:]
    bad = next(aid for aid, d in poisoned.bad.items() if d["status"] == "pending")
    doc = raw[backend.context.names.activities].find_one({"_id": bad})
    assert doc["status"] == "dead_letter"
    assert doc["last_error"] == 'malformed document: priority is "high", not an integer'


# ----------------------------------------------------------------------- the readers


@pytest.fixture
def all_poisoned(backend: RunnerQ, raw: Database, run_cli_subprocess) -> Poisoned:
    """Every case at once, after a worker's pass (set aside, ran or untouched)."""
    poisoned = _poison(backend, raw, sorted(CASES))
    _burst(run_cli_subprocess)  # a process of its own, as a user runs it
    return poisoned


def _clean(res) -> None:
    assert "Traceback" not in res.stderr and "internal error" not in res.stderr, res.stderr


@pytest.mark.skipif(PARTITIONED, reason="one partition's readers of every case at once")
def test_readers_doctor_explain_and_actions_read_past_malformed_documents(
        all_poisoned: Poisoned, backend: RunnerQ, raw: Database, run_cli) -> None:
    """One pass of every case at once (the suite's time): the fates as one by one, then
    every reader, doctor, explain and an operator action."""
    _check_fates(backend, raw, all_poisoned)
    for args in (("list", "pending"), ("list", "running"), ("list", "scheduled"),
                 ("list", "dead-letter"), ("list", "completed"), ("stats",),
                 ("stats", "-o", "json"), ("dlq", "export"), ("workers",)):
        res = run_cli(*args)
        assert res.code == 0, (args, res.stderr)
        _clean(res)
    res = run_cli("tail", "events", "--no-follow", "-o", "jsonl")
    assert res.code == 0, res.stderr
    _clean(res)
    events = [json.loads(line) for line in res.stdout.splitlines()]
    for aid in all_poisoned.good:
        assert any(e["activity_id"] == str(aid) and e["event_type"] == "Completed"
                   for e in events), aid
    # One document of each case (its pending one) is enough to read one by one.
    firsts = [aid for aid, doc in all_poisoned.bad.items() if doc.get("status") != "scheduled"
              and doc.get("status") != "processing"]
    for aid in firsts:
        for args in (("show", str(aid)), ("events", str(aid), "-o", "json")):
            res = run_cli(*args)
            assert res.code in ((0, 1) if args[0] == "show" else (0,)), res.stderr
            _clean(res)
            assert len(res.stderr.strip().splitlines()) <= 1, res.stderr
        # Its stored events, the set-aside's DeadLetter among them (design.md).
        if all_poisoned.bad[aid].get("status") == "pending" and (
                raw[backend.context.names.activities].find_one({"_id": aid}) or {}
        ).get("status") == "dead_letter":
            assert "DeadLetter" in {e["event_type"] for e in json.loads(res.stdout)["events"]}

    names = backend.context.names
    still = {d["_id"]: (d.get("status"), ACTIVITY.problem(d)) for d in raw[names.activities].find(
        {"_id": {"$in": list(all_poisoned.bad)}})}
    still = {aid: found for aid, found in still.items() if found[1] is not None}
    assert still  # the untouched ones, and the set-aside ones whose defect stays
    res = run_cli("doctor", "-o", "json")
    assert res.code in (0, 7), res.stderr
    check = next(c for c in json.loads(res.stdout)["checks"] if c["name"] == "documents")
    assert check["status"] == "warn" and "explain" in check["fix"]
    named = {m["id"]: m["problem"] for m in check["facts"]["malformed"]
             if m["collection"] == names.activities}
    assert named.items() <= {str(aid): p for aid, (_, p) in still.items()}.items()
    by_status: dict[Any, int] = {}  # doctor names MALFORMED_LIMIT per status at most
    for status, _ in still.values():
        group = status if status in ("pending", "scheduled", "processing",
                                     "dead_letter") else "unknown"
        by_status[group] = by_status.get(group, 0) + 1
    assert len(named) == sum(min(n, MALFORMED_LIMIT) for n in by_status.values())
    explained = [aid for aid in still if aid in firsts]
    assert len(explained) > 10  # untouched (no status of ours) and set aside, of many cases
    for aid in explained:
        problem = still[aid][1]
        res = run_cli("explain", str(aid), "-o", "json")
        assert res.code == 0, res.stderr
        found = json.loads(res.stdout)
        assert found["reason"] == "malformed" and found["facts"]["problem"] == problem
        assert problem in found["sentence"]

    doc = raw[names.activities].find_one({"status": "dead_letter", "retry_count": "two"})
    assert doc is not None
    res = run_cli("retry", str(doc["_id"]))
    assert res.code == 1 and res.stderr.startswith("error: cannot retry activity"), res.stderr
    assert "retry_count" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    res = run_cli("delete", str(doc["_id"]), "--yes")  # the way out for any of them
    assert res.code == 0, res.stderr
    assert raw[names.activities].find_one({"_id": doc["_id"]}) is None


def test_an_activity_no_claim_matches_is_explained_as_waiting_forever(
        backend: RunnerQ, raw: Database, run_cli) -> None:
    """A null or numeric activity_type: workers claim by type, so none takes it (nor
    sets it aside). explain says so, not "the first worker that claims it dead-letters
    it"; doctor's documents check names it, with the way out."""
    now = datetime.now(UTC)
    pending = _bad("pending", "activity_type", None, now)
    scheduled = _bad("scheduled", "activity_type", 7, now)
    raw[backend.context.names.activities].insert_many([pending, scheduled])
    for doc, stays in ((pending, "pending"), (scheduled, "pending")):
        found = json.loads(run_cli("explain", str(doc["_id"]), "-o", "json").stdout)
        assert found["reason"] == "malformed", found
        assert "no worker claims it" in found["sentence"], found
        assert f"stays {stays}" in found["sentence"] and "dead-letters" not in found["sentence"]
        assert "Set its activity_type" in found["sentence"] and "delete it" in found["sentence"]
    res = run_cli("doctor", "-o", "json")
    check = next(c for c in json.loads(res.stdout)["checks"] if c["name"] == "documents")
    named = {m["id"] for m in check["facts"]["malformed"]}
    assert {str(pending["_id"]), str(scheduled["_id"])} <= named
    assert "activity_type is not text" in check["fix"]


@pytest.mark.parametrize("outbox", [
    {"events": "x"}, {"events": [{"event_type": "Retrying"}]}, {"seq": "one"},
    {"result": {"state": "Err", "data": {}, "claim": "two"}},
    {"dead_letter": {"error": "boom"}}], ids=["events", "event-id", "seq", "claim", "record"])
def test_outbox_repair_skips_a_malformed_outbox_and_copies_the_others(
        outbox: dict[str, Any], backend: RunnerQ, raw: Database) -> None:
    since = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=2)
    good, bad = (_bad("pending", "metadata", {}, since) for _ in range(2))
    event = new_event(good["_id"], "job", "Retrying", since, "w", attempt=1)
    good["outbox"] = {"seq": 1, "since": since, "events": [event]}
    bad["outbox"] = {"seq": 1, "since": since, "events": [], **outbox}
    names = backend.context.names
    raw[names.activities].insert_many([bad, good])
    assert backend.maintenance.repair_outboxes(30) == 1
    assert raw[names.events].find_one({"_id": event["_id"]}) is not None
    assert "outbox" not in raw[names.activities].find_one({"_id": good["_id"]})
    assert raw[names.activities].find_one({"_id": bad["_id"]})["outbox"] == bad["outbox"]


def test_a_malformed_result_is_one_clean_line(backend: RunnerQ, raw: Database,
                                              run_cli) -> None:
    aid = backend.enqueue("job", {}).activity_id
    backend.ack_success(backend.dequeue("w")[0], {"ok": 1})
    raw[backend.context.names.results].update_one({"_id": aid}, {"$unset": {"state": ""}})
    res = run_cli("result", str(aid))
    assert res.code == 1 and res.stderr.startswith("error: result "), res.stderr
    assert "state is missing" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    # The activity itself is well formed: `show` shows it, and warns of its result.
    res = run_cli("show", str(aid), "-o", "json")
    assert res.code == 0 and "state is missing" in res.stderr, res.stderr
    shown = json.loads(res.stdout)
    assert shown["activity"]["status"] == "completed" and shown["result"] is None


def test_a_list_says_what_it_skipped(backend: RunnerQ, raw: Database, run_cli) -> None:
    _poison(backend, raw, ["priority-missing"])
    res = run_cli("list", "pending")
    assert res.code == 0 and "skipped 1 malformed activity" in res.stderr, res.stderr
    res = run_cli("list", "pending", "-o", "json")
    assert json.loads(res.stdout)["skipped"] == 1


def test_a_key_held_by_a_malformed_activity_is_answered(backend: RunnerQ,
                                                        raw: Database) -> None:
    first = backend.enqueue("job", {}, idempotency_key="k1").activity_id
    raw[backend.context.names.activities].update_one({"_id": first},
                                                     {"$unset": {"status": ""}})
    again = backend.enqueue("job", {}, idempotency_key="k1")
    assert (again.activity_id, again.created, again.status) == (first, False, "?")


def test_stats_count_a_priority_of_another_type_as_malformed(backend: RunnerQ, raw: Database,
                                                             run_cli) -> None:
    """A text "high" or a missing priority is no work of that priority: counted under
    `malformed`, never under the name it imitates (nor a column `None`)."""
    backend.enqueue("job", {})
    now = datetime.now(UTC)
    raw[backend.context.names.activities].insert_many(
        [_bad("pending", "priority", "high", now), _bad("pending", "priority", MISSING, now)])
    res = run_cli("stats", "-o", "json")
    assert res.code == 0, res.stderr
    assert json.loads(res.stdout)["by_priority"] == {"normal": {"pending": 1},
                                                     "malformed": {"pending": 2}}


def test_malformed_stored_events_stop_neither_the_tail_nor_an_activitys_events(
        backend: RunnerQ, raw: Database, run_cli) -> None:
    """Another program's events of a finished activity with a text timestamp, a detail
    that is no document, a number for a type: skipped by the readers, never compared with
    its derived steps (the tail crashed: 'str' object has no attribute 'tzinfo')."""
    aid = backend.enqueue("job", {}).activity_id
    [claim] = backend.dequeue("w", types=["job"])
    backend.ack_success(claim, {"ok": True})
    now = datetime.now(UTC)
    raw[backend.context.names.events].insert_many([
        {"activity_id": aid, "timestamp": "yesterday", "event_type": "Retrying",
         "detail": {}, "ingested_at": now},
        {"activity_id": aid, "timestamp": now, "event_type": 5, "detail": "x",
         "ingested_at": now},
        {"activity_id": aid, "timestamp": now, "event_type": "Retrying", "detail": "x",
         "ingested_at": now}])
    for args in (("tail", "events", "--no-follow", "-o", "jsonl"),
                 ("events", str(aid), "-o", "jsonl")):
        res = run_cli(*args)
        assert res.code == 0, res.stderr
        _clean(res)
        steps = [json.loads(line) for line in res.stdout.splitlines()
                 if line.startswith("{")]
        assert {"Enqueued", "Started", "Completed"} <= {
            e["event_type"] for e in steps if e["activity_id"] == str(aid)}, args
