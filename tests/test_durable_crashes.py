"""Durable activities' invariants under a crash at every step (docs/design.md,
"Durable activities", "Crash orderings"): a process runs one operation and dies before
each of its commands in turn (tests/durable_crash_child.py); then the repairs a live fleet
runs (outbox repair, wake repair) and the invariant is checked on the documents:

- a spawn leaves exactly one child once repaired and replayed, and none under a lost fence;
- a child's publication (success, terminal failure) and its parent's park never miss each
  other: a finished child's waiting parent is woken;
- a signal that was stored wakes its waiting target.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.backend.domain.checkpoints import checkpoint_id
from runnerq_cli.backend.domain.specs import ActivitySpec
from runnerq_cli.config import Settings
from runnerq_cli.errors import ClaimLost

pytestmark = pytest.mark.proof
CHILD = Path(__file__).with_name("durable_crash_child.py")
FAR = datetime(2099, 1, 1, tzinfo=UTC)
NOW = timedelta(0)


def run(backend: RunnerQ, op: str, kill_at: int, prefix: list[str] | None = None,
        **ids: uuid.UUID) -> dict | None:
    """Run `op` in a process that dies before its `kill_at`th command (0: never); its
    report when it finished. `prefix`: what runs the process (a skewed clock)."""
    args = {"uri": backend.settings.uri, "db": backend.settings.database,
            "queue": backend.settings.queue, "op": op, "kill_at": kill_at,
            **{k: str(v) for k, v in ids.items()}}
    done = subprocess.run([*(prefix or []), sys.executable, str(CHILD), json.dumps(args)],
                          capture_output=True, text=True, timeout=120, check=False)
    if done.returncode == 9:
        return None
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])



def fresh_queue(settings: Settings) -> RunnerQ:
    """A queue of its own on the test's server, indexed: each crash scenario starts clean
    (several run in one test)."""
    rq = RunnerQ(replace(settings, queue=f"q{uuid.uuid4().hex[:8]}"))
    rq.maintenance.init_indexes()
    return rq

def claim_one(backend: RunnerQ, activity_type: str):
    backend.process_scheduled()
    [claim] = backend.dequeue("w-test", types=[activity_type], limit=1, lease_seconds=600)
    return claim


def repair(backend: RunnerQ) -> None:
    """What the fleet's chores do after a crash, without their grace periods."""
    backend.maintenance.repair_outboxes(0)
    backend.durable.repair_wakes(grace=NOW)


def doc(backend: RunnerQ, aid: uuid.UUID) -> dict:
    return backend.context.activities.find_one({"_id": aid})


def commands_of(backend_factory, op: str) -> int:
    """How many commands the operation sends when nothing kills it."""
    backend, ids = backend_factory()
    report = run(backend, op, 0, **ids)
    assert report is not None
    return int(report["commands"])


def test_a_spawn_killed_at_every_step(settings, backend: RunnerQ) -> None:
    def setup() -> tuple[RunnerQ, dict[str, uuid.UUID]]:
        rq = fresh_queue(settings)
        parent = rq.enqueue("parent", {}).activity_id
        claim_one(rq, "parent")
        return rq, {"parent": parent}

    steps = commands_of(setup, "spawn")
    assert steps >= 4
    for kill_at in range(1, steps + 1):
        rq, ids = setup()
        run(rq, "spawn", kill_at, **ids)
        repair(rq)
        children = list(rq.context.activities.find({"parent_activity_id": ids["parent"]}))
        assert len(children) <= 1, kill_at
        assert all(c["status"] == "pending" and "spawn_fence" not in c for c in children)
        # The parent's replay (a new claim, after the crashed one's lease) re-attaches.
        held = rq.context.activities.find_one({"_id": ids["parent"]})
        rq.context.activities.update_one({"_id": ids["parent"]}, {"$set": {
            "lease_deadline": rq.now() - timedelta(seconds=5)}})
        rq.requeue_expired()
        assert held["status"] == "processing"
        again = claim_one(rq, "parent")
        rq.durable.spawn(again, ActivitySpec("child", {}, idempotency_key="k"))
        children = list(rq.context.activities.find({"parent_activity_id": ids["parent"]}))
        assert len(children) == 1 and children[0]["status"] == "pending", kill_at


