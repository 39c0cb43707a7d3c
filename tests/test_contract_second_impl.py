"""A second implementation of the data contract (tests/second_impl.py, raw pymongo,
written from docs/design.md alone) racing and interoperating with the project's code:
schedules fired by either side, a partitioned queue written and claimed by either side,
trace context passed by another producer."""

from __future__ import annotations

import itertools
import threading
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from runnerq_cli.backend.domain.schedules import ScheduleDef, Template
from tests import second_impl as mine

T0 = datetime(2027, 1, 4, 12, 0, 0, tzinfo=UTC)  # a Monday, 12:00 UTC


@pytest.fixture
def at_t0(clock):
    clock.now = T0
    return clock


def firer(queue, clock, **hooks: Any) -> mine.Firer:
    return mine.Firer(queue.db, queue.queue, clock, **hooks)


def fired(queue, name: str) -> list[dict[str, Any]]:
    return list(queue.db[f"runnerq_{queue.queue}_activities"].find(
        {"metadata.runnerq_schedule": name}).sort("metadata.runnerq_fire_at", 1))


def schedule_doc(queue, name: str) -> dict[str, Any]:
    doc = queue.db[f"runnerq_{queue.queue}_schedules"].find_one({"_id": name})
    assert doc is not None
    return doc


def finish_all(queue, name: str) -> None:
    queue.db[f"runnerq_{queue.queue}_activities"].update_many(
        {"metadata.runnerq_schedule": name},
        {"$set": {"status": "completed", "completed_at": queue.now()}})


# --- schedules: one side writes, the other fires ---------------------------------------


def test_mine_fires_a_schedule_ours_added_as_ours_would(queue, at_t0):
    queue.schedules.add(ScheduleDef("tick", Template("report", {"n": 1}, priority=3),
                                    cron="*/5 * * * *"))
    at_t0.advance(300)
    assert firer(queue, at_t0).fire_due()["fired"] == 1
    [act] = fired(queue, "tick")
    assert act["idempotency_key"] == "schedule:tick:2027-01-04T12:05:00.000Z"
    assert act["payload"] == {"n": 1} and act["priority"] == 3
    assert act["metadata"] == {"runnerq_schedule": "tick",
                               "runnerq_fire_at": "2027-01-04T12:05:00.000Z",
                               "runnerq_fire": "on_time"}
    # Ours reads what mine wrote: the next instant, the last fire and its activity.
    [row] = queue.schedules.list_schedules()
    assert row.next_fire_at == T0 + timedelta(minutes=10)
    assert row.last_fire is not None and row.last_fire.kind == "on_time"
    assert row.to_json()["last_fire"]["activity_id"] == str(act["_id"])
    assert row.problem is None
    # And fires nothing more for that instant.
    assert queue.schedules.fire_due()["fired"] == 0
    at_t0.advance(300)
    assert queue.schedules.fire_due()["fired"] == 1
    assert len(fired(queue, "tick")) == 2


def test_ours_fires_a_schedule_mine_wrote_and_shows_it(queue, at_t0, run_cli):
    mine.insert_schedule(queue.db, queue.queue, "every-minute", "report", now=T0,
                         every_seconds=60, overlap="skip", missed="all", max_catchup=3)
    [row] = queue.schedules.list_schedules()
    assert row.problem is None and row.next_fire_at == T0 + timedelta(minutes=1)
    at_t0.advance(60)
    assert queue.schedules.fire_due()["fired"] == 1
    doc = schedule_doc(queue, "every-minute")
    assert doc["last_fire"]["kind"] == "on_time" and doc["fires"] == 1
    assert doc["next_fire_at"].replace(tzinfo=UTC) == T0 + timedelta(minutes=2)


