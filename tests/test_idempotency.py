"""Idempotency behaviours of docs/design.md ("Idempotency keys"), including racing enqueues
on one key."""

from __future__ import annotations

import contextlib
import threading

import pytest

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.backend.domain.models import OnDuplicate
from runnerq_cli.backend.queue.queue import ORPHAN_KEY_GRACE
from runnerq_cli.errors import DuplicateActivity, IdempotencyConflict


def enqueue(queue: RunnerQ, key: str, on_duplicate: OnDuplicate, activity_type: str = "charge"):
    return queue.enqueue(activity_type, {"amount": 5}, idempotency_key=key,
                         on_duplicate=on_duplicate)


def key_holder(queue: RunnerQ, key: str, activity_type: str = "charge"):
    doc = queue.context.idempotency.find_one(
        {"_id": {"activity_type": activity_type, "key": key}})
    return doc["activity_id"] if doc else None


def fail_terminally(queue: RunnerQ) -> None:
    claim = queue.dequeue("w")[0]
    queue.ack_failure(claim, "declined", retryable=False)


@pytest.mark.partitioned
def test_return_existing_enqueues_nothing(queue: RunnerQ) -> None:
    first = enqueue(queue, "k", OnDuplicate.RETURN_EXISTING)
    second = enqueue(queue, "k", OnDuplicate.RETURN_EXISTING)
    assert first.created and not second.created
    assert second.activity_id == first.activity_id
    assert queue.context.activities.count_documents({}) == 1


def test_no_reuse_raises_duplicate(queue: RunnerQ) -> None:
    first = enqueue(queue, "k", OnDuplicate.NO_REUSE)
    with pytest.raises(DuplicateActivity) as raised:
        enqueue(queue, "k", OnDuplicate.NO_REUSE)
    assert raised.value.existing_id == first.activity_id
    assert queue.context.activities.count_documents({}) == 1


@pytest.mark.partitioned
def test_allow_reuse_enqueues_and_moves_the_key(queue: RunnerQ) -> None:
    first = enqueue(queue, "k", OnDuplicate.ALLOW_REUSE)
    second = enqueue(queue, "k", OnDuplicate.ALLOW_REUSE)
    assert second.created and second.activity_id != first.activity_id
    assert key_holder(queue, "k") == second.activity_id
    assert queue.context.activities.count_documents({}) == 2


@pytest.mark.partitioned
def test_allow_reuse_on_failure(queue: RunnerQ) -> None:
    first = enqueue(queue, "k", OnDuplicate.ALLOW_REUSE_ON_FAILURE)
    with pytest.raises(IdempotencyConflict):
        enqueue(queue, "k", OnDuplicate.ALLOW_REUSE_ON_FAILURE)  # still pending
    fail_terminally(queue)
    second = enqueue(queue, "k", OnDuplicate.ALLOW_REUSE_ON_FAILURE)
    assert second.created and second.activity_id != first.activity_id
    assert key_holder(queue, "k") == second.activity_id


def test_allow_reuse_on_failure_accepts_dead_lettered(queue: RunnerQ) -> None:
    queue.enqueue("charge", {}, idempotency_key="k", max_retries=1)
    queue.ack_failure(queue.dequeue("w")[0], "gone")
    assert enqueue(queue, "k", OnDuplicate.ALLOW_REUSE_ON_FAILURE).created


def test_keys_are_per_activity_type(queue: RunnerQ) -> None:
    a = enqueue(queue, "k", OnDuplicate.NO_REUSE, activity_type="a")
    b = enqueue(queue, "k", OnDuplicate.NO_REUSE, activity_type="b")
    assert a.created and b.created


def test_a_key_past_its_ttl_is_free_even_before_the_ttl_monitor_runs(queue: RunnerQ,
                                                                       clock) -> None:
    first = enqueue(queue, "k", OnDuplicate.NO_REUSE)
    clock.advance(queue.settings.idempotency_ttl - 1)
    with pytest.raises(DuplicateActivity):
        enqueue(queue, "k", OnDuplicate.NO_REUSE)
    clock.advance(1)
    second = enqueue(queue, "k", OnDuplicate.NO_REUSE)
    assert second.created and second.activity_id != first.activity_id


@pytest.mark.partitioned
def test_an_orphaned_key_is_taken_over_after_the_grace(queue: RunnerQ, clock) -> None:
    """A crash between taking the key and inserting the activity leaves an orphan key."""
    import uuid

    ghost = uuid.uuid4()
    taken, _ = queue.check_idempotency("charge", "k", ghost)
    assert taken
    # Young orphan: its enqueue may still be inserting, so it counts as held.
    assert enqueue(queue, "k", OnDuplicate.RETURN_EXISTING).activity_id == ghost
    clock.advance(ORPHAN_KEY_GRACE.total_seconds())
    repaired = enqueue(queue, "k", OnDuplicate.RETURN_EXISTING)
    assert repaired.created and repaired.activity_id != ghost
    assert key_holder(queue, "k") == repaired.activity_id


@pytest.mark.parametrize("behaviour", [OnDuplicate.RETURN_EXISTING, OnDuplicate.NO_REUSE,
                                       OnDuplicate.ALLOW_REUSE_ON_FAILURE])
@pytest.mark.partitioned
def test_racing_enqueues_on_one_key_never_both_win(queue: RunnerQ, behaviour: OnDuplicate) -> None:
    """Eight threads enqueue with one new key at once: exactly one creates an activity.

    (allow-reuse lets every enqueue win by definition, so it is not raced here.)
    """
    outcomes: list[object] = []
    lock = threading.Lock()
    barrier = threading.Barrier(8)

    def attempt() -> None:
        barrier.wait()
        try:
            outcome: object = enqueue(queue, "race", behaviour)
        except (DuplicateActivity, IdempotencyConflict) as exc:
            outcome = exc
        with lock:
            outcomes.append(outcome)

    threads = [threading.Thread(target=attempt) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    created = [o for o in outcomes if getattr(o, "created", False)]
    assert len(outcomes) == 8
    assert len(created) == 1
    assert queue.context.activities.count_documents({}) == 1
    assert key_holder(queue, "race") == created[0].activity_id


def test_racing_reuse_after_failure_has_one_winner(queue: RunnerQ) -> None:
    enqueue(queue, "k", OnDuplicate.ALLOW_REUSE_ON_FAILURE)
    fail_terminally(queue)
    wins: list[object] = []
    barrier = threading.Barrier(6)

    def attempt() -> None:
        barrier.wait()
        with contextlib.suppress(IdempotencyConflict):
            wins.append(enqueue(queue, "k", OnDuplicate.ALLOW_REUSE_ON_FAILURE))

    threads = [threading.Thread(target=attempt) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(wins) == 1
    assert queue.context.activities.count_documents({"status": "pending"}) == 1

