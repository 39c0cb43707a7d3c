"""Regression tests for defects found in review (one test per fix)."""

from __future__ import annotations

import io
import sys
import time

import pytest

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.backend.models import Status
from runnerq_cli.worker.engine import Worker
from runnerq_cli.worker.handlers import HandlerRegistry
from runnerq_cli.worker.logs import WorkerLog


@pytest.fixture
def backend(settings) -> RunnerQ:
    q = RunnerQ(settings)
    q.init_indexes()
    return q


def test_handler_raising_system_exit_fails_the_attempt_at_once(backend):
    """sys.exit() in a handler is a failed attempt, not a dead slot thread that leaves
    the activity held until its timeout and then runs a stale queued attempt."""
    registry = HandlerRegistry()

    @registry.handler("quits")
    def quits(payload):
        sys.exit(3)

    aid = backend.enqueue("quits", {}, max_retries=1, timeout_seconds=60).activity_id
    worker = Worker(backend, registry, burst=True, poll_interval=0.2, concurrency=1,
                    log=WorkerLog("json", "debug", stream=io.StringIO()))
    worker.start()
    started = time.monotonic()
    worker.join(timeout=20)
    assert worker.exit_code is not None, "worker still waiting on a dead handler thread"
    assert time.monotonic() - started < 20
    act = backend.get_activity(aid)
    assert act.status == Status.DEAD_LETTER
    assert "SystemExit" in (act.last_error or "")


def test_a_stale_buffered_outbox_flush_never_clears_a_newer_outbox(settings, clock):
    """outbox.seq restarts at 1 after every clear, so a late flush of an old snapshot
    (a stalled worker) matched a newer outbox with the same seq and cleared it unread:
    the new claimer's Dequeued/Started events were lost."""
    producer = RunnerQ(settings, clock=clock)
    producer.init_indexes()
    stalled = RunnerQ(settings, clock=clock)
    other = RunnerQ(settings, clock=clock)
    aid = producer.enqueue("job", {}).activity_id
    with stalled.buffered_outbox(100):
        [old] = stalled.dequeue("w-stalled", lease_seconds=5)  # snapshot buffered, seq 1
        clock.advance(6)
        assert producer.requeue_expired()["requeued"] == 1  # copies + clears that outbox
        clock.advance(1)
        with other.buffered_outbox(100):
            [new] = other.dequeue("w-new", lease_seconds=30)  # a new outbox, seq 1 again
            stalled.flush_outbox()  # the stalled worker's late flush
            other.ack_success(new, {"ok": True})
    started_by_new = [e.event_type for e in producer.get_activity_events(aid)
                      if e.worker_id == "w-new"]
    assert {"Dequeued", "Started", "Completed"} <= set(started_by_new)
    assert old.lease_id != new.lease_id


def test_get_result_prefers_the_newer_result_still_in_the_outbox(queue):
    """After a retry, the old Err result is stored; the new run's Ok result waits in the
    outbox of a buffering worker. get_result (and so `wait`/`result`) showed the old one."""
    aid = queue.enqueue("job", {}).activity_id
    [claim] = queue.dequeue("w1")
    queue.ack_failure(claim, "bad input", retryable=False)
    assert queue.get_result(aid).state == "Err"
    queue.retry(aid)
    with queue.buffered_outbox(100):
        [claim] = queue.dequeue("w2")
        queue.ack_success(claim, {"second": "run"})
        result = queue.get_result(aid)
    assert (result.state, result.data) == ("Ok", {"second": "run"})


@pytest.mark.parametrize("fmt", ["plain", "json", "rich"])
def test_worker_log_lines_never_show_a_uri_password(fmt):
    """Handler errors and driver messages may quote a MongoDB URI: the log redacts it."""
    stream = io.StringIO()
    log = WorkerLog(fmt, "debug", stream=stream)
    uri = "mongodb://app:s3cr3t-pw@db.example:27017/x"
    log.message("warning", "claim failed; retrying", error=f"ServerSelectionTimeoutError: {uri}")
    log.outcome("retrying", "job", "id-1", 1, 0.1, f"could not reach {uri}")
    text = stream.getvalue()
    assert "s3cr3t-pw" not in text
    assert "app:****@db.example" in text


@pytest.mark.parametrize("uri", [
    "mongodb://u:hunt/er2@localhost",          # unescaped '/' in the password
    "mongodb://u:p@ss-hunter2@localhost:1/",   # unescaped '@' in the password
    "MONGODB://u:hunter2@localhost",           # scheme in capitals (refused, echoed)
    "u:hunter2@localhost",                     # scheme forgotten (refused, echoed)
])
def test_mistyped_uris_never_show_their_password(run_cli, uri):
    """The URIs an operator gets wrong are the ones echoed back in errors and `config show`."""
    secret = "hunter2" if "hunter2" in uri else "er2"
    for args in (("--uri", uri, "config", "show"), ("--uri", uri, "stats")):
        result = run_cli(*args)
        assert secret not in result.stdout + result.stderr, args
    shown = run_cli("--uri", uri, "config", "show")
    assert "u:****@" in shown.stdout + shown.stderr


def test_a_result_mongodb_cannot_store_fails_the_activity_instead_of_stranding_it(backend):
    """A JSON-valid result BSON refuses (an int past 64 bits) made every ack raise: the
    worker retried the ack for 30 s, then left the claim to the reaper, which ran the
    handler again, and again."""
    registry = HandlerRegistry()

    @registry.handler("huge_int")
    def huge_int(payload):
        return {"n": 2**70}

    aid = backend.enqueue("huge_int", {}, timeout_seconds=60).activity_id
    worker = Worker(backend, registry, burst=True, poll_interval=0.2,
                    log=WorkerLog("json", "debug", stream=io.StringIO()))
    worker.start()
    worker.join(timeout=15)
    assert worker.exit_code is not None, "worker stuck retrying an ack that cannot succeed"
    act = backend.get_activity(aid)
    assert act.status == Status.FAILED
    assert "cannot be stored" in (act.last_error or "")
