"""Durable activities' storage operations (docs/design.md, "Durable activities") against a
real server through the backend API: checkpoints, dependencies, park and wake, signals,
fenced spawns, and the invariants the design argues for without transactions."""

from __future__ import annotations

import threading
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.backend.domain.checkpoints import checkpoint_id, step_key
from runnerq_cli.backend.domain.models import Status
from runnerq_cli.backend.domain.specs import ActivitySpec
from runnerq_cli.errors import CheckpointConflict, ClaimLost, InvalidArgument, NotFound
from tests.waiting import wait_until

FAR = datetime(2099, 1, 1, tzinfo=UTC)


def raw(queue: RunnerQ, activity_id: uuid.UUID) -> dict:
    return queue.context.activities.find_one({"_id": activity_id})


def claim_one(queue: RunnerQ, types: list[str], worker: str = "w1"):
    queue.process_scheduled()
    [claim] = queue.dequeue(worker, types=types, limit=1)
    return claim


def stale(queue: RunnerQ, claim) -> None:
    """Make `claim` stale: its lease expires and the reaper requeues the activity."""
    queue.context.activities.update_one(
        {"_id": claim.activity_id}, {"$set": {"lease_deadline": queue.now() - timedelta(
            seconds=10)}})
    queue.requeue_expired()


def test_checkpoint_ids_are_runnerqs_uuid5() -> None:
    activity = uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8")
    assert str(checkpoint_id(activity, "run", "charge")) == "020e4a37-85b6-5ee4-a6c6-ce49b8c3fad7"
    root, parent = uuid.UUID(int=1), uuid.UUID(int=2)
    assert step_key(root, parent, "Ship") == f"rq:step:{root}:{parent}:Ship"


def test_checkpoint_is_insert_only_and_fenced(backend: RunnerQ) -> None:
    a = backend.enqueue("t", {}).activity_id
    claim = claim_one(backend, ["t"])
    cid = checkpoint_id(a, "run", "x")
    backend.durable.checkpoint(claim, cid, "Ok", {"n": 1}, "run:x")
    backend.durable.checkpoint(claim, cid, "Ok", {"n": 1.0}, "run:x")  # the same value again
    with pytest.raises(CheckpointConflict):
        backend.durable.checkpoint(claim, cid, "Ok", {"n": 2}, "run:x")
    assert backend.durable.get_result(cid).data == {"n": 1}
    stale(backend, claim)
    with pytest.raises(ClaimLost):  # even the identical value: the fence comes first
        backend.durable.checkpoint(claim, cid, "Ok", {"n": 1}, "run:x")
    with pytest.raises(ClaimLost):
        backend.durable.checkpoint(claim, checkpoint_id(a, "run", "y"), "Ok", 1, "run:y")
    assert backend.context.checkpoints.count_documents({"owner_id": a}) == 1
    [step] = backend.durable.steps(a)
    assert (step.kind, step.name, step.data) == ("run", "x", {"n": 1})


def test_sleep_parks_without_an_attempt_and_wakes_when_due(backend: RunnerQ) -> None:
    a = backend.enqueue("t", {}).activity_id
    claim = claim_one(backend, ["t"])
    assert backend.durable.park(claim, "sleep", "sleep:s", FAR) is False
    doc = raw(backend, a)
    assert doc["status"] == "waiting" and doc["retry_count"] == 0
    assert doc["parked"]["kind"] == "sleep" and "lease_id" not in doc
    backend.process_scheduled()
    assert raw(backend, a)["status"] == "waiting"  # not due
    backend.context.activities.update_one({"_id": a}, {"$set": {"scheduled_at": backend.now()}})
    again = claim_one(backend, ["t"])
    doc = raw(backend, a)
    assert again.activity_id == a and doc["retry_count"] == 0 and doc["claims"] == 2
    assert "parked" not in doc and "waiting_result_id" not in doc
    types = [e.event_type for e in reversed(backend.get_activity_events(a))]
    assert types.count("Yielded") == 1 and types.count("Dequeued") == 2