def test_a_spawn_whose_fence_is_lost_during_the_crash_leaves_nothing(settings) -> None:
    """Killed after inserting its child, before confirming it; then the parent's claim is
    lost: repair withdraws the child, its key and its dependency."""
    for kill_at in range(1, 12):
        rq = fresh_queue(settings)
        parent = rq.enqueue("parent", {}).activity_id
        claim = claim_one(rq, "parent")
        report = run(rq, "spawn", kill_at, parent=parent)
        assert report is None, "no step leaves an unconfirmed child"
        if rq.context.activities.find_one({"spawn_fence": {"$exists": True}}) is not None:
            break
    rq.context.activities.update_one({"_id": parent}, {"$set": {
        "lease_deadline": rq.now() - timedelta(seconds=5)}})
    rq.requeue_expired()
    repair(rq)
    assert rq.context.activities.count_documents({"parent_activity_id": parent}) == 0
    assert rq.context.idempotency.count_documents({}) == 0
    assert rq.context.dependencies.count_documents({}) == 0
    with pytest.raises(ClaimLost):
        rq.durable.spawn(claim, ActivitySpec("child", {}))


FENCED_AT: list[int] = []  # the spawn's command that leaves its child unconfirmed


def unconfirmed_spawn(settings) -> tuple[RunnerQ, uuid.UUID, dict]:
    """A queue whose parent's spawn was killed after inserting its child, before
    confirming it, and whose claim then expired: the parent pending again, the child
    still under the dead claim's fence."""
    for kill_at in [*FENCED_AT, *range(1, 12)]:  # the command found before, else each
        rq = fresh_queue(settings)
        parent = rq.enqueue("parent", {}).activity_id
        claim_one(rq, "parent")
        assert run(rq, "spawn", kill_at, parent=parent) is None
        child = rq.context.activities.find_one({"spawn_fence": {"$exists": True}})
        if child is not None:
            FENCED_AT[:] = [kill_at]
            break
    rq.context.activities.update_one({"_id": parent}, {"$set": {
        "lease_deadline": rq.now() - timedelta(seconds=5)}})
    rq.requeue_expired()
    return rq, parent, child


def test_a_replay_adopts_the_child_a_killed_spawn_left_unconfirmed(settings) -> None:
    """The parent's next claim replays before any repair: its spawn re-attaches to that
    child and confirms it, so repair (which withdraws a child whose parent no longer
    holds its fence) leaves it: the parent waits on a child that runs, not on nothing."""
    rq, parent, child = unconfirmed_spawn(settings)
    again = claim_one(rq, "parent")
    answer = rq.durable.spawn(again, ActivitySpec("child", {}, idempotency_key="k"))
    assert (answer.activity_id, answer.created) == (child["_id"], False)
    repair(rq)
    [kept] = rq.context.activities.find({"parent_activity_id": parent})
    assert kept["_id"] == child["_id"] and kept["status"] == "pending"
    assert "spawn_fence" not in kept
    assert rq.context.idempotency.count_documents({"activity_id": child["_id"]}) == 1
    assert rq.context.dependencies.count_documents({"producer_id": child["_id"]}) == 1


def test_a_repair_that_read_the_stale_fence_before_the_adoption_withdraws_nothing(
        settings) -> None:
    """Repair read the child under the dead claim's fence, then the replay adopted it,
    then repair withdraws: the child, its key and its dependency all stay."""
    rq, _parent, child = unconfirmed_spawn(settings)
    stale = rq.context.activities.find_one({"_id": child["_id"]})
    again = claim_one(rq, "parent")
    rq.durable.spawn(again, ActivitySpec("child", {}, idempotency_key="k"))
    assert rq.durable._settle_spawn(stale, rq.now(), NOW) == 1  # it withdraws, it thinks
    assert rq.context.activities.find_one({"_id": child["_id"]})["status"] == "pending"
    assert rq.context.idempotency.count_documents({"activity_id": child["_id"]}) == 1
    assert rq.context.dependencies.count_documents({"producer_id": child["_id"]}) == 1


