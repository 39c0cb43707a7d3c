"""examples/order_saga.py with its worker SIGKILLed at each step boundary in turn.

Each case runs the saga in a worker process (`--app tests.saga_kill_handlers`: the
example's handlers, unchanged, with kill points around their `ctx` calls) that kills
itself at one named point, then finishes it on a fresh worker. Whatever the point:

- the saga ends once, with the outcome of a run nobody killed (completed, or failed and
  refunded);
- each side effect (the example's ledger: charge, ship, refund) ran once, except a step
  the kill interrupted mid-way, between its function and its checkpoint, which runs
  exactly once more; a step that checkpointed never runs again;
- each parcel's child exists once, and nothing is left pending, running or waiting.

Leases are 2 s, so the reaper hands the killed worker's claims on within seconds.
"""

from __future__ import annotations

import contextlib
import json
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
from tests import saga_kill_handlers
from tests.helpers import default_signals
from tests.waiting import wait_until

pytestmark = pytest.mark.proof
ROOT = Path(__file__).resolve().parents[1]
ORDER = {"order": "A-17", "amount": 4200, "parcels": ["p1", "p2", "p3"]}
LOST = {**ORDER, "parcels": ["p1", "lost-2"]}  # lost-2 fails for good: the refund path
# The ledger line of each step (the example's stand-in side effects).
LINES = {"charge": "charge A-17", "refund": "refund ch-A-17",
         **{f"book:{p}": f"ship A-17/{p}" for p in ("p1", "p2", "p3", "lost-2")}}

# (kill point, the order, the killed worker's concurrency). One slot while the order
# runs alone, so its spawned children wait and the order parks on them; four where the
# children run side by side (a sibling caught mid-step is named in the kill's report).
POINTS = [
    ("charge:mid", ORDER, 1),       # charged, the charge not checkpointed
    ("charge:after", ORDER, 1),     # the charge checkpointed
    ("approval:parked", ORDER, 1),  # parked on the approval signal
    ("approval:after", ORDER, 1),   # woken with the approval, nothing spawned
    ("ship:p1:after", ORDER, 1),    # each spawn stored, the next not
    ("ship:p2:after", ORDER, 1),
    ("ship:p3:after", ORDER, 1),
    ("wait_all:parked", ORDER, 1),  # parked on the children
    ("book:p1:before", ORDER, 4),   # a child claimed, its booking not started
    ("book:p2:mid", ORDER, 4),      # a courier booked, the booking not checkpointed
    ("book:p3:after", ORDER, 4),    # a booking checkpointed, the child's result not stored
    ("wait_all:after", ORDER, 4),   # every child done, the order's result not stored
    ("refund:mid", LOST, 4),        # a parcel lost: refunded, not checkpointed
    ("refund:after", LOST, 4),      # the refund checkpointed, the failure not stored
]


def ledger(path: Path) -> Counter[str]:
    return Counter(path.read_text().splitlines()) if path.exists() else Counter()


def raw(backend: RunnerQ, activity_id: Any) -> dict[str, Any]:
    return backend.context.activities.find_one({"_id": activity_id})


class Approver:
    """Sends the approval once, when the order is parked waiting for it."""

    def __init__(self, backend: RunnerQ, activity_id: Any) -> None:
        self.backend, self.activity_id, self.sent = backend, activity_id, False

    def __call__(self) -> None:
        if self.sent:
            return
        doc = raw(self.backend, self.activity_id)
        if doc["status"] == "waiting" and doc["parked"]["kind"] == "signal":
            self.backend.durable.signal(self.activity_id, "approval", "ada")
            self.sent = True