def test_park_repeated_after_a_lost_reply_writes_nothing(backend: RunnerQ) -> None:
    a = backend.enqueue("t", {}).activity_id
    claim = claim_one(backend, ["t"])
    backend.durable.park(claim, "sleep", "sleep:s", FAR)
    backend.flush_outbox()
    before = raw(backend, a)
    backend.durable.park(claim, "sleep", "sleep:s", FAR)
    assert raw(backend, a) == before
    with pytest.raises(ClaimLost):  # another park under the ended claim is no repeat
        backend.durable.park(claim, "sleep", "sleep:other", FAR)


def test_child_result_wakes_the_parent_and_retries_do_not(backend: RunnerQ) -> None:
    p = backend.enqueue("parent", {}).activity_id
    cp = claim_one(backend, ["parent"])
    k = backend.durable.spawn(cp, ActivitySpec("child", {}, max_retries=2)).activity_id
    child = raw(backend, k)
    assert child["parent_activity_id"] == p and child["root_activity_id"] == p
    assert child["depth"] == 1 and child["status"] == "pending" and "spawn_fence" not in child
    backend.durable.register_dependency(cp, k)
    assert backend.durable.park(cp, "await", f"child:{k}", FAR, result_id=k, producer=k) is False
    assert raw(backend, p)["waiting_result_id"] == k
    ck = claim_one(backend, ["child"])
    backend.ack_failure(ck, "boom", retryable=True)  # attempts left: nothing published
    assert raw(backend, p)["status"] == "waiting"
    backend.context.activities.update_one({"_id": k}, {"$set": {"status": "pending"}})
    ck = claim_one(backend, ["child"])
    backend.ack_success(ck, {"ok": True})
    assert raw(backend, p)["status"] == "pending"
    again = claim_one(backend, ["parent"])
    assert again.activity_id == p and "waiting_result_id" not in raw(backend, p)
    assert backend.durable.get_result(k).data == {"ok": True}


def test_a_dead_lettered_child_wakes_its_parent_through_the_outbox(backend: RunnerQ) -> None:
    backend.enqueue("parent", {})
    cp = claim_one(backend, ["parent"])
    k = backend.durable.spawn(cp, ActivitySpec("child", {}, max_retries=1)).activity_id
    backend.durable.park(cp, "await", "child:k", FAR, result_id=k, producer=k)
    ck = claim_one(backend, ["child"])
    backend.ack_failure(ck, "boom", retryable=True)
    backend.flush_outbox()
    assert raw(backend, cp.activity_id)["status"] == "pending"
    assert backend.durable.get_result(k).data["type"] == "dead_letter"


def test_park_on_a_ready_result_stays_runnable(backend: RunnerQ) -> None:
    k = backend.enqueue("child", {}).activity_id
    backend.ack_success(claim_one(backend, ["child"]), 5)
    p = backend.enqueue("parent", {}).activity_id
    cp = claim_one(backend, ["parent"])
    assert backend.durable.park(cp, "await", "child:k", FAR, result_id=k, producer=k) is True
    assert raw(backend, p)["status"] == "pending"


def test_an_awaited_producer_marked_after_its_claim_still_wakes(backend: RunnerQ) -> None:
    """The producer was claimed before anyone depended on it: its success's fence misses
    on `awaited` and it completes with a wake."""
    k = backend.enqueue("producer", {}).activity_id
    ck = claim_one(backend, ["producer"])
    backend.enqueue("waiter", {})
    cw = claim_one(backend, ["waiter"])
    backend.durable.register_dependency(cw, k)
    backend.durable.park(cw, "await", "x", FAR, result_id=k, producer=k)
    assert backend.ack_success(ck, 1).value == "completed"
    assert raw(backend, cw.activity_id)["status"] == "pending"


def test_dependency_on_an_unknown_producer_is_not_found(backend: RunnerQ) -> None:
    backend.enqueue("t", {})
    claim = claim_one(backend, ["t"])
    with pytest.raises(NotFound):
        backend.durable.register_dependency(claim, uuid.uuid4())
    with pytest.raises(NotFound):
        backend.durable.park(claim, "await", "x", FAR, result_id=uuid.uuid4(),
                             producer=uuid.uuid4())
    assert backend.context.dependencies.count_documents({}) == 0


