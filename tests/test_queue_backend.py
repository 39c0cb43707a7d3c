"""The queue operations of docs/design.md against a real server, through the backend API."""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta

import pytest

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.backend.domain.models import AckOutcome, Priority, Status
from runnerq_cli.backend.queue.queue import ActivitySpec
from runnerq_cli.cli.exits import ExitCode, exit_code_of
from runnerq_cli.errors import CheckpointConflict, ClaimLost, InvalidArgument, NotFound

# The claim order across the whole queue holds in one partition only; a partitioned
# queue keeps it within each partition (docs/design.md, "Partitions": Order;
# tests/test_partitions.py).
ONE_PARTITION = pytest.mark.parametrize("partitions", [1])


def raw(queue: RunnerQ, activity_id: uuid.UUID) -> dict:
    return queue.context.activities.find_one({"_id": activity_id})


def event_types(queue: RunnerQ, activity_id: uuid.UUID) -> list[str]:
    """The events of one activity as users see them (stored and derived), oldest first."""
    return [e.event_type for e in reversed(queue.get_activity_events(activity_id))]


# ------------------------------------------------------------------ enqueue


@pytest.mark.partitioned
def test_enqueue_stores_the_design_document(queue: RunnerQ, clock) -> None:
    result = queue.enqueue("email", {"to": "a@example.com"}, priority="high", max_retries=5,
                           timeout_seconds=30, retry_delay_seconds=2, metadata={"team": "ops"})
    doc = raw(queue, result.activity_id)
    assert isinstance(doc["_id"], uuid.UUID) and doc["_id"].version == 4
    assert doc["activity_type"] == "email"
    assert doc["payload"] == {"to": "a@example.com"}
    assert doc["priority"] == 3
    assert doc["status"] == "pending"
    assert doc["created_at"] == clock.now
    assert doc["retry_count"] == 0 and doc["max_retries"] == 5
    assert doc["timeout_seconds"] == 30 and doc["retry_delay_seconds"] == 2
    assert doc["metadata"] == {"team": "ops"}
    assert "outbox" not in doc  # copied out and cleared
    assert event_types(queue, result.activity_id) == ["Enqueued"]


def test_uuid_is_stored_as_binary_subtype_4(queue: RunnerQ) -> None:
    from bson.raw_bson import RawBSONDocument

    result = queue.enqueue("t", {})
    raw_doc = queue.context.activities.with_options(
        codec_options=queue.context.activities.codec_options.with_options(
            document_class=RawBSONDocument)).find_one({"_id": result.activity_id})
    raw_id = raw_doc.raw[raw_doc.raw.index(b"_id\x00") + 4:]
    assert raw_id[4] == 4  # BSON binary subtype 4: standard UUID


def test_delayed_enqueue_is_scheduled(queue: RunnerQ, clock) -> None:
    result = queue.enqueue("t", {}, delay_seconds=30)
    doc = raw(queue, result.activity_id)
    assert doc["status"] == "scheduled"
    assert doc["scheduled_at"] == clock.now + timedelta(seconds=30)
    assert event_types(queue, result.activity_id) == ["Scheduled"]


@pytest.mark.parametrize("bad", [
    {"activity_type": ""},
    {"activity_type": "t", "payload": [1, 2]},
    {"activity_type": "t", "priority": "urgent"},
    {"activity_type": "t", "delay_seconds": -1},
    {"activity_type": "t", "max_retries": -1},
    {"activity_type": "t", "timeout_seconds": 0},
    {"activity_type": "t", "metadata": {"a": 1}},
])
def test_invalid_enqueue_is_refused_and_writes_nothing(queue: RunnerQ, bad: dict) -> None:
    with pytest.raises(InvalidArgument):
        queue.enqueue(ActivitySpec(**bad))
    assert queue.context.activities.count_documents({}) == 0


# -------------------------------------------------------------------- claim


@ONE_PARTITION
def test_claim_order_is_priority_then_age(queue: RunnerQ, clock) -> None:
    ids = {}
    for name, priority in [("low", 1), ("normal-old", 2), ("critical", 4), ("normal-new", 2),
                           ("high", 3)]:
        ids[name] = queue.enqueue("t", {"n": name}, priority=priority).activity_id
        clock.advance(1)
    order = [queue.dequeue("w")[0].activity_id for _ in range(5)]
    assert order == [ids[n] for n in ["critical", "high", "normal-old", "normal-new", "low"]]
    assert queue.dequeue("w") == []


