"""Event histories as users see them, now that derivable steps are not stored.

For every way an activity's life can go, `events ID` (the backend's event
list) and the tail (the event stream, from the start and resumed at every
point) show the same lifecycle steps, in order, each once; and data written
by the previous version (every step stored, its indexes, outboxes in flight)
reads the same after an upgrade.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import timedelta

import pytest
from bson import ObjectId

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.backend.domain.event_cursor import EventCursor, EventFilter
from runnerq_cli.backend.queue.queue import ActivitySpec

ENQUEUE = ["Enqueued"]
ATTEMPT = ["Dequeued", "Started"]
SUCCESS = ["Completed", "ResultStored"]


def shown(queue: RunnerQ, aid: uuid.UUID) -> list[str]:
    return [e.event_type for e in reversed(queue.get_activity_events(aid))]


def tailed(queue: RunnerQ, cursor: EventCursor | None = None,
           filters: EventFilter | None = None) -> tuple[list, EventCursor]:
    stream = queue.event_stream(cursor=cursor, filters=filters, follow=False)
    return list(stream), stream.cursor


def run_success(queue: RunnerQ, clock) -> uuid.UUID:
    aid = queue.enqueue("job", {}).activity_id
    clock.advance(1)
    claim = queue.dequeue("w1")[0]
    clock.advance(1)
    queue.ack_success(claim, {"ok": True})
    return aid


def run_retry_then_success(queue: RunnerQ, clock) -> uuid.UUID:
    aid = queue.enqueue("job", {}, retry_delay_seconds=1).activity_id
    clock.advance(1)
    queue.ack_failure(queue.dequeue("w1")[0], "flaky")
    clock.advance(3)
    queue.process_scheduled()
    clock.advance(1)
    queue.ack_success(queue.dequeue("w2")[0], 2)
    return aid


def run_dead_letter(queue: RunnerQ, clock) -> uuid.UUID:
    aid = queue.enqueue("job", {}, max_retries=2, retry_delay_seconds=0).activity_id
    clock.advance(1)
    queue.ack_failure(queue.dequeue("w1")[0], "first")
    clock.advance(1)
    queue.ack_failure(queue.dequeue("w2")[0], "second")
    return aid


def run_lease_expiry(queue: RunnerQ, clock) -> uuid.UUID:
    aid = queue.enqueue("job", {}).activity_id
    clock.advance(1)
    claim = queue.dequeue("w1", lease_seconds=10)[0]
    clock.advance(3)
    queue.extend_lease(claim, 10)
    clock.advance(11)
    assert queue.requeue_expired() == {"requeued": 1, "dead_lettered": 0, "malformed": 0}
    clock.advance(1)
    queue.ack_success(queue.dequeue("w2")[0], None)
    return aid


def run_operator_actions(queue: RunnerQ, clock) -> uuid.UUID:
    aid = queue.enqueue("job", {}, delay_seconds=60, priority="low").activity_id
    clock.advance(1)
    queue.operator.set_priority(aid, "high")
    clock.advance(1)
    queue.operator.run_now(aid)
    clock.advance(1)
    queue.ack_failure(queue.dequeue("w1")[0], "fatal", retryable=False)
    clock.advance(1)
    queue.operator.retry(aid)
    clock.advance(1)
    queue.ack_success(queue.dequeue("w2")[0], "second run")
    return aid


SCENARIOS: dict[str, tuple[Callable[[RunnerQ, object], uuid.UUID], list[str]]] = {
    "success": (run_success, ENQUEUE + ATTEMPT + SUCCESS),
    "retry then success": (run_retry_then_success,
                           ENQUEUE + ATTEMPT + ["Retrying"] + ATTEMPT + SUCCESS),
    "dead letter": (run_dead_letter, ENQUEUE + ATTEMPT + ["Retrying"] + ATTEMPT + ["DeadLetter"]),
    "lease expiry": (run_lease_expiry,
                     ENQUEUE + ATTEMPT + ["LeaseExtended", "Requeued"] + ATTEMPT + SUCCESS),
    "operator actions": (run_operator_actions,
                         ["Scheduled", "PriorityChanged", "RunNow", *ATTEMPT, "Failed",
                          "Retried", *ATTEMPT, *SUCCESS]),
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_event_list_and_tail_show_every_step_once(queue: RunnerQ, clock, name: str) -> None:
    run, expected = SCENARIOS[name]
    aid = run(queue, clock)
    queue.flush_outbox()
    assert shown(queue, aid) == expected
    events, _ = tailed(queue)
    assert [e.event_type for e in events] == expected
    assert len({str(e.id) for e in events}) == len(events)
    assert all(e.activity_id == aid and e.activity_type == "job" for e in events)
    stamps = [e.timestamp for e in events]
    assert stamps == sorted(stamps)
    # The event list and the tail agree on ids and fields, not only on types.
    listed = list(reversed(queue.get_activity_events(aid)))
    assert [e.to_json() for e in events] == [e.to_json() for e in listed]


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_tail_resumed_at_any_point_neither_loses_nor_repeats(queue: RunnerQ, clock,
                                                             name: str) -> None:
    run, _ = SCENARIOS[name]
    run(queue, clock)
    queue.flush_outbox()
    everything, _ = tailed(queue)
    for cut in range(len(everything)):
        stream = queue.event_stream(follow=False)
        head = []
        for event in stream:
            head.append(event)
            if len(head) == cut:
                break
        rest, _ = tailed(queue, EventCursor.decode(stream.cursor.encode()))
        assert [str(e.id) for e in head + rest] == [str(e.id) for e in everything], cut


def test_steps_are_shown_as_they_happen_and_not_again_later(queue: RunnerQ, clock) -> None:
    """A live tail sees each step once, though later writes store some of them again."""
    aid = queue.enqueue("job", {}, retry_delay_seconds=0).activity_id
    seen, cursor = tailed(queue)
    claim = queue.dequeue("w1")[0]
    clock.advance(5)
    more, cursor = tailed(queue, cursor)
    seen += more
    queue.ack_failure(claim, "oops")  # stores the attempt's Dequeued/Started (original time)
    clock.advance(5)
    more, cursor = tailed(queue, cursor)
    seen += more
    queue.ack_success(queue.dequeue("w2")[0], 1)
    clock.advance(5)
    more, _ = tailed(queue, cursor)
    seen += more
    assert [e.event_type for e in seen] == ENQUEUE + ATTEMPT + ["Retrying"] + ATTEMPT + SUCCESS
    assert shown(queue, aid) == [e.event_type for e in seen]


def test_filters_apply_to_derived_steps(queue: RunnerQ, clock) -> None:
    run_retry_then_success(queue, clock)
    queue.enqueue("other", {})
    got = lambda f: [e.event_type for e in tailed(queue, filters=f)[0]]  # noqa: E731
    assert got(EventFilter(event_types=("Started",))) == ["Started", "Started"]
    assert got(EventFilter(event_types=("Retrying", "Completed"))) == ["Retrying", "Completed"]
    assert got(EventFilter(worker_id="w2")) == ATTEMPT + SUCCESS
    assert got(EventFilter(activity_types=("other",))) == ["Enqueued"]


def test_tail_since_is_exact_on_derived_steps(queue: RunnerQ, clock) -> None:
    run_success(queue, clock)
    start = clock() - timedelta(seconds=1)  # the claim's time: Dequeued, Started and later
    events, _ = tailed(queue, EventCursor.starting_at(start))
    assert [e.event_type for e in events] == ATTEMPT + SUCCESS


# ------------------------------------------------------- the previous version's data


def legacy_event(queue: RunnerQ, aid, event_type: str, when, worker=None, **detail) -> dict:
    """An event as version 0.1 stored it (every step, a fresh ObjectId)."""
    return {"_id": ObjectId(), "activity_id": aid, "activity_type": "job", "timestamp": when,
            "event_type": event_type, "worker_id": worker, "detail": detail,
            "ingested_at": when}


def legacy_activity(queue: RunnerQ, clock, status: str) -> uuid.UUID:
    """An activity written by version 0.1: its document and its stored events."""
    aid = uuid.uuid4()
    created = clock()
    doc = {"_id": aid, "activity_type": "job", "payload": {}, "priority": 2, "status": status,
           "created_at": created, "retry_count": 0, "max_retries": 3, "timeout_seconds": 300,
           "retry_delay_seconds": 1, "metadata": {}}
    events = [legacy_event(queue, aid, "Enqueued", created, priority=2)]
    started = created + timedelta(seconds=1)
    if status in ("processing", "completed"):
        doc.update(started_at=started)
        events += [legacy_event(queue, aid, "Dequeued", started, "old-worker"),
                   legacy_event(queue, aid, "Started", started, "old-worker")]
    if status == "processing":
        doc.update(worker_id="old-worker", lease_id="old-lease",
                   lease_deadline=started + timedelta(seconds=30))
    if status == "completed":
        done = started + timedelta(seconds=1)
        doc.update(completed_at=done, last_lease_id="old-lease", last_outcome="completed")
        # Its last copies were still in flight (an outbox) when the old worker stopped.
        doc["outbox"] = {"seq": 1, "since": done, "events": [
            {k: v for k, v in legacy_event(queue, aid, t, done, "old-worker").items()
             if k not in ("activity_id", "activity_type", "ingested_at")}
            for t in ("Completed", "ResultStored")],
            "result": {"state": "Ok", "data": "old", "created_at": done}}
    queue.context.activities.insert_one(doc)
    queue.context.events.insert_many(events)
    return aid


@pytest.mark.parametrize("partitions", [1])  # 0.1 data has no partition
def test_previous_version_data_reads_the_same_after_an_upgrade(queue: RunnerQ, clock) -> None:
    done = legacy_activity(queue, clock, "completed")
    clock.advance(1)
    running = legacy_activity(queue, clock, "processing")
    clock.advance(1)
    waiting = legacy_activity(queue, clock, "pending")
    assert shown(queue, done) == ENQUEUE + ATTEMPT + SUCCESS  # outbox events included once
    assert shown(queue, running) == ENQUEUE + ATTEMPT
    assert shown(queue, waiting) == ENQUEUE
    assert queue.get_result(done).data == "old"

    clock.advance(120)
    # the old worker's outbox, copied by the new version
    assert queue.maintenance.repair_outboxes() == 1
    assert shown(queue, done) == ENQUEUE + ATTEMPT + SUCCESS
    assert queue.get_result(done).data == "old"

    # The old worker is gone: the new reaper requeues its claim, a new worker finishes it.
    assert queue.requeue_expired() == {"requeued": 1, "dead_lettered": 0, "malformed": 0}
    claim = queue.dequeue("new-worker")[0]  # the oldest pending: the requeued one
    assert claim.activity_id == running
    queue.ack_success(claim, "new")
    queue.flush_outbox()
    assert shown(queue, running) == ENQUEUE + ATTEMPT + ["Requeued"] + ATTEMPT + SUCCESS
    assert queue.get_result(running).data == "new"

    events, _ = tailed(queue)
    per_activity: dict = {}
    for event in events:
        per_activity.setdefault(event.activity_id, []).append(event.event_type)
    assert per_activity[done] == shown(queue, done)
    assert per_activity[running] == shown(queue, running)
    assert len({str(e.id) for e in events}) == len(events)


# ---------------------------------------------- edges found in review (each failed before)


def drained(queue: RunnerQ, cursor: EventCursor | None = None, batch_size: int = 500
            ) -> tuple[list, EventCursor]:
    stream = queue.event_stream(cursor=cursor, follow=False)
    stream.batch_size = batch_size
    return list(stream), stream.cursor


@pytest.mark.parametrize(("many", "batch"),
                         [(5, 2), pytest.param(600, 500, marks=pytest.mark.proof)])
def test_a_time_shared_by_more_than_a_batch_loses_nothing(queue: RunnerQ, clock, many: int,
                                                          batch: int) -> None:
    """enqueue_many stamps one created_at on every activity: a tie wider than a batch."""
    queue.enqueue_many([ActivitySpec("a", {"i": i}) for i in range(many)])
    clock.advance(10)
    queue.enqueue("b", {})
    clock.advance(0.01)
    queue.dequeue("w", types=["b"])
    events, _ = drained(queue, batch_size=batch)
    assert sum(e.event_type == "Enqueued" for e in events) == many + 1
    assert len({str(e.id) for e in events}) == len(events)


def test_an_ended_attempt_is_shown_though_its_copy_lags(queue: RunnerQ, clock) -> None:
    """The attempt's steps wait in the outbox (a buffering or crashed worker) while the
    tail moves on: they are read from there, at their own time."""
    _, cursor = drained(queue)
    aid = queue.enqueue("a", {}).activity_id
    clock.advance(1)
    with queue.buffered_outbox(64, drain=False):
        claim = queue.dequeue("w")[0]
        clock.advance(0.1)
        queue.ack_failure(claim, "boom")  # retryable: clears started_at
    clock.advance(5)
    queue.enqueue("b", {})
    first, cursor = drained(queue, cursor)
    clock.advance(0.5)
    queue.flush_outbox()
    second, _ = drained(queue, cursor)
    kinds = [e.event_type for e in first + second if e.activity_id == aid]
    assert kinds == ["Enqueued", "Dequeued", "Started", "Retrying"]


def test_the_enqueue_step_does_not_change_while_a_later_write_waits_in_the_outbox(
        queue: RunnerQ, clock) -> None:
    _, cursor = drained(queue)
    aid = queue.enqueue("a", {}).activity_id
    first, cursor = drained(queue, cursor)
    clock.advance(0.2)
    with queue.buffered_outbox(64, drain=False):
        claim = queue.dequeue("w")[0]
        clock.advance(0.1)
        queue.ack_failure(claim, "boom")  # a back-off: scheduled_at set, Retrying buffered
        second, cursor = drained(queue, cursor)
    queue.flush_outbox()
    third, _ = drained(queue, cursor)
    kinds = [e.event_type for e in first + second + third if e.activity_id == aid]
    assert kinds == ["Enqueued", "Dequeued", "Started", "Retrying"]


def test_a_missing_previous_scheduled_at_means_none(queue: RunnerQ, clock) -> None:
    """Another program that omits a null `previous_scheduled_at` (details omit absent
    values) in its Requeued: a pending activity that was never delayed at enqueue and still
    carries a `scheduled_at` reads as Enqueued, not Scheduled."""
    aid = queue.enqueue("job", {}).activity_id
    acts, events = queue.context.activities, queue.context.events
    later = clock() + timedelta(seconds=30)
    acts.update_one({"_id": aid}, {"$set": {"status": "pending", "scheduled_at": later}})
    for kind, detail in (("Requeued", {"reason": "lease_expired", "attempt": 1}),):
        events.insert_one({"_id": ObjectId(), "activity_id": aid, "activity_type": "job",
                           "timestamp": clock(), "event_type": kind, "worker_id": "other",
                           "detail": detail, "ingested_at": clock()})
    assert [e.event_type for e in queue.get_activity_events(aid)][-1] == "Enqueued"