def test_signals_are_kept_and_wake(backend: RunnerQ) -> None:
    a = backend.enqueue("t", {}).activity_id
    claim = claim_one(backend, ["t"])
    assert backend.durable.signal(a, "approve", {"by": "ada"}) is False  # running: kept
    sid = checkpoint_id(a, "signal", "approve")
    assert backend.durable.park(claim, "signal", "signal:approve", FAR, result_id=sid) is True
    claim = claim_one(backend, ["t"])
    sid2 = checkpoint_id(a, "signal", "ship")
    assert backend.durable.park(claim, "signal", "signal:ship", FAR, result_id=sid2) is False
    assert backend.durable.signal(a, "ship", 1) is True
    assert raw(backend, a)["status"] == "pending"
    backend.durable.signal(a, "ship", 2)  # the last one wins
    assert backend.durable.get_result(sid2).data == 2
    with pytest.raises(NotFound):
        backend.durable.signal(uuid.uuid4(), "ship", 1)
    with pytest.raises(InvalidArgument):
        backend.durable.signal(a, "", 1)
    with pytest.raises(InvalidArgument):
        backend.durable.signal(a, "x" * 201, 1)
    stored = [e for e in backend.get_activity_events(a) if e.event_type == "Signaled"]
    assert len(stored) == 3 and {e.detail["woke"] for e in stored} == {True, False}


def test_a_stale_spawn_writes_nothing(backend: RunnerQ) -> None:
    backend.enqueue("parent", {})
    old = claim_one(backend, ["parent"])
    stale(backend, old)
    new = claim_one(backend, ["parent"])
    before = {name: backend.context.collection(name).count_documents({})
              for name in ("activities", "idempotency", "events", "dependencies")}
    with pytest.raises(ClaimLost):
        backend.durable.spawn(old, ActivitySpec("child", {}, idempotency_key="k1"))
    after = {name: backend.context.collection(name).count_documents({})
             for name in ("activities", "idempotency", "events", "dependencies")}
    assert after == before
    child = backend.durable.spawn(new, ActivitySpec("child", {})).activity_id
    assert raw(backend, child)["status"] == "pending"


def test_a_keyed_spawn_reattaches_on_replay(backend: RunnerQ) -> None:
    p = backend.enqueue("parent", {}).activity_id
    first = claim_one(backend, ["parent"])
    key = step_key(p, p, "ship")
    k1 = backend.durable.spawn(first, ActivitySpec("child", {}, idempotency_key=key))
    backend.durable.park(first, "sleep", "sleep:s", backend.now())
    again = claim_one(backend, ["parent"])
    k2 = backend.durable.spawn(again, ActivitySpec("child", {}, idempotency_key=key))
    assert k2.activity_id == k1.activity_id and k2.created is False
    assert backend.context.activities.count_documents({"parent_activity_id": p}) == 1


def test_depth_is_bounded(backend: RunnerQ) -> None:
    backend.enqueue("t", {})
    claim = claim_one(backend, ["t"])
    backend.context.activities.update_one({"_id": claim.activity_id}, {"$set": {"depth": 32}})
    with pytest.raises(InvalidArgument, match="deep"):
        backend.durable.spawn(claim, ActivitySpec("t", {}))
    assert backend.context.activities.count_documents({}) == 1


