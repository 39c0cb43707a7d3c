"""Workers don't spin on a full limit (docs/design.md, "Waiting for a slot"): a claimer
that finds a limited type full waits to be told, by the limit documents' change stream,
that a slot freed anywhere in the fleet; by the clock for what no write announces (a
rate's next start, a stale slot's repair); by polling where the server has no streams.

The change-stream path runs on nx-27017 (CONTRIBUTING.md, "Change streams without
Docker"): it refuses update pipelines, so the take does not run there; the claims run on
the dev server and the test writes each release's twin on nx, as the server's own stream
would report it (the pattern of tests/test_wakeup.py).
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.backend.domain import flow, queries
from runnerq_cli.backend.domain.flow import make_limits
from runnerq_cli.backend.domain.models import Status
from runnerq_cli.backend.store.changes import ChangeWake
from runnerq_cli.backend.store.flowstate import FlowState
from tests import worker_handlers
from tests.nx_fixtures import nx, nx_server
from tests.waiting import wait_until

__all__ = ["nx", "nx_server"]  # fixtures, used by name


def test_the_limit_pipeline_leaves_out_takes(queue: RunnerQ) -> None:
    """A take stamps `taken_at` (the dev server runs the take's pipeline); the waiting
    claimer's stream leaves out the updates that set it: conjunctive field conditions,
    true where an insert or a delete has no `updateDescription`."""
    queue.limits.set(make_limits("charge", concurrency=1))
    queue.enqueue("charge", {})
    assert len(queue.dequeue("w1", types=["charge"])) == 1
    doc = queue.context.limits.find_one({"_id": "charge"})
    assert isinstance(doc["taken_at"], datetime)
    match = queries.limit_changes()[0]["$match"]
    assert not any(key.startswith("$") for key in match)
    assert match["updateDescription.updatedFields.taken_at"] == {"$exists": False}
    assert queries.limit_changes()[-1] == {"$project": {"operationType": 1}}


def test_frees_and_limit_changes_wake(nx) -> None:
    """On nx-27017 (it reports no `updatedFields`, so every update passes there): a
    limit created, a slot released, a repair, a limit changed or removed each wake."""
    limits = nx["runnerq_t_limits"]
    wake = ChangeWake(limits, queries.limit_changes(), lambda: None, max_await=0.05)
    try:
        assert wake.open()
        limits.insert_one({"_id": "charge", "concurrency": 1, "holders": [], "starts": []})
        wait_until(lambda: wake.changes == 1, message="a new limit to wake")
        now = datetime.now(UTC)
        limits.update_one({"_id": "charge"}, flow.release(["L1"]))
        wait_until(lambda: wake.changes == 2, message="the release to wake")
        limits.update_one({"_id": "charge"}, flow.repair(["L9"], now))
        wait_until(lambda: wake.changes == 3, message="the repair to wake")
        limits.update_one({"_id": "charge"}, {"$set": {"concurrency": 2, "updated_at": now}})
        wait_until(lambda: wake.changes == 4, message="a limit set to wake")
        limits.delete_one({"_id": "charge"})
        wait_until(lambda: wake.changes == 5, message="a limit removed to wake")
    finally:
        wake.close()


def test_flow_state_says_when_to_look_again() -> None:
    now = [100.0]
    state = FlowState(clock=lambda: now[0])
    assert state.retry_in() is None and not state.told
    state.block("charge", 3.0)
    state.wake_by(1.5)
    assert state.retry_in() == 1.5
    now[0] += 2
    assert state.retry_in() == 1.0  # the key's time passed: the block's end is next
    state.changed()  # a slot freed elsewhere: every type may be tried at once
    assert not state.blocked("charge") and state.retry_in() is None


class StreamedLimits(RunnerQ):
    """The dev server's queue with its three wake-ups on nx-27017's change streams."""

    signals: Any = None
    wakes: list[ChangeWake]
    claims_sent = 0

    def watch_claimable(self, types: Any, on_change: Any, max_await: float = 1.0) -> Any:
        return self._wake(self.signals, queries.claimable_changes(types), on_change, max_await)

    def watch_pauses(self, on_change: Any, max_await: float = 1.0) -> Any:
        return self._wake(self.signals.database["runnerq_tests_control"],
                          queries.pause_changes(), on_change, max_await)

    def watch_limits(self, on_change: Any, max_await: float = 1.0) -> Any:
        def changed() -> None:
            self.context.flow.changed()
            on_change()
        wake = self._wake(self.signals.database["runnerq_tests_limits"],
                          queries.limit_changes(), changed, max_await)
        self.context.flow.watch = wake
        return wake

    def _wake(self, collection: Any, pipeline: Any, on_change: Any, max_await: float) -> Any:
        wake = ChangeWake(collection, pipeline, on_change, max_await=max_await)
        self.wakes.append(wake)
        return wake

    def dequeue(self, *args: Any, **kwargs: Any) -> Any:
        self.claims_sent += 1
        return super().dequeue(*args, **kwargs)


def _streamed(settings: Any, nx: Any) -> StreamedLimits:
    backend = StreamedLimits(settings)
    backend.maintenance.init_indexes()
    backend.signals, backend.wakes = nx["runnerq_tests_activities"], []
    return backend


@pytest.mark.proof  # watches an idle worker for a second of real time
def test_a_freed_slot_elsewhere_wakes_the_waiting_worker(settings, nx) -> None:
    """Another host holds the only slot: the worker waits on its streams, sending no
    claims, and starts the held-back activity as soon as the slot frees there (it used
    to sleep on its streams until some unrelated work arrived)."""
    from runnerq_cli.worker.engine import Worker

    backend = _streamed(settings, nx)
    backend.limits.set(make_limits("echo", concurrency=1))
    nx["runnerq_tests_limits"].insert_one({"_id": "echo", "holders": []})
    backend.enqueue("echo", {"n": 0})
    elsewhere = backend.dequeue("other-host", types=["echo"])
    assert len(elsewhere) == 1
    held = backend.enqueue("echo", {"n": 1}).activity_id
    worker = Worker(backend, worker_handlers.registry, burst=False, poll_interval=0.2,
                    types=["echo"])
    worker.start()
    try:
        assert worker.running.wait(10)
        wait_until(lambda: len(backend.wakes) == 3 and all(w.live for w in backend.wakes),
                   message="the three streams")
        idle_from = backend.claims_sent
        threading.Event().wait(1.0)  # five poll intervals: polling would claim about five times
        assert backend.claims_sent - idle_from <= 1
        assert backend.get_activity(held).status == Status.PENDING
        backend.ack_success(elsewhere[0], None)  # the slot frees on the other host
        nx["runnerq_tests_limits"].update_one({"_id": "echo"}, flow.release(["x"]))
        wait_until(lambda: backend.get_activity(held).status == Status.COMPLETED, timeout=5,
                   message="the freed slot to wake the worker")
    finally:
        worker.stop()
        worker.join(10)


@pytest.mark.proof  # waits for a rate window of real time
def test_a_rate_wakes_the_waiting_worker_by_the_clock(settings, nx) -> None:
    """No write announces that a rate allows the next start: the worker on its streams
    looks again then, not at its 300 s safety net."""
    from runnerq_cli.worker.engine import Worker

    backend = _streamed(settings, nx)
    backend.limits.set(make_limits("echo", rate="1/2s"))
    ids = [backend.enqueue("echo", {"n": n}).activity_id for n in range(2)]
    worker = Worker(backend, worker_handlers.registry, burst=False, poll_interval=0.2,
                    types=["echo"])
    worker.start()
    try:
        assert worker.running.wait(10)
        wait_until(lambda: all(backend.get_activity(a).status == Status.COMPLETED
                               for a in ids), timeout=10, message="both, a rate period apart")
    finally:
        worker.stop()
        worker.join(10)
    first, second = (backend.get_activity(a) for a in ids)
    assert first.started_at is not None and second.started_at is not None
    assert abs(second.started_at - first.started_at) >= timedelta(seconds=1.9)
