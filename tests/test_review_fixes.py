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
