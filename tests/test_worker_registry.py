"""The worker registry: who is working, and how many share the maintenance chores."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime

import pytest

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.backend.domain.timing import TIMING
from runnerq_cli.worker.engine import Worker, WorkerEnd
from runnerq_cli.worker.handlers import HandlerRegistry
from tests.waiting import wait_until


def test_live_workers_are_counted_and_stale_ones_are_not(queue: RunnerQ, clock) -> None:
    queue.registry.register_worker("old", types=["a"], concurrency=2)
    clock.advance(60)
    queue.registry.register_worker("w1")
    queue.registry.register_worker("w2")
    assert queue.registry.count_live_workers(stale_after=30) == 2
    listed = {w.worker_id: w for w in queue.registry.list_workers(stale_after=30)}
    assert listed["old"].stale and not listed["w1"].stale
    queue.registry.unregister_worker("w1")
    assert queue.registry.count_live_workers(stale_after=30) == 1


def test_a_running_worker_counts_in_the_fleet_that_shares_the_chores(settings) -> None:
    """A worker spreads the shared chores over the live workers it counts in the registry:
    a running worker is one of them (with its heartbeat), a cleanly stopped one is not."""
    backend = RunnerQ(settings)
    backend.maintenance.init_indexes()
    for n in range(3):
        backend.registry.register_worker(f"peer-{n}")
    registry = HandlerRegistry()
    registry.add("noop", lambda payload: None)
    worker = Worker(backend, registry, poll_interval=0.1)
    worker.start()
    try:
        wait_until(lambda: worker.worker_id in {
                       w.worker_id for w in backend.registry.list_workers()},
                   message="the worker to register")
        assert backend.registry.count_live_workers(TIMING.fleet_stale_after) == 4
        [me] = [w for w in backend.registry.list_workers() if w.worker_id == worker.worker_id]
        assert not me.stale
    finally:
        worker.stop()
        assert worker.join(10) == WorkerEnd.STOPPED
    assert backend.registry.count_live_workers(TIMING.fleet_stale_after) == 3


@pytest.mark.slow
@pytest.mark.proof
def test_a_crashed_workers_outbox_is_copied_within_a_minute(settings) -> None:
    """Dead peers still look live for a while; the survivor's chores come due as soon as
    they stop counting, so the outbox a crash left is copied well within a minute."""
    from tests import worker_handlers
    from tests.helpers import run_then_crash

    backend = RunnerQ(settings)
    backend.maintenance.init_indexes()
    for n in range(4):  # crashed with the writer: registered, never heartbeating again
        backend.registry.register_worker(f"dead-{n}", types=["job"], concurrency=1)
    crashed_at = time.monotonic()
    aid = run_then_crash(settings, datetime.now(UTC), """
        out = q.enqueue("job", {}, max_retries=1).activity_id
        q.ack_failure(q.dequeue("w", types=["job"])[0], "boom")
    """)
    activities = backend.context.activities
    assert activities.count_documents({"outbox": {"$exists": True}}) == 1
    worker = Worker(backend, worker_handlers.registry, poll_interval=0.2)
    worker.start()
    try:
        wait_until(lambda: not activities.count_documents({"outbox": {"$exists": True}}),
                   timeout=90, interval=0.5, message="the crashed writer's outbox was copied")
        assert time.monotonic() - crashed_at < 65
        assert backend.context.dead_letter.count_documents({"_id": uuid.UUID(aid)}) == 1
    finally:
        worker.stop()
        worker.join(timeout=30)