def test_claim_sets_the_lease(queue: RunnerQ, clock) -> None:
    queue.enqueue("t", {})
    claim = queue.dequeue("worker-1", lease_seconds=45)[0]
    doc = raw(queue, claim.activity_id)
    assert doc["status"] == "processing"
    assert doc["worker_id"] == "worker-1"
    assert doc["lease_id"] == claim.lease_id
    assert doc["lease_deadline"] == clock.now + timedelta(seconds=45) == claim.lease_deadline
    assert doc["started_at"] == clock.now
    assert event_types(queue, claim.activity_id) == ["Enqueued", "Dequeued", "Started"]


@pytest.mark.partitioned
def test_claim_limited_to_types(queue: RunnerQ) -> None:
    queue.enqueue("a", {}, priority="critical")
    b = queue.enqueue("b", {}).activity_id
    claims = queue.dequeue("w", types=["b", "c"], limit=5)
    assert [c.activity_id for c in claims] == [b]
    assert queue.dequeue("w", types=["c"]) == []


def test_each_claim_gets_a_new_lease_token(queue: RunnerQ, clock) -> None:
    queue.enqueue("t", {}, retry_delay_seconds=0)
    first = queue.dequeue("w")[0]
    queue.ack_failure(first, "boom")
    second = queue.dequeue("w")[0]
    assert second.activity_id == first.activity_id
    assert second.lease_id != first.lease_id


