"""Worker logs are standard `logging` records on the `runnerq` hierarchy: an application
that embeds the worker routes, filters and formats them itself; the library prints nothing
of its own."""

from __future__ import annotations

import io
import json
import logging

import pytest

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.worker.engine import Worker
from runnerq_cli.worker.logs import WorkerLog, configure_logging, unconfigure_logging
from tests import worker_handlers


def _backend(settings) -> RunnerQ:
    backend = RunnerQ(settings)
    backend.init_indexes()
    return backend


def test_an_embedding_app_captures_the_worker_records(settings, caplog, capsys):
    backend = _backend(settings)
    ok = backend.enqueue("echo", {"x": 1}).activity_id
    bad = backend.enqueue("fatal", {}).activity_id
    caplog.set_level(logging.INFO, logger="runnerq")
    # No `log=`: the worker only emits records; the app's logging decides where they go.
    worker = Worker(backend, worker_handlers.registry, burst=True, poll_interval=0.2)
    assert worker.run(install_signals=False) == 0

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
        log = WorkerLog("json", "info")  # no stream: through the hierarchy
        log.message("warning", "claim failed; retrying",
                    error="connect mongodb://app:s3cret@db.example/x")
        log.message("debug", "not shown at info")
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
    stream = io.StringIO()
    log = WorkerLog(fmt, "debug", stream=stream)
    uri = "mongodb://app:s3cr3t-pw@db.example:27017/x"
    log.message("warning", "claim failed; retrying", error=f"ServerSelectionTimeoutError: {uri}")
    log.outcome("retrying", "job", "id-1", 1, 0.1, f"could not reach {uri}")
    text = stream.getvalue()
    assert "s3cr3t-pw" not in text
    assert "app:****@db.example" in text
