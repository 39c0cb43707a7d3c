"""Change streams as wake-ups (backend/store/changes.py): idle workers woken by the
server, a tail whose reads follow what changes; polling where there are none.

The change-stream path runs on nx-27017 (the dev server has no change streams;
CONTRIBUTING.md, "Change streams without Docker"): what it gets right is asserted
(which writes wake, coalescing, reopening), with activity-shaped documents written
directly (it drops `$setOnInsert` and refuses update pipelines, so the queue's own
writes do not run there).
"""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime
from typing import Any

import pytest
from bson import ObjectId
from pymongo import MongoClient

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.backend.domain import queries
from runnerq_cli.backend.domain.models import Status
from runnerq_cli.backend.store.changes import ChangeWake
from runnerq_cli.backend.views.events import EventStream
from tests import worker_handlers
from tests.nx_fixtures import nx, nx_server
from tests.waiting import wait_until

__all__ = ["nx", "nx_server"]  # fixtures, used by name


def _accepts(port: int) -> bool:
    import socket

    try:
        with socket.create_connection(("127.0.0.1", port), 0.2):
            return True
    except OSError:
        return False


def pending(kind: str, status: str = "pending") -> dict[str, Any]:
    """An activity-shaped document (ObjectId ids: nx-27017 finds no UUID by value)."""
    return {"_id": ObjectId(), "activity_type": kind, "status": status, "priority": 2,
            "created_at": datetime.now(UTC), "payload": {"big": "x" * 500}}


def test_the_pipeline_is_projected_and_conjunctive() -> None:
    """What reaches a waiting worker is a resume token and a kind, never the activity;
    one `$match` of field conditions (no `$or`), true where its part of the event is
    absent, so an insert and an update each pass on their own fields."""
    pipeline = queries.claimable_changes(["mail"])
    assert pipeline[-1] == {"$project": {"operationType": 1}}
    match = pipeline[0]["$match"]
    assert not any(key.startswith("$") for key in match)
    assert match["fullDocument.activity_type"] == {"$in": ["mail", None]}
    assert match["updateDescription.updatedFields.status"] == {"$in": ["pending", None]}
    assert "fullDocument.activity_type" not in queries.claimable_changes()[0]["$match"]
    assert queries.tail_changes()[-1] == {"$project": {"operationType": 1}}


def test_which_writes_wake_an_idle_worker(nx) -> None:
    activities = nx["runnerq_t_activities"]
    woken = threading.Event()
    wake = ChangeWake(activities, queries.claimable_changes(["mail"]), woken.set,
                      max_await=0.05)
    try:
        assert wake.open() and wake.live
        assert woken.is_set()  # opening wakes: what changed before it is read at once
        woken.clear()
        activities.insert_one(pending("mail"))
        wait_until(lambda: wake.changes == 1, message="a pending insert to wake")
        assert woken.is_set()
        # Another type, scheduled work, a claim (status and lease): none of them wakes.
        claimed = pending("mail")
        activities.insert_many([pending("sms"), pending("mail", "scheduled"), claimed])
        wait_until(lambda: wake.changes == 2, message="the claimable one to wake")
        activities.update_one({"_id": claimed["_id"]}, {"$set": {
            "status": "processing", "lease_deadline": datetime.now(UTC)}})
        activities.insert_one(pending("mail"))  # a marker: every change before it is seen
        wait_until(lambda: wake.changes == 3, message="the marker to wake")
        # Back to pending (a retry, a release, the reaper): wakes.
        activities.update_one({"_id": claimed["_id"]}, {"$set": {"status": "pending"}})
        wait_until(lambda: wake.changes == 4, message="a requeue to wake")
    finally:
        wake.close()


