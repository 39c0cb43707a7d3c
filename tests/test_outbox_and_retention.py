"""Crash safety of multi-collection writes (the outbox), and retention."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.backend.domain.derived import event_order
from runnerq_cli.backend.queue.queue import ActivitySpec
from tests.helpers import run_then_crash
from tests.waiting import wait_until


def stored_events(queue: RunnerQ, activity_id) -> list[str]:
    """What is in the events collection (steps the activity's fields prove are not)."""
    docs = queue.context.events.find({"activity_id": activity_id})
    return [d["event_type"] for d in sorted(docs, key=event_order)]


def shown_events(queue: RunnerQ, activity_id) -> list[str]:
    """What users see: stored and derived events, oldest first."""
    return [e.event_type for e in reversed(queue.get_activity_events(activity_id))]


def test_a_crash_after_the_commit_loses_nothing(queue: RunnerQ, settings, clock) -> None:
    # A writer dead-letters an activity, its copies (result, record, events) held in
    # memory, and dies before copying them out.
    activity_id = uuid.UUID(run_then_crash(settings, clock.now, """
        activity_id = q.enqueue("t", {"n": 1}, max_retries=1).activity_id
        claim = q.dequeue("w")[0]
        q.ack_failure(claim, "boom")
        out = activity_id
    """))

    # The activity's state is committed; the copies are not there yet ...
    assert queue.get_activity(activity_id).status == "dead_letter"
    assert stored_events(queue, activity_id) == []
    assert queue.context.dead_letter.count_documents({}) == 0
    # ... but readers already see them through the outbox.
    assert queue.get_result(activity_id).data == {"error": "boom", "type": "dead_letter"}
    assert shown_events(queue, activity_id) == ["Enqueued", "Dequeued", "Started", "DeadLetter"]

    # too young: its writer may be alive
    assert queue.maintenance.repair_outboxes(grace_seconds=60) == 0
    clock.advance(61)
    assert queue.maintenance.repair_outboxes(grace_seconds=60) == 1
    assert stored_events(queue, activity_id) == ["DeadLetter"]  # one event for the attempt
    assert shown_events(queue, activity_id) == ["Enqueued", "Dequeued", "Started", "DeadLetter"]
    assert queue.context.results.count_documents({"_id": activity_id}) == 1
    assert queue.context.dead_letter.count_documents({"_id": activity_id}) == 1
    assert "outbox" not in queue.context.activities.find_one({"_id": activity_id})


def test_a_flush_interrupted_half_way_is_replayed_without_duplicates(queue: RunnerQ, settings,
                                                                      clock) -> None:
    activity_id = uuid.UUID(run_then_crash(settings, clock.now, """
        activity_id = q.enqueue("t", {}, retry_delay_seconds=0).activity_id
        q.ack_failure(q.dequeue("w")[0], "first")  # retrying
        claim = q.dequeue("w")[0]
        q.ack_failure(claim, "fatal", retryable=False)
        out = activity_id
    """))
    doc = queue.context.activities.find_one({"_id": activity_id})
    # Half a flush: the events were copied, then the process died before the clear.
    events = [{**e, "activity_id": activity_id, "activity_type": "t", "ingested_at": clock.now}
              for e in doc["outbox"]["events"]]
    queue.context.events.insert_many(events)

    clock.advance(120)
    assert queue.maintenance.repair_outboxes() == 1
    assert stored_events(queue, activity_id) == ["Dequeued", "Started", "Retrying", "Failed"]
    assert shown_events(queue, activity_id) == [
        "Enqueued", "Dequeued", "Started", "Retrying", "Dequeued", "Started", "Failed"]
    assert queue.get_result(activity_id).data == {"error": "fatal", "type": "non_retryable"}


def test_buffered_outbox_drains_in_batches(queue: RunnerQ) -> None:
    with queue.buffered_outbox(size=1000):
        queue.enqueue_many([ActivitySpec("t", {"i": i}, max_retries=1) for i in range(5)])
        for claim in queue.dequeue("w", limit=5):
            queue.ack_failure(claim, f"e{claim.activity.payload['i']}")  # dead-letters
        assert queue.context.dead_letter.count_documents({}) == 0  # held in memory
        assert queue.context.results.count_documents({}) == 0
    assert queue.context.dead_letter.count_documents({}) == 5
    assert queue.context.results.count_documents({}) == 5
    assert queue.context.events.count_documents({"event_type": "DeadLetter"}) == 5
    assert queue.context.activities.count_documents({"outbox": {"$exists": True}}) == 0


def test_a_success_writes_its_result_and_no_event(queue: RunnerQ) -> None:
    queue.enqueue_many([ActivitySpec("t", {"i": i}) for i in range(5)])
    for claim in queue.dequeue("w", limit=5):
        queue.ack_success(claim, claim.activity.payload["i"])
    assert queue.context.results.count_documents({}) == 5
    # A success stores no event: Completed is derived from the activity's fields.
    assert queue.context.events.count_documents({}) == 0
    done = queue.inspector.list_page("completed", limit=10).items
    assert len(done) == 5
    assert all(shown_events(queue, a.id)[-2:] == ["Completed", "ResultStored"] for a in done)
    assert queue.context.activities.count_documents({"outbox": {"$exists": True}}) == 0


def test_one_event_per_lifecycle_step(queue: RunnerQ, clock) -> None:
    activity_id = queue.enqueue("t", {}, max_retries=3, retry_delay_seconds=1).activity_id
    queue.ack_failure(queue.dequeue("w1")[0], "first")
    clock.advance(2)
    queue.process_scheduled()
    claim = queue.dequeue("w2", lease_seconds=10)[0]
    queue.extend_lease(claim, 20)
    clock.advance(21)
    queue.requeue_expired()
    queue.ack_success(queue.dequeue("w3")[0], "done")
    assert shown_events(queue, activity_id) == [
        "Enqueued", "Dequeued", "Started", "Retrying",
        "Dequeued", "Started", "LeaseExtended", "Requeued",
        "Dequeued", "Started", "Completed", "ResultStored"]
    # Stored: what a later write overwrote (the ended attempts) and what no field proves.
    assert stored_events(queue, activity_id) == [
        "Dequeued", "Started", "Retrying", "Dequeued", "Started", "LeaseExtended", "Requeued"]
    events = queue.get_activity_events(activity_id)
    assert all(e.activity_type == "t" and e.timestamp for e in events)
    assert [e.worker_id for e in reversed(events) if e.event_type == "Started"] == [
        "w1", "w2", "w3"]
    assert [e.detail.get("attempt") for e in reversed(events) if e.event_type == "Started"] == [
        1, 2, 3]


def test_retention_purges_terminal_activities_with_their_results_and_events(
        queue: RunnerQ, clock) -> None:
    done = queue.enqueue("t", {}).activity_id
    queue.ack_success(queue.dequeue("w")[0], 1)
    failed = queue.enqueue("t", {}).activity_id
    queue.ack_failure(queue.dequeue("w")[0], "x", retryable=False)
    waiting = queue.enqueue("t", {}).activity_id
    clock.advance(queue.settings.retention_completed + 1)
    assert queue.maintenance.purge_expired() == {"completed": 1, "failed": 0}
    assert queue.context.activities.count_documents({"_id": done}) == 0
    assert queue.context.results.count_documents({"_id": done}) == 0
    assert queue.context.events.count_documents({"activity_id": done}) == 0
    clock.advance(queue.settings.retention_failed)
    assert queue.maintenance.purge_expired() == {"completed": 0, "failed": 1}
    assert queue.context.activities.count_documents({"_id": failed}) == 0
    # Pending work never ages out.
    assert queue.get_activity(waiting).status == "pending"


def test_init_indexes_is_idempotent_and_reports_conflicts(queue: RunnerQ) -> None:
    again = queue.maintenance.init_indexes()
    assert {r.state.value for r in again} == {"present"}
    names = {(r.collection_name, r.spec.name) for r in again}
    prefix = "runnerq_tests_"
    for expected in [
        ("activities", "priority_-1_created_at_1__id_1_status_1_pending"),
        ("activities", "scheduled_at_1__id_1_status_1_priority_1_activity_type_1_scheduled"),
        ("activities",
         "lease_deadline_1__id_1_status_1_priority_1_activity_type_1_processing"),
        ("activities", "idempotency_key_1"),
        ("results", "created_at_1"),
        ("idempotency", "created_at_1"),
        ("events", "activity_id_1_timestamp_-1"),
        ("events", "timestamp_1"),
    ]:
        assert (prefix + expected[0], expected[1]) in names

    indexes = {ix["name"]: ix for ix in queue.context.results.list_indexes()}
    assert indexes["created_at_1"]["expireAfterSeconds"] == 86400
    indexes = {ix["name"]: ix for ix in queue.context.events.list_indexes()}
    assert indexes["timestamp_1"]["expireAfterSeconds"] == 604800
    indexes = {ix["name"]: ix for ix in queue.context.activities.list_indexes()}
    assert indexes["idempotency_key_1"].get("sparse") is True

    # Another program made the results TTL a day longer: shown, never dropped.
    queue.context.results.drop_index("created_at_1")
    queue.context.results.create_index("created_at", expireAfterSeconds=172800)
    reports = {(r.collection_name, r.spec.name): r for r in queue.maintenance.init_indexes()}
    conflict = reports[(prefix + "results", "created_at_1")]
    assert conflict.state.value == "conflict"
    assert "expireAfterSeconds" in conflict.difference
    indexes = {ix["name"]: ix for ix in queue.context.results.list_indexes()}
    assert indexes["created_at_1"]["expireAfterSeconds"] == 172800


def test_ttl_indexes_expire_documents(queue: RunnerQ, server) -> None:
    if server.real_mongodb:
        pytest.skip("a real server's TTL monitor runs every 60 s; index options are "
                    "checked in test_init_indexes_is_idempotent_and_reports_conflicts")
    old = queue.context.clock() - timedelta(days=2)
    queue.context.results.insert_one({"_id": "old", "created_at": old})
    queue.context.results.insert_one({"_id": "new", "created_at": queue.context.clock()})
    wait_until(lambda: queue.context.results.count_documents({"_id": "old"}) == 0,
               timeout=10, interval=0.2, message="the TTL monitor to remove the old result")
    assert queue.context.results.count_documents({"_id": "new"}) == 1


def test_a_late_flush_does_not_bring_back_what_an_operator_withdrew(queue, settings, clock):
    """A worker dead-letters an activity but its copies wait in its buffer; an
    operator redrives the activity meanwhile. The worker's late flush must not
    re-create the dead-letter record nor show the old result."""
    worker_side = RunnerQ(settings, clock=clock)
    activity_id = queue.enqueue("t", {}, max_retries=1).activity_id
    with worker_side.buffered_outbox(size=100):
        claim = worker_side.dequeue("w")[0]
        worker_side.ack_failure(claim, "gone")  # dead-lettered; copies buffered
        assert queue.operator.redrive().count == 1  # the operator, in another process
    assert queue.get_activity(activity_id).status == "pending"
    assert queue.context.dead_letter.count_documents({"_id": activity_id}) == 0
    assert queue.get_result(activity_id) is None  # pending again: no result yet
    # The history is whole: the dead-lettering and the redrive are both recorded.
    types = [e.event_type for e in queue.get_activity_events(activity_id)]
    assert "DeadLetter" in types and "Redriven" in types


def test_a_retried_activity_has_no_result_until_it_ends_again(queue) -> None:
    activity_id = queue.enqueue("t", {}).activity_id
    queue.ack_failure(queue.dequeue("w")[0], "bad", retryable=False)
    assert queue.get_result(activity_id).state == "Err"
    queue.operator.retry(activity_id)
    assert queue.get_result(activity_id) is None
    queue.ack_success(queue.dequeue("w")[0], "fine")
    assert queue.get_result(activity_id).data == "fine"


def test_a_retried_then_cancelled_activity_shows_no_earlier_result(queue) -> None:
    """The result of the run before the retry is not its result (`result`/`wait` said
    "failed", exit 10, not 12): a cancelled activity's result is its cancellation."""
    activity_id = queue.enqueue("t", {}).activity_id
    queue.ack_failure(queue.dequeue("w")[0], "bad", retryable=False)
    queue.operator.retry(activity_id)
    queue.operator.cancel(activity_id)
    assert queue.get_result(activity_id).data["type"] == "cancelled"
    queue.flush_outbox()  # copied out, the cancellation's result replaces the failure's
    assert queue.get_result(activity_id).data["type"] == "cancelled"


def test_a_stale_buffered_outbox_flush_never_clears_a_newer_outbox(settings, clock):
    """outbox.seq restarts at 1 after every clear, so a late flush of an old snapshot
    (a stalled worker) matched a newer outbox with the same seq and cleared it unread:
    the new claimer's Dequeued/Started events were lost."""
    producer = RunnerQ(settings, clock=clock)
    producer.maintenance.init_indexes()
    stalled = RunnerQ(settings, clock=clock)
    other = RunnerQ(settings, clock=clock)
    aid = producer.enqueue("job", {}).activity_id
    with stalled.buffered_outbox(100):
        [old] = stalled.dequeue("w-stalled", lease_seconds=5)  # snapshot buffered, seq 1
        clock.advance(6)
        assert producer.requeue_expired()["requeued"] == 1  # copies + clears that outbox
        clock.advance(1)
        with other.buffered_outbox(100):
            [new] = other.dequeue("w-new", lease_seconds=30)  # a new outbox, seq 1 again
            stalled.flush_outbox()  # the stalled worker's late flush
            other.ack_success(new, {"ok": True})
    started_by_new = [e.event_type for e in producer.get_activity_events(aid)
                      if e.worker_id == "w-new"]
    assert {"Dequeued", "Started", "Completed"} <= set(started_by_new)
    assert old.lease_id != new.lease_id


def test_get_result_prefers_the_newer_result_still_in_the_outbox(queue):
    """After a retry, the old Err result is stored; the new run's Ok result waits in the
    outbox of a buffering worker. get_result (and so `wait`/`result`) showed the old one."""
    aid = queue.enqueue("job", {}).activity_id
    [claim] = queue.dequeue("w1")
    queue.ack_failure(claim, "bad input", retryable=False)
    assert queue.get_result(aid).state == "Err"
    queue.operator.retry(aid)
    with queue.buffered_outbox(100):
        [claim] = queue.dequeue("w2")
        queue.ack_success(claim, {"second": "run"})
        result = queue.get_result(aid)
    assert (result.state, result.data) == ("Ok", {"second": "run"})


def test_a_copy_overtaken_by_an_operator_leaves_no_dead_letter_record(queue, monkeypatch):
    """The operator retries between the flush's check and its copy: the record the late
    copy writes is withdrawn (the retry already removed the activity's record)."""
    from runnerq_cli.backend.store.writes import OutboxWriter

    aid = queue.enqueue("a", {}, max_retries=1).activity_id
    claim = queue.dequeue("w")[0]
    original = OutboxWriter._still_current
    raced = []

    def racing(self, docs):
        current = original(self, docs)
        if not raced:
            raced.append(True)
            queue.operator.retry(aid)
        return current

    with queue.buffered_outbox(64):
        queue.ack_failure(claim, "boom")  # dead-lettered; its copy buffered
        monkeypatch.setattr(OutboxWriter, "_still_current", racing)
    assert raced
    assert queue.get_activity(aid).status == "pending"
    assert queue.context.dead_letter.find_one({"_id": aid}) is None
