"""The worker registry: who is working, and how many share the maintenance chores."""

from __future__ import annotations

import io

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.worker.engine import Worker
from runnerq_cli.worker.handlers import HandlerRegistry
from runnerq_cli.worker.logs import WorkerLog


def test_live_workers_are_counted_and_stale_ones_are_not(queue: RunnerQ, clock) -> None:
    queue.register_worker("old", types=["a"], concurrency=2)
    clock.advance(60)
    queue.register_worker("w1")
    queue.register_worker("w2")
    assert queue.count_live_workers(stale_after=30) == 2
    listed = {w.worker_id: w for w in queue.list_workers(stale_after=30)}
    assert listed["old"].stale and not listed["w1"].stale
    queue.unregister_worker("w1")
    assert queue.count_live_workers(stale_after=30) == 1


def test_a_worker_spreads_shared_chores_over_the_live_fleet(queue: RunnerQ) -> None:
    for n in range(3):
        queue.register_worker(f"peer-{n}")
    registry = HandlerRegistry()
    registry.add("noop", lambda payload: None)
    worker = Worker(queue, registry, log=WorkerLog("plain", "error", stream=io.StringIO()))
    queue.register_worker(worker.worker_id)
    worker._heartbeat()  # what the maintenance loop does every few seconds
    assert worker._fleet == 4