def test_without_change_streams_the_worker_polls_quietly(
        backend: RunnerQ, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        wake = backend.watch_claimable((), lambda: None)
        assert wake.open() is False and wake.refused and not wake.live
        assert wake.ensure() is False  # refused: never tried again
    assert [r for r in caplog.records if r.levelno >= logging.INFO] == []


class StreamedBackend(RunnerQ):
    """The dev server's queue with its wake-ups from nx-27017's change stream: the claims
    run where they can, the stream where it exists. The test writes each enqueue's twin
    into `signals`, as the server's own stream would report the enqueue."""

    signals: Any = None
    wakes: list[ChangeWake]
    claims_sent = 0

    def watch_claimable(self, types: Any, on_change: Any, max_await: float = 1.0) -> Any:
        wake = ChangeWake(self.signals, queries.claimable_changes(types), on_change,
                          max_await=max_await)
        self.wakes.append(wake)
        return wake

    def watch_pauses(self, on_change: Any, max_await: float = 1.0) -> Any:
        wake = ChangeWake(self.signals.database["runnerq_tests_control"],
                          queries.pause_changes(), on_change, max_await=max_await)
        self.wakes.append(wake)
        return wake

    def dequeue(self, *args: Any, **kwargs: Any) -> Any:
        self.claims_sent += 1
        return super().dequeue(*args, **kwargs)


@pytest.mark.proof  # watches an idle worker for a second of real time
def test_a_paused_idle_worker_stays_on_its_streams_and_a_resume_wakes_it(settings,
                                                                          nx) -> None:
    """A resume changes no activity: the pause document's own stream wakes the worker
    (it used to poll, one claim per poll interval, for as long as any type was paused)."""
    from runnerq_cli.worker.engine import Worker

    backend = StreamedBackend(settings)
    backend.maintenance.init_indexes()
    backend.signals, backend.wakes = nx["runnerq_tests_activities"], []
    signals = nx["runnerq_tests_control"]
    backend.control.pause(["echo"], reason="test")
    signals.insert_one({"_id": "pause", "all": False, "types": ["echo"]})
    aid = backend.enqueue("echo", {"n": 1}).activity_id
    worker = Worker(backend, worker_handlers.registry, burst=False, poll_interval=0.2)
    worker.start()
    try:
        assert worker.running.wait(10)
        wait_until(lambda: len(backend.wakes) == 2 and all(w.live for w in backend.wakes),
                   message="both streams")
        idle_from = backend.claims_sent
        threading.Event().wait(1.0)  # five poll intervals: polling would claim about five times
        assert backend.claims_sent - idle_from <= 1
        assert backend.get_activity(aid).status == Status.PENDING
        backend.control.resume(["echo"])
        signals.delete_one({"_id": "pause"})
        wait_until(lambda: backend.get_activity(aid).status == Status.COMPLETED, timeout=5,
                   message="the resume to wake the worker")
        # A write to another control document (the partition count) wakes nobody.
        before = backend.wakes[1].changes
        signals.insert_one({"_id": "partitions", "count": 1})
        signals.insert_one({"_id": "pause", "all": True, "types": []})
        wait_until(lambda: backend.wakes[1].changes > before, message="the pause to wake")
        assert backend.wakes[1].changes == before + 1
    finally:
        worker.stop()
        worker.join(10)


@pytest.mark.proof  # watches an idle worker for a second of real time
def test_an_idle_worker_claims_nothing_until_woken(settings, nx) -> None:
    from runnerq_cli.worker.engine import Worker

    backend = StreamedBackend(settings)
    backend.maintenance.init_indexes()
    backend.signals, backend.wakes = nx["runnerq_tests_activities"], []
    worker = Worker(backend, worker_handlers.registry, burst=False, poll_interval=0.2,
                    types=["echo"])
    worker.start()
    try:
        assert worker.running.wait(10)
        wait_until(lambda: backend.wakes and backend.wakes[0].live, message="the stream")
        idle_from = backend.claims_sent
        quiet = threading.Event()
        quiet.wait(1.0)  # five poll intervals: polling would have claimed about five times
        assert backend.claims_sent - idle_from <= 1
        aid = backend.enqueue("echo", {"n": 1}).activity_id
        backend.signals.insert_one(pending("echo"))
        wait_until(lambda: backend.get_activity(aid).status == Status.COMPLETED, timeout=10,
                   message="the woken worker to run it")
    finally:
        worker.stop()
        worker.join(10)
    assert backend.wakes[0].changes >= 1


def test_a_burst_wakes_the_tail_once_not_per_event(nx) -> None:
    events = nx["runnerq_t_events"]
    stream = EventStream(events, mode="change-stream", poll_interval=0.05)
    seen: list[Any] = []

    def consume() -> None:
        for event in stream:
            seen.append(event)
            if len(seen) == 50:
                stream.stop()

    thread = threading.Thread(target=consume)
    thread.start()
    try:
        wait_until(lambda: stream.reads >= 1, message="the tail's first read")
        before = stream.reads
        now = datetime.now(UTC)
        events.insert_many([{"_id": ObjectId(), "activity_id": None, "activity_type": "t",
                             "timestamp": now, "event_type": "Enqueued", "worker_id": "w",
                             "detail": {"n": n}, "ingested_at": now} for n in range(50)])
        thread.join(timeout=30)
        assert len(seen) == 50
        assert stream.reads - before <= 3  # 50 change events, a read or two
    finally:
        stream.stop()
        thread.join(timeout=10)


@pytest.mark.proof  # stops and restarts the change-stream server
def test_a_broken_stream_wakes_its_reader_and_is_reopened(nx_server: str,
                                                          tmp_path) -> None:
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    client: MongoClient[dict[str, Any]] = MongoClient(
        nx_server, serverSelectionTimeoutMS=2000, uuidRepresentation="standard")
    activities = client["rq_nx_break"]["runnerq_t_activities"]
    woken = threading.Event()
    now = [0.0]
    wake = ChangeWake(activities, queries.claimable_changes(), woken.set, max_await=0.05,
                      clock=lambda: now[0])
    port = nx_server.rsplit(":", 1)[1].split("/")[0]
    restarted = None
    try:
        assert wake.open()
        woken.clear()
        os.kill(int((tmp_path / "nx.pid").read_text().strip()), signal.SIGKILL)
        wait_until(lambda: not wake.live, message="the stream to end")
        assert woken.is_set()  # the reader reads, then polls
        assert wake.ensure() is False  # not before REOPEN_EVERY
        exe = str(Path(sys.executable).parent / "nx-27017")
        restarted = subprocess.Popen([exe, "--db", "memory", "--host", "127.0.0.1", "-p", port,
                                      "--pid-file", str(tmp_path / "nx2.pid"),
                                      "--log-file", str(tmp_path / "nx2.log")],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(lambda: _accepts(int(port)), timeout=20, message="nx-27017 to listen again")

        def reopened() -> bool:
            now[0] += 31  # past REOPEN_EVERY for each try (the server may still start)
            return wake.ensure()
        wait_until(reopened, timeout=20, message="the stream to reopen")
        assert wake.opened == 2 and not wake.refused
        woken.clear()
        activities.insert_one(pending("mail"))
        wait_until(woken.is_set, message="the reopened stream to wake")
    finally:
        wake.close()
        client.close()
        if restarted is not None:  # stopped whatever the load: SIGTERM, then SIGKILL
            restarted.terminate()
            try:
                restarted.wait(10)
            except subprocess.TimeoutExpired:
                restarted.kill()
                restarted.wait(10)
