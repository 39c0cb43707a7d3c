"""examples/order_saga.py runs as written: in a worker in this process (approval,
fan-out, refunds), and in worker subprocesses killed with SIGKILL mid-run, where no step
runs twice after its checkpoint, no child is spawned twice, and an approval sent while
no worker runs is not lost. What really happened is counted from the example's ledger
file (its stand-in for the payment provider and the courier)."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.backend.domain.models import Status
from runnerq_cli.worker.engine import Worker
from tests.helpers import default_signals
from tests.waiting import wait_until

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _load() -> Any:
    spec = importlib.util.spec_from_file_location("examples_order_saga",
                                                  EXAMPLES / "order_saga.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def ledger(path: Path) -> Counter[str]:
    return Counter(path.read_text().splitlines()) if path.exists() else Counter()


def raw(backend: RunnerQ, activity_id: Any) -> dict[str, Any]:
    return backend.context.activities.find_one({"_id": activity_id})


def ended(backend: RunnerQ, activity_id: Any, timeout: float = 60) -> dict[str, Any]:
    return wait_until(lambda: (doc := raw(backend, activity_id))["status"] in (
        Status.COMPLETED, Status.FAILED, Status.DEAD_LETTER) and doc, timeout,
        message="the order to end")


def parked_on_signal(backend: RunnerQ, activity_id: Any) -> bool:
    doc = raw(backend, activity_id)
    return doc["status"] == "waiting" and doc["parked"]["kind"] == "signal"


@pytest.fixture
def saga(backend: RunnerQ, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The example's handlers on a worker in this process; yields the ledger's path."""
    path = tmp_path / "ledger"
    monkeypatch.setenv("ORDER_SAGA_LEDGER", str(path))
    worker = Worker(backend, _load().registry, concurrency=4, poll_interval=0.1)
    worker.start()
    yield path
    worker.stop(force=True)
    worker.join(15)


ORDER = {"order": "A-17", "amount": 4200, "parcels": ["p1", "p2", "p3"]}


def test_the_saga_charges_waits_for_approval_and_ships_every_parcel(backend, saga) -> None:
    a = backend.enqueue("order", ORDER, idempotency_key="A-17").activity_id
    wait_until(lambda: parked_on_signal(backend, a), message="the approval wait")
    assert backend.durable.signal_by_key("order", "A-17", "approval", "ada") is True
    doc = ended(backend, a)
    assert doc["status"] == Status.COMPLETED, doc.get("last_error")
    assert backend.get_result(a).data == {
        "order": "A-17", "charge": "ch-A-17", "approved_by": "ada",
        "tracking": ["track-A-17-p1", "track-A-17-p2", "track-A-17-p3"]}
    assert ledger(saga) == Counter({"charge A-17": 1, "ship A-17/p1": 1, "ship A-17/p2": 1,
                                    "ship A-17/p3": 1})


def test_a_lost_parcel_refunds_the_charge_once(backend, saga) -> None:
    a = backend.enqueue("order", {**ORDER, "parcels": ["p1", "lost-2"]}).activity_id
    wait_until(lambda: parked_on_signal(backend, a), message="the approval wait")
    backend.durable.signal(a, "approval", "ada")
    doc = ended(backend, a)
    assert doc["status"] == Status.FAILED
    assert "order A-17 failed and was refunded (4200)" in doc["last_error"]
    assert "parcel lost-2 cannot be shipped" in doc["last_error"]
    assert ledger(saga)["refund ch-A-17"] == 1 and ledger(saga)["charge A-17"] == 1


def test_no_approval_in_time_refunds(backend, saga) -> None:
    a = backend.enqueue("order", {**ORDER, "approval_timeout": 0.5}).activity_id
    doc = ended(backend, a)
    assert doc["status"] == Status.FAILED and "no signal 'approval'" in doc["last_error"]
    assert ledger(saga) == Counter({"charge A-17": 1, "refund ch-A-17": 1})
    assert backend.durable.children(a) == []  # nothing shipped


# ------------------------------------------------------------ killed workers


class WorkerProcess:
    """`runnerq-mongo worker --app order_saga` in the examples directory."""

    def __init__(self, env: dict[str, str], ship_seconds: float) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "runnerq_cli", "worker", "--app", "order_saga",
             "--lease", "2s", "--poll-interval", "0.1s", "--log-level", "warning"],
            cwd=EXAMPLES, env={**env, "ORDER_SAGA_SHIP_SECONDS": str(ship_seconds)},
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            preexec_fn=default_signals)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)


@pytest.fixture
def workers() -> Iterator[list[WorkerProcess]]:
    started: list[WorkerProcess] = []
    yield started
    for worker in started:
        if worker.proc.poll() is None:
            worker.kill()


@pytest.mark.proof  # worker processes SIGKILLed, leases waited out
def test_sigkilled_workers_run_no_step_twice_and_spawn_no_child_twice(
        backend, cli_env, tmp_path, workers) -> None:
    path = tmp_path / "ledger"
    env = {**cli_env, "RUNNERQ_DATABASE": backend.settings.database,
           "RUNNERQ_QUEUE": backend.settings.queue, "ORDER_SAGA_LEDGER": str(path),
           "PYTHONPATH": str(EXAMPLES.parent)}
    a = backend.enqueue("order", ORDER, idempotency_key="A-17", max_retries=5).activity_id
    workers.append(WorkerProcess(env, ship_seconds=0))
    wait_until(lambda: parked_on_signal(backend, a), 60, message="the approval wait")
    workers[-1].kill()  # 1. killed while the order waits: nobody runs it now
    assert backend.durable.signal_by_key("order", "A-17", "approval", "ada") is True
    assert raw(backend, a)["status"] == Status.PENDING  # the approval is kept, not lost

    workers.append(WorkerProcess(env, ship_seconds=5))
    wait_until(lambda: len(backend.durable.children(a)) == 3
               and any(line.startswith("ship") for line in ledger(path)), 60,
               message="the parcels to be shipping")
    checkpointed = {(s.kind, s.name) for s in backend.durable.steps(a)}
    booked = {c["_id"] for c in backend.durable.children(a)
              if backend.durable.steps(c["_id"])}  # children whose booking was stored
    workers[-1].kill()  # 2. killed mid-run: children in their slow booking step
    assert ("run", "charge") in checkpointed

    workers.append(WorkerProcess(env, ship_seconds=0))
    doc = ended(backend, a, timeout=90)
    assert doc["status"] == Status.COMPLETED, doc.get("last_error")
    assert backend.get_result(a).data["tracking"] == [
        "track-A-17-p1", "track-A-17-p2", "track-A-17-p3"]
    counts = ledger(path)
    assert counts["charge A-17"] == 1  # checkpointed before both kills: never again
    children = backend.durable.children(a)  # spawned by two runs of the order: once each
    assert len(children) == 3 and len({c["idempotency_key"] for c in children}) == 3
    for child in children:
        parcel = backend.get_activity(child["_id"]).payload["parcel"]
        # a booking stored before the kill never runs again; one killed before its
        # checkpoint runs again (at least once), and only once more
        assert counts[f"ship A-17/{parcel}"] == (1 if child["_id"] in booked else
                                                 counts[f"ship A-17/{parcel}"])
        assert 1 <= counts[f"ship A-17/{parcel}"] <= 2