@pytest.mark.partitioned
def test_threads_claiming_at_once_never_share_an_activity(queue: RunnerQ) -> None:
    queue.enqueue_many([ActivitySpec("t", {"i": i}) for i in range(40)])
    claimed: list[uuid.UUID] = []
    lock = threading.Lock()
    start = threading.Barrier(8)

    def claimer(n: int) -> None:
        start.wait()
        while True:
            got = queue.dequeue(f"w{n}")
            if not got:
                return
            with lock:
                claimed.append(got[0].activity_id)

    threads = [threading.Thread(target=claimer, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert len(claimed) == 40
    assert len(set(claimed)) == 40


# ------------------------------------------------------------- acknowledge


@pytest.mark.partitioned
def test_success_completes_and_stores_the_result(queue: RunnerQ, clock) -> None:
    queue.enqueue("t", {})
    claim = queue.dequeue("w")[0]
    clock.advance(2)
    assert queue.ack_success(claim, {"sent": True}) is AckOutcome.COMPLETED
    doc = raw(queue, claim.activity_id)
    assert doc["status"] == "completed"
    assert doc["completed_at"] == clock.now
    for lease_field in ("worker_id", "lease_id", "lease_deadline"):
        assert lease_field not in doc
    result = queue.get_result(claim.activity_id)
    assert (result.state, result.data) == ("Ok", {"sent": True})
    assert event_types(queue, claim.activity_id) == [
        "Enqueued", "Dequeued", "Started", "Completed", "ResultStored"]


def test_a_null_result_is_a_result(queue: RunnerQ) -> None:
    queue.enqueue("t", {})
    claim = queue.dequeue("w")[0]
    queue.ack_success(claim, None)
    result = queue.get_result(claim.activity_id)
    assert result is not None
    assert result.state == "Ok" and result.data is None
    assert queue.get_result(uuid.uuid4()) is None


@pytest.mark.partitioned
def test_acking_twice_is_harmless_and_answers_the_same(queue: RunnerQ) -> None:
    queue.enqueue("t", {})
    claim = queue.dequeue("w")[0]
    assert queue.ack_success(claim, {"n": 1}) is AckOutcome.COMPLETED
    assert queue.ack_success(claim, {"n": 1}) is AckOutcome.COMPLETED  # says the same
    # Says something else: RunnerQ's checkpoint_conflict (not a lost claim), never dropped
    # silently, and the first value stays.
    with pytest.raises(CheckpointConflict) as conflict:
        queue.ack_success(claim, {"n": 2})
    assert not isinstance(conflict.value, ClaimLost)
    assert exit_code_of(conflict.value) is ExitCode.CHECKPOINT_CONFLICT == 16
    [answer] = queue.activities.ack_success_many([(claim, {"n": 3})])  # the batch path too
    assert isinstance(answer, CheckpointConflict)
    with pytest.raises(ClaimLost):
        queue.ack_failure(claim, "late failure")
    assert queue.get_result(claim.activity_id).data == {"n": 1}
    assert event_types(queue, claim.activity_id).count("Completed") == 1

    queue.enqueue("u", {}, max_retries=1)
    failing = queue.dequeue("w")[0]
    assert queue.ack_failure(failing, "x") is AckOutcome.DEAD_LETTERED
    assert queue.ack_failure(failing, "x") is AckOutcome.DEAD_LETTERED
    assert queue.context.dead_letter.count_documents({}) == 1


@pytest.mark.partitioned
def test_retryable_failure_schedules_a_retry_with_backoff(queue: RunnerQ, clock) -> None:
    queue.enqueue("t", {}, max_retries=3, retry_delay_seconds=5)
    claim = queue.dequeue("w")[0]
    assert queue.ack_failure(claim, "smtp down") is AckOutcome.RETRYING
    doc = raw(queue, claim.activity_id)
    assert doc["status"] == "scheduled"
    assert doc["retry_count"] == 1
    assert doc["scheduled_at"] == clock.now + timedelta(seconds=10)  # 5 × 2^(0+1)
    assert doc["last_error"] == "smtp down" and doc["last_error_at"] == clock.now
    assert "lease_id" not in doc
    assert queue.get_activity(claim.activity_id).display_status == "retrying"
    # One event per finished attempt: Retrying alone (no Failed: it will run again).
    assert event_types(queue, claim.activity_id) == [
        "Enqueued", "Dequeued", "Started", "Retrying"]

    clock.advance(9)
    assert queue.process_scheduled() == 0
    clock.advance(1)
    assert queue.process_scheduled() == 1
    second = queue.dequeue("w")[0]
    queue.ack_failure(second, "still down")
    assert raw(queue, claim.activity_id)["scheduled_at"] == clock.now + timedelta(seconds=20)


def test_zero_retry_delay_retries_at_once(queue: RunnerQ) -> None:
    queue.enqueue("t", {}, retry_delay_seconds=0)
    claim = queue.dequeue("w")[0]
    queue.ack_failure(claim, "x")
    assert raw(queue, claim.activity_id)["status"] == "pending"
    assert queue.dequeue("w")[0].activity_id == claim.activity_id


@pytest.mark.partitioned
def test_dead_letter_after_the_last_attempt(queue: RunnerQ, clock) -> None:
    activity_id = queue.enqueue("t", {"k": 1}, max_retries=2, retry_delay_seconds=0).activity_id
    assert queue.ack_failure(queue.dequeue("w")[0], "first") is AckOutcome.RETRYING
    claim = queue.dequeue("w")[0]
    assert queue.ack_failure(claim, "second") is AckOutcome.DEAD_LETTERED
    doc = raw(queue, activity_id)
    assert doc["status"] == "dead_letter"
    assert doc["retry_count"] == 1  # terminal outcomes do not increment
    assert doc["completed_at"] == clock.now
    record = queue.context.dead_letter.find_one({"_id": activity_id})
    assert record["error"] == "second" and record["failed_at"] == clock.now
    assert record["activity"]["payload"] == {"k": 1}
    result = queue.get_result(activity_id)
    assert result.state == "Err"
    assert result.data == {"error": "second", "type": "dead_letter"}
    assert [r.activity.id for r in queue.list_dead_letter()] == [activity_id]
    assert event_types(queue, activity_id) == [
        "Enqueued", "Dequeued", "Started", "Retrying", "Dequeued", "Started", "DeadLetter"]


def test_non_retryable_failure_is_terminal_whatever_the_attempts(queue: RunnerQ, clock) -> None:
    activity_id = queue.enqueue("t", {}, max_retries=0).activity_id  # unlimited attempts
    claim = queue.dequeue("w")[0]
    assert queue.ack_failure(claim, "bad input", retryable=False) is AckOutcome.FAILED
    doc = raw(queue, activity_id)
    assert doc["status"] == "failed" and doc["retry_count"] == 0
    assert doc["completed_at"] == clock.now
    assert queue.get_result(activity_id).data == {"error": "bad input", "type": "non_retryable"}
    assert queue.context.dead_letter.count_documents({}) == 0


# ------------------------------------------------------------------ fencing


@pytest.mark.partitioned
def test_a_stale_claim_changes_nothing(queue: RunnerQ, clock) -> None:
    queue.enqueue("t", {}, max_retries=5)
    stale = queue.dequeue("slow", lease_seconds=10)[0]
    clock.advance(11)
    assert queue.requeue_expired() == {"requeued": 1, "dead_lettered": 0, "malformed": 0}
    fresh = queue.dequeue("fast")[0]
    before = raw(queue, fresh.activity_id)

    with pytest.raises(ClaimLost):
        queue.ack_success(stale, "stale result")
    with pytest.raises(ClaimLost):
        queue.ack_failure(stale, "stale error")
    with pytest.raises(ClaimLost):
        queue.extend_lease(stale, 60)
    assert raw(queue, fresh.activity_id) == before
    assert queue.get_result(fresh.activity_id) is None

    queue.ack_success(fresh, "fresh result")
    with pytest.raises(ClaimLost):
        queue.ack_success(stale, "stale result")
    assert queue.get_result(fresh.activity_id).data == "fresh result"


@pytest.mark.partitioned
def test_extend_lease(queue: RunnerQ, clock) -> None:
    queue.enqueue("t", {})
    claim = queue.dequeue("w", lease_seconds=10)[0]
    clock.advance(8)
    assert queue.extend_lease(claim, 30) is True
    assert raw(queue, claim.activity_id)["lease_deadline"] == clock.now + timedelta(seconds=30)
    clock.advance(25)
    assert queue.requeue_expired() == {"requeued": 0, "dead_lettered": 0, "malformed": 0}
    assert "LeaseExtended" in event_types(queue, claim.activity_id)
    queue.ack_success(claim, None)
    assert queue.extend_lease(claim, 30) is False  # no longer held, but not stolen


# ------------------------------------------------------- reaper & scheduler


@pytest.mark.partitioned
def test_reaper_requeues_expired_leases_without_backoff(queue: RunnerQ, clock) -> None:
    activity_id = queue.enqueue("t", {}, max_retries=3, retry_delay_seconds=60).activity_id
    queue.dequeue("dead-worker", lease_seconds=5)
    clock.advance(5)
    # not yet expired
    assert queue.requeue_expired() == {"requeued": 0, "dead_lettered": 0, "malformed": 0}
    clock.advance(0.001)
    assert queue.requeue_expired() == {"requeued": 1, "dead_lettered": 0, "malformed": 0}
    doc = raw(queue, activity_id)
    assert doc["status"] == "pending" and doc["retry_count"] == 1
    assert "dead-worker" in doc["last_error"]
    assert "lease_id" not in doc and "worker_id" not in doc
    assert event_types(queue, activity_id)[-1] == "Requeued"


@pytest.mark.partitioned
def test_reaper_dead_letters_when_no_attempt_remains(queue: RunnerQ, clock) -> None:
    activity_id = queue.enqueue("t", {}, max_retries=1).activity_id
    queue.dequeue("dead-worker", lease_seconds=5)
    clock.advance(6)
    assert queue.requeue_expired() == {"requeued": 0, "dead_lettered": 1, "malformed": 0}
    doc = raw(queue, activity_id)
    assert doc["status"] == "dead_letter" and doc["retry_count"] == 0
    assert queue.get_result(activity_id).data["type"] == "dead_letter"
    assert queue.context.dead_letter.count_documents({"_id": activity_id}) == 1


def test_scheduled_work_becomes_due(queue: RunnerQ, clock) -> None:
    later = queue.enqueue("t", {"n": "later"}, delay_seconds=60).activity_id
    soon = queue.enqueue("t", {"n": "soon"}, scheduled_at=clock.now + timedelta(seconds=10))
    assert queue.dequeue("w") == []
    clock.advance(10)
    assert queue.process_scheduled() == 1
    assert [c.activity_id for c in queue.dequeue("w", limit=5)] == [soon.activity_id]
    clock.advance(50)
    assert queue.process_scheduled() == 1
    assert queue.dequeue("w")[0].activity_id == later


@pytest.mark.partitioned
def test_release_gives_work_back_without_counting_an_attempt(queue: RunnerQ) -> None:
    activity_id = queue.enqueue("t", {}).activity_id
    claim = queue.dequeue("w")[0]
    assert queue.release(claim) is True
    doc = raw(queue, activity_id)
    assert doc["status"] == "pending" and doc["retry_count"] == 0
    assert queue.release(claim) is False


# ------------------------------------------------------------------ reading


def test_get_activity_unknown_and_invalid_ids(queue: RunnerQ) -> None:
    with pytest.raises(NotFound):
        queue.get_activity(uuid.uuid4())
    with pytest.raises(InvalidArgument):
        queue.get_activity("not-a-uuid")


@ONE_PARTITION
def test_stats_counts_by_status_and_priority(queue: RunnerQ) -> None:
    queue.enqueue("t", {}, priority="critical")
    queue.enqueue("t", {}, priority="low")
    queue.enqueue("t", {}, delay_seconds=60)
    queue.ack_success(queue.dequeue("w")[0], None)
    stats = queue.stats()
    assert stats["by_status"]["pending"] == 1
    assert stats["by_status"]["scheduled"] == 1
    assert stats["by_status"]["completed"] == 1
    # exact while the queue is small (queries.EXACT_COMPLETED_UP_TO), completed included
    assert stats["estimated"] == []
    assert stats["by_priority"] == {"low": {"pending": 1}, "normal": {"scheduled": 1},
                                    "critical": {"completed": 1}}
    assert stats["total"] == 3


@ONE_PARTITION
def test_lists_are_ordered_as_design_says(queue: RunnerQ, clock) -> None:
    low = queue.enqueue("t", {}, priority=Priority.LOW).activity_id
    clock.advance(1)
    high = queue.enqueue("t", {}, priority=Priority.HIGH).activity_id
    clock.advance(1)
    high2 = queue.enqueue("t", {}, priority=Priority.HIGH).activity_id
    assert [a.id for a in queue.list_pending()] == [high, high2, low]
    assert [a.id for a in queue.list_pending(offset=1, limit=1)] == [high2]
    s2 = queue.enqueue("t", {}, delay_seconds=20).activity_id
    s1 = queue.enqueue("t", {}, delay_seconds=10).activity_id
    assert [a.id for a in queue.list_scheduled()] == [s1, s2]
    first = queue.dequeue("w")[0]
    assert [a.id for a in queue.list_processing()] == [first.activity_id]
    queue.ack_success(first, None)
    clock.advance(1)
    queue.ack_success(queue.dequeue("w")[0], None)
    assert [a.id for a in queue.list_completed()] == [high2, high]
    assert all(a.status == Status.COMPLETED for a in queue.list_completed())


@pytest.mark.parametrize("key", ["$where", "a.b", "", "x" * 101])
def test_metadata_keys_that_would_act_as_query_syntax_are_refused(queue: RunnerQ,
                                                                   key: str) -> None:
    with pytest.raises(InvalidArgument):
        queue.enqueue("t", {}, metadata={key: "v"})
    assert queue.context.activities.count_documents({}) == 0


def test_a_lease_must_be_positive(queue: RunnerQ) -> None:
    queue.enqueue("t", {})
    with pytest.raises(InvalidArgument):
        queue.dequeue("w", lease_seconds=0)
    claim = queue.dequeue("w", lease_seconds=5)[0]
    with pytest.raises(InvalidArgument):
        queue.extend_lease(claim, -1)


def test_back_to_pending_clears_an_old_due_time(queue: RunnerQ, clock) -> None:
    activity_id = queue.enqueue("t", {}, retry_delay_seconds=1, max_retries=5).activity_id
    queue.ack_failure(queue.dequeue("w")[0], "x")  # scheduled with a back-off
    clock.advance(2)
    queue.process_scheduled()
    queue.dequeue("w", lease_seconds=1)
    clock.advance(2)
    queue.requeue_expired()  # the reaper puts it back to pending at once
    assert "scheduled_at" not in raw(queue, activity_id)


# --------------------------------------------- stale and repeated acknowledgements


def test_a_stale_success_changes_nothing_and_never_replaces_a_newer_result(
        queue: RunnerQ, clock) -> None:
    aid = queue.enqueue("t", {}).activity_id
    stale = queue.dequeue("w1", lease_seconds=5)[0]
    clock.advance(6)
    assert queue.requeue_expired()["requeued"] == 1
    fresh = queue.dequeue("w2")[0]
    assert queue.ack_success(fresh, {"by": "w2"}) is AckOutcome.COMPLETED
    with pytest.raises(ClaimLost):
        queue.ack_success(stale, {"by": "w1"})
    assert queue.get_result(aid).data == {"by": "w2"}
    assert raw(queue, aid)["last_worker_id"] == "w2"


def test_a_success_whose_acknowledgement_never_came_is_not_a_result(queue: RunnerQ,
                                                                    clock) -> None:
    """The result is written before the acknowledgement: a crash in between (or a lost
    claim) leaves a result that is not shown, and the next attempt's replaces it."""
    aid = queue.enqueue("t", {}).activity_id
    claim = queue.dequeue("w1", lease_seconds=5)[0]
    assert queue.activities._write_results([(claim, "half-done")], clock()) == {}  # then: crash
    assert queue.get_result(aid) is None
    clock.advance(6)
    queue.requeue_expired()
    assert queue.get_result(aid) is None
    queue.operator.cancel(aid)  # terminal without a run: its result is the cancellation's
    result = queue.get_result(aid)
    assert result is not None and result.state == "Err"
    assert result.data["type"] == "cancelled"  # never the half-done success
    with pytest.raises(ClaimLost):  # the crashed claim's acknowledgement, arriving late
        queue.ack_success(claim, "half-done")
    assert queue.get_activity(aid).status == "cancelled"


def test_a_late_acknowledgement_after_an_operator_change_is_a_lost_claim(queue: RunnerQ) -> None:
    aid = queue.enqueue("t", {}, retry_delay_seconds=60).activity_id
    claim = queue.dequeue("w")[0]
    assert queue.ack_failure(claim, "try later") is AckOutcome.RETRYING
    assert queue.ack_failure(claim, "try later") is AckOutcome.RETRYING  # a repeat
    queue.operator.cancel(aid)
    for late in (lambda: queue.ack_failure(claim, "try later"),
                 lambda: queue.ack_success(claim, 1)):
        with pytest.raises(ClaimLost):
            late()
    assert queue.get_activity(aid).status == "cancelled"
    assert queue.get_result(aid).data["type"] == "cancelled"  # the late success left none


def test_the_reaper_dead_lettering_answers_for_no_claim(queue: RunnerQ, clock) -> None:
    aid = queue.enqueue("t", {}, max_retries=2, retry_delay_seconds=0).activity_id
    first = queue.dequeue("w1")[0]
    assert queue.ack_failure(first, "boom") is AckOutcome.RETRYING
    second = queue.dequeue("w2", lease_seconds=5)[0]
    clock.advance(6)
    assert queue.requeue_expired() == {"requeued": 0, "dead_lettered": 1, "malformed": 0}
    with pytest.raises(ClaimLost):  # not "dead_lettered": that claim did not end it
        queue.ack_failure(first, "boom")
    with pytest.raises(ClaimLost):
        queue.ack_success(second, "late")
    assert queue.get_result(aid).state == "Err"


@pytest.mark.partitioned
def test_concurrent_acknowledgements_share_round_trips_and_each_gets_its_answer(
        queue: RunnerQ) -> None:
    queue.enqueue_many([ActivitySpec("t", {"i": i}) for i in range(24)])
    claims = queue.dequeue("w", limit=24)
    stale = claims[-1]
    queue.ack_success(stale, "first")  # its repeat below says something else: a conflict
    answers: dict[int, object] = {}

    def ack(i: int) -> None:
        try:
            answers[i] = queue.ack_success(claims[i], "again" if claims[i] is stale else i)
        except (ClaimLost, CheckpointConflict) as exc:
            answers[i] = exc

    threads = [threading.Thread(target=ack, args=(i,)) for i in range(len(claims))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert isinstance(answers.pop(len(claims) - 1), CheckpointConflict)
    assert set(answers.values()) == {AckOutcome.COMPLETED}
    for i, claim in enumerate(claims[:-1]):
        assert queue.get_result(claim.activity_id).data == i
    assert queue.get_result(stale.activity_id).data == "first"


def test_wait_returns_the_outcome_or_times_out(queue: RunnerQ) -> None:
    from runnerq_cli.cli.exits import ExitCode
    from runnerq_cli.cli.wait_report import exit_code

    aid = queue.enqueue("t", {}).activity_id
    timed_out = queue.wait(aid, timeout=0.2, poll=0.05)
    assert (timed_out.status, timed_out.last_status, exit_code(timed_out)) == (
        None, "pending", ExitCode.WAIT_TIMEOUT)
    assert timed_out.timed_out
    claim = queue.dequeue("w")[0]
    finisher = threading.Thread(target=lambda: queue.ack_success(claim, {"done": 1}))
    finisher.start()
    outcome = queue.wait(aid, timeout=30, poll=0.05)
    finisher.join(timeout=30)
    assert (outcome.status, exit_code(outcome)) == ("completed", ExitCode.OK)
    assert outcome.result.data == {"done": 1}
    with pytest.raises(NotFound):
        queue.wait(uuid.uuid4(), timeout=1)