def test_racing_firers_of_both_sides_enqueue_one_activity_per_fire(queue, at_t0):
    queue.schedules.add(ScheduleDef("race", Template("report"), every_seconds=60,
                                    missed="all", max_catchup=5))
    at_t0.advance(60 * 3)  # three instants due
    start = threading.Barrier(4)
    answers: list[dict[str, int]] = []

    def ours() -> None:
        start.wait()
        answers.append(queue.schedules.fire_due())

    def theirs() -> None:
        start.wait()
        answers.append(firer(queue, at_t0).fire_due())

    threads = [threading.Thread(target=f) for f in (ours, theirs, ours, theirs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    keys = [a["idempotency_key"] for a in fired(queue, "race")]
    assert keys == [f"schedule:race:2027-01-04T12:0{m}:00.000Z" for m in (1, 2, 3)]
    doc = schedule_doc(queue, "race")
    assert doc["fires"] == 3 and doc["next_fire_at"].replace(tzinfo=UTC) == T0 + timedelta(
        minutes=4)
    assert sum(a["fired"] for a in answers) == 3


def test_mine_killed_between_enqueue_and_compare_and_set_ours_doubles_nothing(
        queue, at_t0):
    queue.schedules.add(ScheduleDef("crash", Template("report"), every_seconds=60))
    at_t0.advance(60)

    def die(name: str) -> None:
        raise SystemExit("killed")

    with pytest.raises(SystemExit):
        firer(queue, at_t0, after_enqueue=die).fire_due()
    assert len(fired(queue, "crash")) == 1
    assert schedule_doc(queue, "crash")["next_fire_at"].replace(tzinfo=UTC) == T0 + timedelta(
        minutes=1)
    assert queue.schedules.fire_due()["fired"] == 1  # ours moves it, answered the same one
    assert len(fired(queue, "crash")) == 1
    assert schedule_doc(queue, "crash")["last_fire"]["activity_id"] == fired(
        queue, "crash")[0]["_id"]


def test_buffer_one_buffered_by_one_side_is_released_by_the_other(queue, at_t0):
    queue.schedules.add(ScheduleDef("buf", Template("report"), every_seconds=60,
                                    overlap="buffer_one"))
    at_t0.advance(60)
    assert firer(queue, at_t0).fire_due()["fired"] == 1  # 12:01 runs
    at_t0.advance(60)
    queue.schedules.fire_due()  # 12:02 buffered by ours: 12:01 unfinished
    doc = schedule_doc(queue, "buf")
    assert doc["buffered"]["at"].replace(tzinfo=UTC) == T0 + timedelta(minutes=2)
    at_t0.advance(60)
    firer(queue, at_t0).fire_due()  # 12:03 skipped by mine: one buffered already
    doc = schedule_doc(queue, "buf")
    assert doc["skipped_fires"] == 1 and len(fired(queue, "buf")) == 1
    finish_all(queue, "buf")
    firer(queue, at_t0).fire_due()  # mine releases 12:02
    acts = fired(queue, "buf")
    assert [a["metadata"]["runnerq_fire_at"] for a in acts] == [
        "2027-01-04T12:01:00.000Z", "2027-01-04T12:02:00.000Z"]
    assert "buffered" not in schedule_doc(queue, "buf")
    # Ours agrees: nothing more to release or fire now.
    assert queue.schedules.fire_due()["fired"] == 0
    [row] = queue.schedules.list_schedules()
    assert row.last_fire is not None and row.last_fire.activity_id == acts[1]["_id"]


# --- partitions -------------------------------------------------------------------------


@pytest.fixture
def four(backend):
    backend.maintenance.set_partitions(4)
    backend.maintenance.init_indexes()
    return backend


def test_keyed_partition_of_mine_is_the_one_ours_chooses(four):
    enq = mine.Enqueuer(four.db, four.queue, mine.ServerClock(four.db))
    for n in range(6):
        key = f"order-{n}"
        answer = enq.enqueue("email", {"n": n}, idempotency_key=key)
        doc = four.db[f"runnerq_{four.queue}_activities"].find_one({"_id": answer.id})
        assert doc is not None
        assert doc["partition"] == mine.partition_of_key("email", key, 4)
        theirs = four.enqueue("sms", {"n": n}, idempotency_key=key)
        ours = four.db[f"runnerq_{four.queue}_activities"].find_one({"_id": theirs.activity_id})
        assert ours is not None
        assert ours["partition"] == mine.partition_of_key("sms", key, 4)
    assert mine.partition_of_key("email", "order-17", 4) == 0
    assert mine.partition_of_key("email", "order-18", 4) == 3


def test_mine_claims_ours_from_one_partition_and_ours_claims_mine(four):
    enq = mine.Enqueuer(four.db, four.queue, mine.ServerClock(four.db))
    mine_ids = {enq.enqueue("job", {"n": n}).id for n in range(4)}
    ours_ids = {four.enqueue("job", {"n": n}).activity_id for n in range(4)}
    docs = list(four.db[f"runnerq_{four.queue}_activities"].find())
    assert {d["partition"] for d in docs if d["_id"] in mine_ids} == {0, 1, 2, 3}
    # Mine claims every partition (all eight); acknowledges ours, hands mine back.
    got: set[uuid.UUID] = set()
    handed_back: list[uuid.UUID] = []
    for p in range(4):
        while (claimed := mine.claim(four.db, four.queue, p, "second-impl",
                                     types=["job"])) is not None:
            assert claimed["partition"] == p
            if claimed["_id"] in ours_ids:
                assert mine.ack_success(four.db, four.queue, claimed, {"ok": p},
                                        "second-impl")
                got.add(claimed["_id"])
            else:
                handed_back.append(claimed["_id"])
    assert sorted(handed_back) == sorted(mine_ids)
    four.db[f"runnerq_{four.queue}_activities"].update_many(
        {"_id": {"$in": handed_back}},
        {"$set": {"status": "pending"},
         "$unset": {"worker_id": "", "lease_id": "", "lease_deadline": "", "started_at": ""}})
    assert got == ours_ids
    for aid in ours_ids:
        assert four.get_result(aid) is not None
    claims = four.dequeue("w1", types=["job"], limit=10)
    assert {c.activity_id for c in claims} == mine_ids
    stats = four.stats()
    assert stats["by_status"]["completed"] == 4 and stats["by_status"]["processing"] == 4


# --- 64-bit integers: "a 32- or 64-bit integer" -----------------------------------------


def test_a_partition_count_stored_as_int64_is_read_by_ours(backend):
    """Another program (Go's int64, Java's long) stores the count as a 64-bit integer."""
    from bson.int64 import Int64

    backend.maintenance.set_partitions(4)
    control = backend.db[f"runnerq_{backend.queue}_control"]
    control.update_one({"_id": "partitions"}, {"$set": {"count": Int64(4)}})
    assert mine.partition_count(backend.db, backend.queue) == 4
    fresh = backend.for_queue(backend.queue)
    aid = fresh.enqueue("job", {}, idempotency_key="k-1").activity_id
    doc = backend.db[f"runnerq_{backend.queue}_activities"].find_one({"_id": aid})
    assert doc is not None and doc["partition"] == mine.partition_of_key("job", "k-1", 4)


def test_an_int64_partition_and_claim_number_written_by_mine_are_read_by_ours(
        four, clock=None):
    from bson.int64 import Int64

    enq = mine.Enqueuer(four.db, four.queue, mine.ServerClock(four.db))
    aid = enq.enqueue("job", {"n": 1}).id
    acts = four.db[f"runnerq_{four.queue}_activities"]
    doc = acts.find_one({"_id": aid})
    assert doc is not None
    acts.update_one({"_id": aid}, {"$set": {"partition": Int64(doc["partition"])}})
    assert four.get_activity(aid).to_json()["partition"] == doc["partition"]
    claimed = mine.claim(four.db, four.queue, doc["partition"], "second-impl")
    assert claimed is not None and claimed["_id"] == aid
    assert mine.fail_for_good(four.db, four.queue, claimed, "no such file", "second-impl",
                              claim_number=Int64(claimed["claims"]))
    # Readers do not wait for the copy; the repair copies it.
    result = four.get_result(aid)
    assert result is not None and result.state == "Err"
    assert four.maintenance.repair_outboxes(grace_seconds=0) == 1
    assert "outbox" not in acts.find_one({"_id": aid})
    stored = four.db[f"runnerq_{four.queue}_results"].find_one({"_id": aid})
    assert stored is not None and stored["claim"] == claimed["claims"]
    assert [e.event_type for e in four.get_activity_events(aid)][:1] == ["Failed"]


# --- what counts as a malformed schedule: both sides agree -----------------------------

NAN = float("nan")
LONG = "x" * 201
_BASE = dict(every_seconds=60)
# (name, fields changed from a good interval schedule, or a cron one with "cron")
VARIANTS: list[tuple[str, dict[str, Any]]] = [
    ("good", {}),
    ("tz-empty", {"timezone": ""}),
    ("tz-slash", {"timezone": "/etc/UTC"}),
    ("tz-unknown", {"timezone": "Mars/Olympus"}),
    ("tz-berlin", {"timezone": "Europe/Berlin"}),
    ("missed-empty", {"missed": ""}),
    ("overlap-bad", {"overlap": "SKIP"}),
    ("prio-0", {"activity": {"activity_type": "report", "priority": 0}}),
    ("prio-5", {"activity": {"activity_type": "report", "priority": 5}}),
    ("prio-double", {"activity": {"activity_type": "report", "priority": 3.0}}),
    ("prio-text", {"activity": {"activity_type": "report", "priority": "3"}}),
    ("prio-int64", {"activity": {"activity_type": "report", "priority": "int64:3"}}),
    ("retries-neg", {"activity": {"activity_type": "report", "max_retries": -1}}),
    ("timeout-0", {"activity": {"activity_type": "report", "timeout_seconds": 0}}),
    ("timeout-double", {"activity": {"activity_type": "report", "timeout_seconds": 30.0}}),
    ("delay-neg", {"activity": {"activity_type": "report", "delay_seconds": -1}}),
    ("delay-nan", {"activity": {"activity_type": "report", "delay_seconds": NAN}}),
    ("type-blank", {"activity": {"activity_type": "   "}}),
    ("type-long", {"activity": {"activity_type": LONG}}),
    ("type-missing", {"activity": {"payload": {}}}),
    ("payload-list", {"activity": {"activity_type": "report", "payload": [1]}}),
    ("meta-int", {"activity": {"activity_type": "report", "metadata": {"a": 1}}}),
    ("meta-dollar", {"activity": {"activity_type": "report", "metadata": {"$a": "b"}}}),
    ("meta-dot", {"activity": {"activity_type": "report", "metadata": {"a.b": "c"}}}),
    ("template-extra", {"activity": {"activity_type": "report", "queue": 7}}),
    ("every-tiny", {"every_seconds": 0.0005}),
    ("every-bool", {"every_seconds": True}),
    ("every-text", {"every_seconds": "60"}),
    ("both", {"cron": "* * * * *"}),
    ("neither", {"every_seconds": None}),
    ("jitter-neg", {"jitter_seconds": -1}),
    ("jitter-big", {"jitter_seconds": 31_622_401}),
    ("grace-0", {"grace_seconds": 0}),
    ("grace-half", {"grace_seconds": 0.5}),
    ("catchup-0", {"max_catchup": 0}),
    ("catchup-1001", {"max_catchup": 1001}),
    ("catchup-double", {"max_catchup": 10.0}),
    ("paused-text", {"paused": "false"}),
    ("revision-double", {"revision": 1.0}),
    ("revision-missing", {"revision": None}),
    ("created-text", {"created_at": "2027-01-04"}),
    ("updated-text", {"updated_at": "yesterday"}),
    ("fires-double", {"fires": 1.0}),
    ("start-after-end", {"start_at": "T0+120", "end_at": "T0+60"}),
    ("last-fire-list", {"last_fire": []}),
    ("last-fire-no-at", {"last_fire": {"kind": "on_time"}}),
    ("last-fire-odd", {"last_fire": {"at": "T0", "kind": 5, "count": "x"}}),
    ("buffered-odd-kind", {"buffered": {"at": "T0+60", "kind": 7}}),
    ("buffered-list", {"buffered": [{"at": "T0+60"}]}),
    ("pause-reason-int", {"pause_reason": 5}),
    ("name-bad", {"_id": "bad name!"}),
    ("cron-feb30", {"every_seconds": None, "cron": "0 0 30 2 *"}),
    ("cron-reboot", {"every_seconds": None, "cron": "@reboot"}),
    ("cron-four", {"every_seconds": None, "cron": "* * * *"}),
    ("cron-DAILY", {"every_seconds": None, "cron": "@DAILY"}),
    ("cron-spaces", {"every_seconds": None, "cron": "  */5   *  * * * "}),
    ("cron-L", {"every_seconds": None, "cron": "0 0 L * *"}),
    ("cron-long", {"every_seconds": None, "cron": "0 " * 101}),
]


def _value(value: Any) -> Any:
    from bson.int64 import Int64

    if isinstance(value, str) and value.startswith("T0"):
        return T0 + timedelta(seconds=int(value[3:] or 0))
    if isinstance(value, str) and value.startswith("int64:"):
        return Int64(int(value[6:]))
    if isinstance(value, dict):
        return {k: _value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_value(v) for v in value]
    return value


@pytest.mark.parametrize("name,change", VARIANTS, ids=[v[0] for v in VARIANTS])
def test_both_sides_agree_on_what_makes_a_schedule_malformed(queue, at_t0, name, change):
    from runnerq_cli.backend.domain.schedules import Schedule as Ours

    doc: dict[str, Any] = {
        "_id": "s", "activity": {"activity_type": "report"}, "cron": None,
        "every_seconds": 60, "timezone": "UTC", "start_at": None, "end_at": None,
        "jitter_seconds": 0, "missed": "skip", "max_catchup": 10, "grace_seconds": 60,
        "overlap": "allow", "paused": False, "pause_reason": None, "created_at": T0,
        "updated_at": T0, "revision": 1, "next_fire_at": T0 + timedelta(seconds=60),
        "fires": 0, "missed_fires": 0, "skipped_fires": 0}
    doc.update(_value(change))
    schedules = queue.db[f"runnerq_{queue.queue}_schedules"]
    schedules.insert_one(doc)
    stored = schedules.find_one({"_id": doc["_id"]})
    assert stored is not None
    ours, problem = Ours.from_doc(stored)
    try:
        mine.Schedule.read(stored)
        mine_problem = None
    except mine.Malformed as exc:
        mine_problem = str(exc)
    assert (ours is None) == (mine_problem is not None), (problem, mine_problem)


# --- the instants of a fire -------------------------------------------------------------


@pytest.mark.parametrize("late", [0, 90], ids=["only-T", "timeline-after-T"])
def test_a_next_fire_off_the_timeline_is_fired_alike_by_both(queue, at_t0, late):
    """A `next_fire_at` another writer put off the timeline (every 60 s from T0, T at
    T0+30 s): both fire the same instants, so racing firers take the same keys."""
    for name in ("ours", "mine"):
        mine.insert_schedule(queue.db, queue.queue, name, "report", now=T0,
                             every_seconds=60, missed="all")
        queue.db[f"runnerq_{queue.queue}_schedules"].update_one(
            {"_id": name}, {"$set": {"next_fire_at": T0 + timedelta(seconds=30)}})
    at_t0.advance(30 + late)
    queue.schedules.fire_due()  # fires both; re-fire "mine" alone with mine
    queue.db[f"runnerq_{queue.queue}_activities"].delete_many(
        {"metadata.runnerq_schedule": "mine"})
    queue.db[f"runnerq_{queue.queue}_idempotency"].delete_many(
        {"key": {"$regex": "^schedule:mine:"}})
    queue.db[f"runnerq_{queue.queue}_schedules"].update_one(
        {"_id": "mine"}, {"$set": {"next_fire_at": T0 + timedelta(seconds=30),
                                   "fires": 0, "missed_fires": 0},
                          "$unset": {"last_fire": ""}})
    firer(queue, at_t0).fire_due()
    times = {n: [a["metadata"]["runnerq_fire_at"] for a in fired(queue, n)]
             for n in ("ours", "mine")}
    assert times["ours"] == times["mine"] and times["ours"]
    docs = {n: schedule_doc(queue, n) for n in ("ours", "mine")}
    for key in ("next_fire_at", "fires", "missed_fires"):
        assert docs["ours"][key] == docs["mine"][key], key


def test_missed_fires_of_one_fire_are_at_most_ten_thousand(queue, at_t0):
    """An outage of 10,001 instants of a `skip` schedule whose newest is late too."""
    queue.schedules.add(ScheduleDef("long", Template("report"), every_seconds=2,
                                    grace_seconds=1))
    at_t0.advance(2 * 10_001 + 1.5)
    assert queue.schedules.fire_due()["missed"] == 10_000
    assert schedule_doc(queue, "long")["missed_fires"] == 10_000
    assert not fired(queue, "long")


# --- trace context ------------------------------------------------------------------------

GOOD_PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
TRACE_VECTORS = [
    (GOOD_PARENT, "congo=t61rcWkgMzE"),
    (GOOD_PARENT.upper(), None),
    ("ff" + GOOD_PARENT[2:], None),
    ("00-" + "0" * 32 + GOOD_PARENT[35:], None),
    (GOOD_PARENT[:36] + "0" * 16 + "-01", None),
    (GOOD_PARENT + "-extra", None),
    ("01" + GOOD_PARENT[2:] + "-later-fields", "a=b"),
    ("01" + GOOD_PARENT[2:] + "-\rcarriage", None),
    ("01" + GOOD_PARENT[2:] + "-\nnewline", None),
    ("01" + GOOD_PARENT[2:] + "-" + "x" * 200, None),
    (GOOD_PARENT, "   "),
    (GOOD_PARENT, "a=b\tc"),
    (GOOD_PARENT, "x" * 513),
    (GOOD_PARENT, ""),
]


@pytest.mark.parametrize("parent,state", TRACE_VECTORS)
def test_both_sides_keep_and_drop_the_same_trace_contexts(parent, state):
    from runnerq_cli.backend.domain import traceparent

    given: dict[str, Any] = {"traceparent": parent}
    if state is not None:
        given["tracestate"] = state
    assert mine.checked_trace_context(parent, state) == traceparent.clean(given)


def test_ours_runs_mines_activity_in_the_trace_mine_passed(backend):
    sdk_trace = pytest.importorskip("opentelemetry.sdk.trace")
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from runnerq_cli.worker.engine import Worker
    from tests import worker_handlers

    exporter = InMemorySpanExporter()
    provider = sdk_trace.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    enq = mine.Enqueuer(backend.db, backend.queue, mine.ServerClock(backend.db))
    context = mine.checked_trace_context(GOOD_PARENT, "congo=t61rcWkgMzE")
    aid = enq.enqueue("echo", {"x": 1}, trace_context=context).id
    Worker(backend, worker_handlers.registry, burst=True, poll_interval=0.2,
           tracer_provider=provider).run(install_signals=False)
    assert backend.get_activity(aid).status == "completed"
    [span] = [s for s in exporter.get_finished_spans() if s.name == "process echo"]
    assert f"{span.context.trace_id:032x}" == GOOD_PARENT[3:35]
    assert span.parent is not None and f"{span.parent.span_id:016x}" == GOOD_PARENT[36:52]
    assert span.context.trace_state.to_header() == "congo=t61rcWkgMzE"


# --- the CLI sees what the second implementation wrote -----------------------------------


def test_cli_pause_stats_doctor_and_schedule_list_see_what_mine_wrote(backend, run_cli):
    import json

    assert run_cli("init-indexes", "--partitions", "4").code == 0
    db, q = backend.db, backend.queue
    enq = mine.Enqueuer(db, q, mine.ServerClock(db))
    for n in range(4):
        enq.enqueue("slow", {"n": n})
        enq.enqueue("fast", {"n": n}, idempotency_key=f"k{n}")
    now = mine.ServerClock(db)()
    mine.insert_schedule(db, q, "mine-hourly", "report", now=now, cron="0 * * * *")
    mine.insert_schedule(db, q, "mine-broken", "report", now=now - timedelta(minutes=2),
                         every_seconds=60)
    db[f"runnerq_{q}_schedules"].update_one({"_id": "mine-broken"},
                                            {"$set": {"timezone": "Mars/Olympus"}})
    assert mine.Firer(db, q, mine.ServerClock(db)).fire_due()["malformed"] == 1
    # Ours pauses a type; mine obeys it in every partition.
    assert run_cli("pause", "-t", "slow", "--reason", "deploy").code == 0
    assert mine.paused(db, q) == (False, ["slow"])
    claimed = [c for p in range(4)
               if (c := mine.claim(db, q, p, "second-impl")) is not None]
    assert claimed and all(c["activity_type"] == "fast" for c in claimed)
    while any((c := mine.claim(db, q, p, "second-impl")) for p in range(4)):
        assert c["activity_type"] == "fast"
    # The readers see the queue whole.
    stats = json.loads(run_cli("stats", "-o", "json").stdout)
    counts = stats["by_status"]
    assert counts["pending"] == 4 and counts.get("processing", counts.get("running")) == 4
    listed = json.loads(run_cli("schedule", "list", "-o", "json").stdout)
    rows = {r["name"]: r for r in (listed["schedules"] if isinstance(listed, dict) else listed)}
    assert rows["mine-broken"]["problem"] and not rows["mine-hourly"].get("problem")
    report = json.loads(run_cli("doctor", "-o", "json").stdout)
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["partitions"]["status"] == "ok", checks["partitions"]
    assert [a["schedule"] for a in checks["schedule documents"]["facts"]["set_aside"]] == [
        "mine-broken"]
    assert checks["pause"]["facts"]["paused"]["types"] == ["slow"]
    assert checks["coverage"]["status"] == "ok"


def test_the_scheduler_process_and_mine_racing_fire_each_instant_once(
        backend, run_cli, cli_env):
    """`runnerq-mongo scheduler` and the second implementation's firer both fire one
    schedule every 0.5 s for a few seconds, on the server's clock: every instant once."""
    import os
    import signal
    import subprocess
    import sys
    import time

    assert run_cli("schedule", "add", "race", "-t", "report", "--every", "0.5s",
                   "--missed", "all", "--max-catchup", "1000").code == 0
    proc = subprocess.Popen([sys.executable, "-m", "runnerq_cli", "scheduler",
                             "--interval", "0.1s"], env=cli_env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        own = mine.Firer(backend.db, backend.queue, mine.ServerClock(backend.db))
        mine_fired = 0
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            mine_fired += own.fire_due()["fired"]
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode in (0, 130, 143, -signal.SIGTERM), err
    own.fire_due()  # whatever came due since
    acts = fired(backend, "race")
    at = [datetime.fromisoformat(a["metadata"]["runnerq_fire_at"]) for a in acts]
    assert len(at) >= 4, os.linesep.join([str(at), err.decode()[-2000:]])
    assert len(set(at)) == len(at)
    assert all(b - a == timedelta(milliseconds=500) for a, b in itertools.pairwise(at))
    doc = schedule_doc(backend, "race")
    assert doc["fires"] == len(acts) and doc["missed_fires"] == 0
    print(f"mine won {mine_fired} of {len(acts)} fires")
    assert doc["next_fire_at"].replace(tzinfo=UTC) == at[-1] + timedelta(milliseconds=500)


def test_a_jittered_fire_of_mine_is_delayed_as_ours_delays_it(queue, at_t0):
    from runnerq_cli.backend.domain.schedules import jitter_for

    instant = datetime(2027, 3, 28, 1, 0, tzinfo=UTC)
    assert mine.jitter_of("nightly", instant, 60) == jitter_for("nightly", instant, 60) \
        == 10.076
    queue.schedules.add(ScheduleDef("j", Template("report", delay_seconds=1.5),
                                    every_seconds=60, jitter_seconds=30))
    at_t0.advance(60)
    firer(queue, at_t0).fire_due()
    [act] = fired(queue, "j")
    expected = 1.5 + jitter_for("j", T0 + timedelta(minutes=1), 30)
    assert act["status"] == "scheduled"
    delay = (act["scheduled_at"] - act["created_at"]).total_seconds()
    assert delay == pytest.approx(expected, abs=0.0015)
