"""The worker registry: who is working, and how many share the maintenance chores."""

from __future__ import annotations

import io

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.worker.engine import FLEET_STALE_AFTER, Worker
from runnerq_cli.worker.handlers import HandlerRegistry
from runnerq_cli.worker.logs import WorkerLog
from tests.waiting import wait_until


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


def test_a_running_worker_counts_in_the_fleet_that_shares_the_chores(settings) -> None:
    """A worker spreads the shared chores over the live workers it counts in the registry:
    a running worker is one of them (with its heartbeat), a cleanly stopped one is not."""
    backend = RunnerQ(settings)
    backend.init_indexes()
    for n in range(3):
        backend.register_worker(f"peer-{n}")
    registry = HandlerRegistry()
    registry.add("noop", lambda payload: None)
    worker = Worker(backend, registry, poll_interval=0.1,
                    log=WorkerLog("plain", "error", stream=io.StringIO()))
    worker.start()
    try:
        wait_until(lambda: worker.worker_id in {w.worker_id for w in backend.list_workers()},
                   message="the worker to register")
        assert backend.count_live_workers(FLEET_STALE_AFTER) == 4
        [me] = [w for w in backend.list_workers() if w.worker_id == worker.worker_id]
        assert not me.stale
    finally:
        worker.stop()
        assert worker.join(10) == 0
    assert backend.count_live_workers(FLEET_STALE_AFTER) == 3
