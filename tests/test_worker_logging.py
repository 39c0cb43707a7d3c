"""Worker logs are standard `logging` records on the `runnerq` hierarchy: an application
that embeds the worker routes, filters and formats them itself; the library prints nothing
of its own."""

from __future__ import annotations

import io
import json
import logging
import re

import pytest

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.worker.engine import Worker, WorkerEnd
from runnerq_cli.worker.handlers import HandlerRegistry, NonRetryableError
from runnerq_cli.worker.logs import (
    attempt_details,
    attempt_message,
    configure_logging,
    details,
    unconfigure_logging,
)
from tests import worker_handlers
from tests.helpers import drive_to, run_then_crash, worker_log


def _backend(settings) -> RunnerQ:
    backend = RunnerQ(settings)
    backend.maintenance.init_indexes()
    return backend


def test_an_embedding_app_captures_the_worker_records(settings, caplog, capsys):
    backend = _backend(settings)
    ok = backend.enqueue("echo", {"x": 1}).activity_id
    bad = backend.enqueue("fatal", {}).activity_id
    caplog.set_level(logging.INFO, logger="runnerq")
    # No `log=`: the worker only emits records; the app's logging decides where they go.
    worker = Worker(backend, worker_handlers.registry, burst=True, poll_interval=0.2)
    assert worker.run(install_signals=False) == WorkerEnd.STOPPED

    records = [r for r in caplog.records if r.name == "runnerq.worker"]
    outcomes = {r.activity_id: r for r in records if getattr(r, "outcome", None)}
    assert outcomes[str(ok)].outcome == "completed"
    assert outcomes[str(ok)].levelno == logging.INFO
    assert outcomes[str(bad)].outcome == "failed"
    assert outcomes[str(bad)].levelno == logging.ERROR
    assert "bad input" in outcomes[str(bad)].error
    started = next(r for r in records if r.getMessage() == "worker started")
    assert started.fields["worker"] == worker.worker_id
    # The library added no handler that writes anywhere: nothing on stderr.
    assert capsys.readouterr().err == ""


def test_a_worker_on_a_queue_without_its_indexes_says_so_once(settings, caplog):
    """A queue whose `init-indexes` was never run works, but on a real server each claim
    scans the collection: the worker warns once at start, naming the fix; with the
    indexes made it says nothing."""
    bare = RunnerQ(settings)
    bare.enqueue("echo", {})
    caplog.set_level(logging.WARNING, logger="runnerq")

    def warnings() -> list[logging.LogRecord]:
        return [r for r in caplog.records if "lack their indexes" in r.getMessage()]

    worker = Worker(bare, worker_handlers.registry, burst=True, poll_interval=0.2)
    assert worker.run(install_signals=False) == WorkerEnd.STOPPED
    [warned] = warnings()
    assert warned.levelno == logging.WARNING
    assert warned.fields["fix"] == f"runnerq-mongo --queue {settings.queue} init-indexes"
    assert warned.fields["missing"] >= 4
    caplog.clear()
    bare.maintenance.init_indexes()
    bare.enqueue("echo", {})
    worker = Worker(bare, worker_handlers.registry, burst=True, poll_interval=0.2)
    assert worker.run(install_signals=False) == WorkerEnd.STOPPED
    assert warnings() == []


def test_the_app_filters_by_level_on_the_runnerq_logger(settings, caplog):
    backend = _backend(settings)
    backend.enqueue("echo", {})
    backend.enqueue("fatal", {})
    caplog.set_level(logging.ERROR, logger="runnerq")
    Worker(backend, worker_handlers.registry, burst=True, poll_interval=0.2).run(
        install_signals=False)
    worker_records = [r for r in caplog.records if r.name.startswith("runnerq")]
    assert worker_records and all(r.levelno >= logging.ERROR for r in worker_records)
    assert [r.outcome for r in worker_records if getattr(r, "outcome", None)] == ["failed"]


def test_cli_configuration_writes_json_lines_and_redacts(settings):
    """What `worker --log-format json` installs: one handler on `runnerq`, passwords masked."""
    stream = io.StringIO()
    handler = configure_logging("json", "info", stream=stream)
    try:
        log = logging.getLogger("runnerq.worker")
        log.warning("claim failed; retrying",
                    extra=details(error="connect mongodb://app:s3cret@db.example/x"))
        log.debug("not shown at info", extra=details())
        logging.getLogger("runnerq.backend").info("from elsewhere in the library")
    finally:
        unconfigure_logging(handler)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [line["msg"] for line in lines] == ["claim failed; retrying",
                                                "from elsewhere in the library"]
    assert "s3cret" not in stream.getvalue() and "app:****@db.example" in lines[0]["error"]
    assert lines[1]["logger"] == "runnerq.backend"
    assert handler not in logging.getLogger("runnerq").handlers
    assert logging.getLogger("runnerq").level == logging.NOTSET  # as it was


@pytest.mark.parametrize("fmt", ["plain", "json", "rich"])
def test_worker_log_lines_never_show_a_uri_password(fmt):
    """Handler errors and driver messages may quote a MongoDB URI: the log redacts it."""
    log = logging.getLogger("runnerq.worker")
    uri = "mongodb://app:s3cr3t-pw@db.example:27017/x"
    with worker_log(fmt, "debug") as stream:
        log.warning("claim failed; retrying",
                    extra=details(error=f"ServerSelectionTimeoutError: {uri}"))
        attempt = ("retrying", "job", "id-1", 1, 0.1, f"could not reach {uri}")
        log.warning(attempt_message(*attempt), extra=attempt_details(*attempt))
    text = stream.getvalue()
    assert "s3cr3t-pw" not in text
    assert "app:****@db.example" in text


FORGED = "job\x1b[2J\nINFO    completed forged 00000000 attempt=1 \u202e"