@pytest.fixture
def killed_worker() -> Iterator[list[subprocess.Popen[str]]]:
    """The killed workers' processes; any still alive after a failure is killed."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)


def kill_at(env: dict[str, str], point: str, concurrency: int, approve: Approver,
            started: list[subprocess.Popen[str]], log: Path) -> list[str]:
    """Run a worker that kills itself at `point`; the steps it caught mid-way."""
    with log.open("w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "runnerq_cli", "worker", "--app",
             "tests.saga_kill_handlers", "--lease", "2s", "--poll-interval", "0.1s",
             "--log-level", "warning", "--concurrency", str(concurrency)],
            cwd=ROOT, env={**env, "ORDER_SAGA_KILL_AT": point}, stdout=subprocess.DEVNULL,
            stderr=stderr, text=True, preexec_fn=default_signals)
    started.append(proc)

    def dead() -> bool:
        approve()
        return proc.poll() is not None

    wait_until(dead, 60, message=f"the worker to kill itself at {point}")
    assert proc.returncode == -signal.SIGKILL, log.read_text()[-2000:]
    report = json.loads(Path(env["ORDER_SAGA_KILL_REPORT"]).read_text())
    assert report["point"] == point
    return list(report["in_flight"])


def finish(backend: RunnerQ, activity_id: Any, approve: Approver) -> dict[str, Any]:
    """A fresh worker (the example's own handlers) runs the saga to its end."""
    worker = Worker(backend, saga_kill_handlers.saga.registry, concurrency=4,
                    poll_interval=0.1, lease=4)
    worker.start()
    try:
        def ended() -> dict[str, Any] | None:
            approve()
            doc = raw(backend, activity_id)
            return doc if doc["status"] in (Status.COMPLETED, Status.FAILED,
                                             Status.DEAD_LETTER) else None

        try:
            return wait_until(ended, 90, message="the order to end")
        except AssertionError as exc:  # say where the saga stands
            tree = [{k: d.get(k) for k in ("activity_type", "status", "parked", "payload",
                                           "retry_count", "waiting_result_id")}
                    for d in backend.context.activities.find()]
            raise AssertionError(f"{exc}: {tree}") from None
    finally:
        worker.stop(force=True)
        worker.join(15)


@pytest.mark.parametrize(("point", "payload", "concurrency"), POINTS,
                         ids=[point for point, _, _ in POINTS])
def test_the_saga_killed_at_a_step_ends_once_with_no_checkpointed_step_run_again(
        backend: RunnerQ, cli_env: dict[str, str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, killed_worker: list[subprocess.Popen[str]],
        point: str, payload: dict[str, Any], concurrency: int) -> None:
    path = tmp_path / "ledger"
    monkeypatch.setenv("ORDER_SAGA_LEDGER", str(path))  # the fresh worker, in this process
    env = {**cli_env, "RUNNERQ_DATABASE": backend.settings.database,
           "RUNNERQ_QUEUE": backend.settings.queue, "ORDER_SAGA_LEDGER": str(path),
           "ORDER_SAGA_KILL_REPORT": str(tmp_path / "killed.json"),
           "PYTHONPATH": str(ROOT)}
    a = backend.enqueue("order", payload, idempotency_key="A-17", max_retries=3).activity_id
    approve = Approver(backend, a)

    caught = kill_at(env, point, concurrency, approve, killed_worker, tmp_path / "worker.err")
    doc = finish(backend, a, approve)

    if payload is ORDER:
        assert doc["status"] == Status.COMPLETED, doc.get("last_error")
        assert backend.get_result(a).data == {
            "order": "A-17", "charge": "ch-A-17", "approved_by": "ada",
            "tracking": ["track-A-17-p1", "track-A-17-p2", "track-A-17-p3"]}
    else:
        assert doc["status"] == Status.FAILED, doc.get("last_error")
        assert "order A-17 failed and was refunded (4200)" in doc["last_error"]
    # Ended once: one terminal outcome in the order's history (a kill is a `Requeued` by
    # the reaper, never an outcome of its own).
    events = Counter(e.event_type for e in backend.get_activity_events(a, limit=500))
    assert (events["Completed"], events["Failed"], events["DeadLetter"]) == (
        int(payload is ORDER), int(payload is LOST), 0), events

    # Each side effect once; the step killed mid-way exactly once more; a sibling the kill
    # caught mid-step (named by the report) at most once more.
    killed_step = point.rsplit(":", 1)[0] if point.endswith(":mid") else None
    counts = ledger(path)
    expected = {LINES["charge"]} | {LINES[f"book:{p}"] for p in payload["parcels"]}
    expected |= {LINES["refund"]} if payload is LOST else set()
    assert set(counts) == expected, counts
    for step, line in LINES.items():
        if line not in expected:
            continue
        if step == killed_step:
            assert counts[line] == 2, (line, counts)
        elif step in caught:
            assert 1 <= counts[line] <= 2, (line, counts)
        else:
            assert counts[line] == 1, (line, counts, caught)

    # Each parcel's child once, and nothing left pending, running or waiting.
    children = backend.durable.children(a)
    parcels = sorted(backend.get_activity(c["_id"]).payload["parcel"] for c in children)
    assert parcels == sorted(payload["parcels"])
    assert backend.context.activities.count_documents({"activity_type": "ship_parcel"}) == \
        len(payload["parcels"])
    left = list(backend.context.activities.find(
        {"status": {"$nin": [Status.COMPLETED, Status.FAILED]}}, {"status": 1}))
    assert left == []
    assert backend.context.activities.count_documents({"spawn_fence": {"$exists": True}}) == 0