@pytest.mark.parametrize("round_", range(12))
def test_park_and_publish_race_never_loses_the_wake(backend: RunnerQ, round_: int) -> None:
    """The park (write, then read) and the publication (write, then wake) on two threads
    at once: the parent always ends runnable."""
    k = backend.enqueue("child", {}).activity_id
    p = backend.enqueue("parent", {}).activity_id
    cp = claim_one(backend, ["parent"])
    ck = claim_one(backend, ["child"])
    backend.durable.register_dependency(cp, k)
    go = threading.Barrier(2)

    def park() -> None:
        go.wait()
        backend.durable.park(cp, "await", "x", FAR, result_id=k, producer=k)

    def publish() -> None:
        go.wait()
        backend.ack_success(ck, round_)

    threads = [threading.Thread(target=park), threading.Thread(target=publish)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert raw(backend, p)["status"] == "pending"


def test_wake_repair_wakes_a_park_whose_publication_crashed(backend: RunnerQ) -> None:
    """A publisher that died between making its result visible and waking: wake repair
    finds the parked activity once the grace has passed."""
    k = backend.enqueue("child", {}).activity_id
    p = backend.enqueue("parent", {}).activity_id
    cp = claim_one(backend, ["parent"])
    backend.durable.park(cp, "await", "x", FAR, result_id=k, producer=k)
    # The child completes "by hand", without the wake (a crash after its activity update).
    backend.context.results.insert_one({"_id": k, "activity_id": k, "state": "Ok", "data": 1,
                                        "created_at": backend.now()})
    backend.context.activities.update_one({"_id": k}, {"$set": {
        "status": "completed", "completed_at": backend.now()}})
    assert backend.durable.repair_wakes() == 0  # within the grace: a park may still read
    backend.context.activities.update_one(
        {"_id": p}, {"$set": {"parked.at": backend.now() - timedelta(minutes=5)}})
    assert backend.durable.repair_wakes() == 1
    assert raw(backend, p)["status"] == Status.PENDING.value


def backdate(queue: RunnerQ, activity_id: uuid.UUID, seconds: float) -> None:
    queue.context.activities.update_one({"_id": activity_id}, {"$set": {
        "completed_at": queue.now() - timedelta(seconds=seconds)}})


def finished_tree(queue: RunnerQ) -> tuple[uuid.UUID, uuid.UUID]:
    """A completed root with a checkpoint, a signal and a completed child."""
    root = queue.enqueue("parent", {}, idempotency_key="order-1").activity_id
    claim = claim_one(queue, ["parent"])
    queue.durable.checkpoint(claim, checkpoint_id(root, "run", "x"), "Ok", 1, "run:x")
    child = queue.durable.spawn(claim, ActivitySpec("child", {})).activity_id
    queue.durable.signal(root, "go", 1)
    queue.ack_success(claim_one(queue, ["child"]), 2)
    queue.ack_success(claim, 3)
    return root, child


def test_cleanup_sweeps_a_finished_tree_whole(backend: RunnerQ) -> None:
    root, child = finished_tree(backend)
    assert backend.maintenance.cleanup(3600, 3600, 100) == 0  # too young
    backdate(backend, root, 7200)  # only the root's age counts
    assert backend.maintenance.cleanup(3600, 3600, 100) == 1
    ctx = backend.context
    for aid in (root, child):
        assert ctx.activities.find_one({"_id": aid}) is None
        assert ctx.results.find_one({"_id": aid}) is None
        assert ctx.events.find_one({"activity_id": aid}) is None
        assert ctx.checkpoints.find_one({"owner_id": aid}) is None
    assert ctx.dependencies.count_documents({}) == 0
    assert ctx.idempotency.count_documents({}) == 0


def test_cleanup_keeps_trees_with_live_work_and_pinned_trees(backend: RunnerQ) -> None:
    root = backend.enqueue("parent", {}).activity_id
    claim = claim_one(backend, ["parent"])
    child = backend.durable.spawn(claim, ActivitySpec("child", {})).activity_id
    backend.ack_success(claim, 1)
    backdate(backend, root, 7200)
    assert backend.maintenance.cleanup(3600, 3600, 100) == 0  # the child is pending
    backend.ack_success(claim_one(backend, ["child"]), 2)
    # Another, live tree waits on the root's result: the root is pinned.
    backend.enqueue("other", {})
    other = claim_one(backend, ["other"])
    backend.durable.register_dependency(other, root)
    assert backend.maintenance.cleanup(3600, 3600, 100) == 0
    backend.ack_success(other, 3)
    assert backend.maintenance.cleanup(3600, 3600, 100) == 1
    assert backend.context.activities.find_one({"_id": child}) is None


def test_cleanup_ages_completed_and_failed_apart_and_counts_once(backend: RunnerQ) -> None:
    ok = backend.enqueue("t", {}).activity_id
    backend.ack_success(claim_one(backend, ["t"]), 1)
    bad = backend.enqueue("t", {}).activity_id
    backend.ack_failure(claim_one(backend, ["t"]), "no", retryable=False)
    backend.flush_outbox()
    backdate(backend, ok, 7200)
    backdate(backend, bad, 7200)
    assert backend.maintenance.cleanup(3600, 0, 100) == 1  # failed ones kept (0)
    assert backend.context.activities.find_one({"_id": bad}) is not None
    counts = []
    threads = [threading.Thread(target=lambda: counts.append(
        backend.maintenance.cleanup(0, 3600, 100))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sum(counts) == 1


def test_trees_that_must_stay_do_not_hold_back_younger_ones(backend: RunnerQ) -> None:
    """The oldest roots have live children: retention steps over them to the next."""
    kept = []
    for _ in range(3):
        root = backend.enqueue("parent", {}).activity_id
        claim = claim_one(backend, ["parent"])
        backend.durable.spawn(claim, ActivitySpec("child", {}))  # stays pending
        backend.ack_success(claim, 1)
        backdate(backend, root, 9000)
        kept.append(root)
    plain = backend.enqueue("plain", {}).activity_id
    backend.ack_success(claim_one(backend, ["plain"]), 1)
    backdate(backend, plain, 7200)
    assert backend.maintenance.cleanup(3600, 3600, 2) == 1
    assert backend.context.activities.find_one({"_id": plain}) is None
    assert backend.context.activities.count_documents({"_id": {"$in": kept}}) == 3


def test_a_delayed_child_is_scheduled_once_its_spawn_confirms(backend: RunnerQ) -> None:
    backend.enqueue("parent", {})
    claim = claim_one(backend, ["parent"])
    later = backend.durable.spawn(claim, ActivitySpec("child", {}, delay_seconds=60))
    now = backend.durable.spawn(claim, ActivitySpec("child", {}))
    assert raw(backend, later.activity_id)["status"] == "scheduled"
    assert raw(backend, now.activity_id)["status"] == "pending"
    assert "spawn_fence" not in raw(backend, later.activity_id)


def _enqueue_step(events) -> tuple[str, object]:
    [step] = [e for e in events if e.event_type in ("Enqueued", "Scheduled")]
    return step.event_type, step.detail.get("scheduled_at")


@pytest.mark.parametrize("delayed", [False, True], ids=["enqueued", "scheduled"])
def test_a_park_keeps_the_enqueue_step_as_enqueued(backend: RunnerQ, delayed: bool) -> None:
    """A park overwrites `scheduled_at` with its wake time and a wake removes it; the
    enqueue step (derived) still reads as enqueued, in `events` and in the tail, while
    waiting and after the wake, because the park's `Yielded` keeps the previous value."""
    a = backend.enqueue("t", {}, delay_seconds=0.5 if delayed else None).activity_id
    original = raw(backend, a).get("scheduled_at")
    expected = ("Scheduled", original) if delayed else ("Enqueued", None)
    assert (original is not None) is delayed
    wait_until(lambda: backend.now() >= (original or backend.now()), timeout=5)
    claim = claim_one(backend, ["t"])
    backend.durable.park(claim, "sleep", "sleep:s", FAR)
    assert raw(backend, a)["scheduled_at"] != original  # the wake time now

    def seen() -> list[tuple[str, object]]:
        tail = [e for e in backend.event_stream(follow=False) if e.activity_id == a]
        return [_enqueue_step(backend.get_activity_events(a)), _enqueue_step(tail)]

    assert seen() == [expected, expected]
    backend.context.activities.update_one({"_id": a}, {"$set": {"scheduled_at": backend.now()}})
    claim_one(backend, ["t"])  # woken by the scheduler, claimed again
    assert "scheduled_at" not in raw(backend, a)
    assert seen() == [expected, expected]
    [yielded] = backend.context.events.find({"activity_id": a, "event_type": "Yielded"})
    assert set(yielded["detail"]) == {"kind", "step", "wake_at", "result_id", "ready"}