@pytest.mark.parametrize("fmt", ["plain", "rich"])
def test_an_activity_type_cannot_forge_log_lines(settings, fmt):
    """A type or error holding ESC, a newline or a bidi override shows as inert text:
    one line per record, no control character on the terminal."""
    backend = _backend(settings)
    registry = HandlerRegistry()

    @registry.handler(FORGED)
    def refuse(payload):
        raise NonRetryableError("bad\r\nERROR   forged \x1b]0;title\x07")

    aid = backend.enqueue(FORGED, {}).activity_id
    with worker_log(fmt, "info") as stream:
        Worker(backend, registry, burst=True, poll_interval=0.2).run(install_signals=False)
    text = stream.getvalue()
    assert not any(c in text for c in "\x1b\x07\r\u202e")
    lines = text.splitlines()
    if fmt == "rich":  # rich folds a long record into its message column, indented
        # Records start with a time (left out when it repeats) and a level in columns 9-17.
        records = [line for line in lines
                   if re.match(r"(\d\d:\d\d:\d\d| {8}) (INFO|ERROR) ", line)]
        assert len(records) == 3, text
        assert "ERROR    failed        job\\x1b[2J\\nINFO" in text
        return
    assert len(lines) == 3, text  # worker started, the failed attempt, worker stopped
    failed = [line for line in lines if "worker st" not in line]
    assert len(failed) == 1 and "failed" in failed[0], text
    assert "job\\x1b[2J\\nINFO" in failed[0] and "\\u202e" in failed[0]
    assert "forged" in failed[0] and not any(
        line.lstrip().startswith(("INFO    completed forged", "ERROR   forged"))
        for line in text.splitlines())
    if fmt == "plain":
        assert str(aid) in failed[0]


def test_json_lines_keep_the_exact_type(settings):
    backend = _backend(settings)
    registry = HandlerRegistry()
    registry.add(FORGED, lambda payload: None)
    backend.enqueue(FORGED, {})
    with worker_log("json", "info") as stream:
        Worker(backend, registry, burst=True, poll_interval=0.2).run(install_signals=False)
    records = [json.loads(line) for line in stream.getvalue().splitlines()]
    [done] = [r for r in records if r.get("event") == "activity"]
    assert done["activity_type"] == FORGED and done["outcome"] == "completed"


def test_the_backend_logs_what_its_maintenance_did(settings, queue, clock):
    """The reaper, outbox repair and retention say at INFO on `runnerq.backend` what they
    did, and say nothing when they did nothing."""
    lease_lost = drive_to(queue, "pending", "job")
    queue.dequeue("w1", types=["job"], lease_seconds=5)
    finished = drive_to(queue, "completed", "done")
    with worker_log("json", "info") as quiet:
        assert queue.requeue_expired() == {"requeued": 0, "dead_lettered": 0, "malformed": 0}
        assert queue.maintenance.repair_outboxes() == 0
        assert queue.maintenance.purge_expired() == {"completed": 0, "failed": 0}
    assert quiet.getvalue() == ""

    clock.advance(6)
    with worker_log("json", "info") as stream:
        assert queue.requeue_expired()["requeued"] == 1
    [reaped] = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert reaped["logger"] == "runnerq.backend" and reaped["level"] == "info"
    assert (reaped["msg"], reaped["requeued"], reaped["dead_lettered"]) == (
        "reaper: expired leases", 1, 0)
    assert queue.get_activity(lease_lost).status == "pending"

    clock.advance(settings.retention_completed + 1)
    with worker_log("plain", "info") as stream:
        assert queue.maintenance.purge_expired()["completed"] == 1
    assert "retention purge" in stream.getvalue() and "completed=1 failed=0" in stream.getvalue()
    assert queue.context.activities.count_documents({"_id": finished}) == 0


def test_outbox_repair_logs_how_many_it_copied(settings, backend):
    from datetime import UTC, datetime

    run_then_crash(settings, datetime.now(UTC), """
        out = q.enqueue("job", {}, max_retries=1).activity_id
        q.ack_failure(q.dequeue("w", types=["job"])[0], "boom")
    """)
    with worker_log("plain", "info") as stream:
        assert backend.maintenance.repair_outboxes(0) == 1
    [line] = stream.getvalue().splitlines()
    assert " INFO    outbox repair: " in line and line.endswith(" repaired=1")


def test_a_retry_line_says_how_long_it_ran_and_when_it_runs_again(queue, run_cli,
                                                                   run_cli_subprocess):
    """`retrying charge ID attempt=1 ran=0.030s retry_in=2s`: a bare `seconds=0.030` beside
    a retry read as its back-off. The back-off is the activity's (1 s base, doubled)."""
    aid = queue.enqueue("charge", {}, retry_delay_seconds=1).activity_id
    res = run_cli_subprocess("worker", "--burst", "--exec", "charge=false",
                             "--log-format", "plain")
    assert res.code == 0, res.stderr
    (line,) = [ln for ln in res.stderr.splitlines() if " retrying " in ln] or [res.stderr]
    assert re.search(rf"WARNING retrying charge {aid} attempt=1 ran=\d+\.\d{{3}}s "
                      r"retry_in=2s error=", line), line
    assert "seconds=" not in line
    res = run_cli_subprocess("run-now", str(aid), "--yes")
    assert res.code == 0, res.stderr
    res = run_cli_subprocess("worker", "--burst", "--exec", "charge=false",
                             "--log-format", "json")
    (record,) = [json.loads(ln) for ln in res.stderr.splitlines() if '"retrying"' in ln]
    assert record["attempt"] == 2 and record["retry_in_seconds"] == 4.0
    assert isinstance(record["ran_seconds"], float) and "seconds" not in record