def test_a_replay_after_the_repair_withdrew_the_child_spawns_it_again(settings) -> None:
    rq, parent, child = unconfirmed_spawn(settings)
    repair(rq)  # withdrawn: its parent no longer holds the fence
    again = claim_one(rq, "parent")
    answer = rq.durable.spawn(again, ActivitySpec("child", {}, idempotency_key="k"))
    assert answer.created and answer.activity_id != child["_id"]
    [fresh] = rq.context.activities.find({"parent_activity_id": parent})
    assert fresh["_id"] == answer.activity_id and fresh["status"] == "pending"


@pytest.mark.parametrize("op", ["succeed", "fail"])
def test_a_publication_killed_at_every_step_still_wakes(settings, op: str) -> None:
    def setup() -> tuple[RunnerQ, dict[str, uuid.UUID]]:
        rq = fresh_queue(settings)
        parent = rq.enqueue("parent", {}).activity_id
        cp = claim_one(rq, "parent")
        child = rq.durable.spawn(cp, ActivitySpec("child", {})).activity_id
        rq.durable.park(cp, "await", "x", FAR, result_id=child, producer=child)
        claim_one(rq, "child")
        return rq, {"parent": parent, "child": child}

    steps = commands_of(setup, op)
    for kill_at in range(1, steps + 1):
        rq, ids = setup()
        run(rq, op, kill_at, **ids)
        repair(rq)
        child = doc(rq, ids["child"])
        if child["status"] in ("completed", "failed"):
            assert rq.durable.get_result(ids["child"]) is not None, kill_at
            assert doc(rq, ids["parent"])["status"] == "pending", (op, kill_at)
        else:
            assert doc(rq, ids["parent"])["status"] == "waiting", (op, kill_at)


def test_a_park_killed_at_every_step_never_sleeps_on_a_ready_result(settings) -> None:
    def setup() -> tuple[RunnerQ, dict[str, uuid.UUID]]:
        rq = fresh_queue(settings)
        child = rq.enqueue("child", {}).activity_id
        parent = rq.enqueue("parent", {}).activity_id
        claim_one(rq, "parent")
        rq.ack_success(claim_one(rq, "child"), 1)
        return rq, {"parent": parent, "child": child}

    steps = commands_of(setup, "park")
    for kill_at in range(1, steps + 1):
        rq, ids = setup()
        run(rq, "park", kill_at, **ids)
        repair(rq)
        assert doc(rq, ids["parent"])["status"] in ("processing", "pending"), kill_at


def test_a_signal_killed_at_every_step_wakes_once_stored(settings) -> None:
    def setup() -> tuple[RunnerQ, dict[str, uuid.UUID]]:
        rq = fresh_queue(settings)
        target = rq.enqueue("t", {}).activity_id
        claim = claim_one(rq, "t")
        rq.durable.park(claim, "signal", "signal:go", FAR,
                        result_id=checkpoint_id(target, "signal", "go"))
        return rq, {"target": target}

    steps = commands_of(setup, "signal")
    for kill_at in range(1, steps + 1):
        rq, ids = setup()
        run(rq, "signal", kill_at, **ids)
        repair(rq)
        stored = rq.context.checkpoints.find_one(
            {"_id": checkpoint_id(ids["target"], "signal", "go")})
        status = doc(rq, ids["target"])["status"]
        assert status == ("pending" if stored else "waiting"), kill_at


@pytest.mark.parametrize("skew", ["-10s", "+10s"])
def test_a_publisher_whose_clock_is_off_still_wakes_the_parked_parent(settings,
                                                                      skew: str) -> None:
    """The publisher on another host whose clock is 10 s off, before and after the park:
    no time is compared, the parent ends runnable either way."""
    from tests.chaos_support import faketime_prefix

    prefix = faketime_prefix(skew)
    if not prefix:
        pytest.skip("libfaketime (Debian's faketime) is not installed")
    for park_first in (True, False):
        rq = fresh_queue(settings)
        parent = rq.enqueue("parent", {}).activity_id
        cp = claim_one(rq, "parent")
        child = rq.durable.spawn(cp, ActivitySpec("child", {})).activity_id
        claim_one(rq, "child")
        if park_first:
            assert rq.durable.park(cp, "await", "x", FAR, result_id=child,
                                   producer=child) is False
        assert run(rq, "succeed", 0, prefix, child=child) is not None
        if not park_first:
            assert rq.durable.park(cp, "await", "x", FAR, result_id=child,
                                   producer=child) is True
        assert doc(rq, parent)["status"] == "pending", (skew, park_first)
