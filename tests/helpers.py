"""Shared test helpers: activities driven to a status, a writer that crashes for real."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.config import Settings

ROOT = Path(__file__).resolve().parent.parent


def partitions_for_tests() -> int:
    """RUNNERQ_TEST_PARTITIONS (default 1): the partition count of the `queue` and
    `backend` fixtures' queue (the public workflow's sharded job sets it); a test that
    writes activity documents by hand gives them a partition when it is above 1."""
    raw = os.environ.get("RUNNERQ_TEST_PARTITIONS", "1")
    try:
        count = int(raw)
    except ValueError:
        raise pytest.UsageError(f"RUNNERQ_TEST_PARTITIONS must be a whole number, "
                                f"got {raw!r}") from None
    if not 1 <= count <= 256:
        raise pytest.UsageError(f"RUNNERQ_TEST_PARTITIONS must be from 1 to 256, got {count}")
    return count


def dev_server_command() -> list[str]:
    """How to start a dev server process that a test can stop and restart: this
    interpreter's `runnerq-mongo dev-server` where mongoeco is installed (Python 3.13+),
    else the `runnerq-mongo` of RUNNERQ_TEST_DEV_SERVER (CI's Python 3.11 run points it
    at the 3.13 environment's), else the test is skipped."""
    if importlib.util.find_spec("mongoeco") is not None:
        return [sys.executable, "-m", "runnerq_cli", "dev-server"]
    external = os.environ.get("RUNNERQ_TEST_DEV_SERVER")
    if external:
        return [external, "dev-server"]
    pytest.skip("the dev server needs mongoeco (Python 3.13+); or set RUNNERQ_TEST_DEV_SERVER "
                "to the runnerq-mongo of a Python 3.13 environment")

# The statuses an activity can have (drive_to also knows "retrying": scheduled, backing off).
ALL_STATES = ("pending", "scheduled", "processing", "completed", "failed", "dead_letter",
              "cancelled")
STATUSES = (*ALL_STATES, "retrying")


def drive_to(queue: RunnerQ, status: str, activity_type: str = "job", *,
             payload: dict[str, Any] | None = None, result: Any = None,
             error: str = "boom", worker_id: str = "w1", clock: Any = None,
             **options: Any) -> uuid.UUID:
    """An activity in `status`, driven there through the real queue operations.

    Never by writing its document: enqueue, dequeue, ack and operator actions
    leave the fields, events, results and dead-letter records the product
    leaves. `scheduled` is a delayed enqueue (600 s); `retrying` is a
    retryable failure with retries left (also status scheduled, backing off);
    `cancelled` is a terminally failed activity retried then cancelled.
    `result` defaults to {"ok": 1}; `error` may name the activity as `{id}`;
    with `clock` (the fake clock) time moves 10 ms before the claim, so the
    steps' events have distinct times. Other options go to `enqueue`.
    """
    if status not in STATUSES:
        raise ValueError(f"unknown status {status!r}")
    payload = {} if payload is None else payload
    if status == "scheduled":
        options.setdefault("delay_seconds", 600)
        return queue.enqueue(activity_type, payload, **options).activity_id
    if status == "dead_letter":
        options.setdefault("max_retries", 1)
    if status == "retrying":
        options.setdefault("max_retries", 5)
    aid = queue.enqueue(activity_type, payload, **options).activity_id
    if status == "pending":
        return aid
    if clock is not None:
        clock.advance(0.01)
    claims = queue.dequeue(worker_id, types=[activity_type])
    assert claims and claims[0].activity_id == aid, "another activity of this type was due"
    claim = claims[0]
    message = error.format(id=aid)
    if status == "completed":
        queue.ack_success(claim, {"ok": 1} if result is None else result)
    elif status in ("failed", "cancelled"):
        queue.ack_failure(claim, message, retryable=False)
        if status == "cancelled":
            queue.operator.retry(aid)
            queue.operator.cancel(aid)
    elif status in ("dead_letter", "retrying"):
        queue.ack_failure(claim, message, retryable=True)
    expected = "scheduled" if status == "retrying" else status
    assert queue.get_activity(aid).status == expected
    return aid


def raw(queue: RunnerQ, aid: uuid.UUID) -> dict[str, Any]:
    """The stored activity document (its outbox left out)."""
    doc = queue.context.activities.find_one({"_id": aid}, {"outbox": 0})
    assert doc is not None
    return doc


def snapshot(queue: RunnerQ) -> list[dict[str, Any]]:
    """Every stored activity document: compare two to prove nothing was written."""
    return sorted(queue.context.activities.find({}, {"outbox": 0}), key=lambda d: d["_id"])


_CRASHING_WRITER = """
import json, os, sys
from datetime import datetime
from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.config import load_settings

args = json.loads(sys.argv[1])
settings = load_settings(None, overrides=args["settings"], environ={"RUNNERQ_CONFIG": ""})
now = datetime.fromisoformat(args["now"])
q = RunnerQ(settings, clock=lambda: now)
out = None
with q.buffered_outbox(10_000):  # every copy (events, results, records) held in memory
    exec(args["steps"])
    print(json.dumps(out, default=str), flush=True)
    os._exit(0)  # the process dies here: nothing it buffered is ever copied out
"""


def run_then_crash(settings: Settings, now: datetime, steps: str) -> Any:
    """Run `steps` (Python using `q`, a RunnerQ buffering its outbox copies, and setting
    `out`) in another process at the fixed time `now`, which then dies without
    flushing; returns `out` as JSON gives it back.

    A real crash after the commits and before the copies, not a doctored object.
    """
    args = {"settings": {"uri": settings.uri, "database": settings.database,
                         "queue": settings.queue},
            "now": now.isoformat(), "steps": textwrap.dedent(steps)}
    proc = subprocess.run([sys.executable, "-c", _CRASHING_WRITER, json.dumps(args)],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def default_signals() -> None:
    """`preexec_fn` for a child a test signals: SIGINT and SIGTERM at their defaults.

    A test run started with `&` from a non-interactive shell has SIGINT ignored,
    and its children would inherit that; a test that sends SIGINT would then
    test nothing (or hang)."""
    import signal

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_DFL)


@contextlib.contextmanager
def worker_log(fmt: str = "json", level: str = "debug") -> Iterator[io.StringIO]:
    """The `runnerq` loggers' lines, as the CLI's `--log-format FMT --log-level LEVEL`
    writes them, captured in a stream while the block runs."""
    from runnerq_cli.worker.logs import configure_logging, unconfigure_logging

    stream = io.StringIO()
    handler = configure_logging(fmt, level, stream=stream)
    try:
        yield stream
    finally:
        unconfigure_logging(handler)


def metrics_parsed(text: str) -> dict[str, Any]:
    """Prometheus text exposition parsed into its families, by name."""
    from prometheus_client.parser import text_string_to_metric_families

    return {f.name: f for f in text_string_to_metric_families(text)}


def metric_value(family: Any, **labels: str) -> float:
    """The one sample of `family` with these labels (fails unless exactly one)."""
    found = [s.value for s in family.samples
             if all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(found) == 1, (labels, family.samples)
    return float(found[0])


def sigterm_after_first_batch(cli_env: dict[str, str], args: tuple[str, ...],
                              records: Any) -> tuple[int, str, str]:
    """Run `runnerq-mongo ARGS` in a process, send it SIGTERM once `records()` (the
    run's audit records) show a first batch of 4 done; (exit code, stdout, stderr)."""
    import signal

    from tests.waiting import wait_until

    proc = subprocess.Popen([sys.executable, "-m", "runnerq_cli", *args], env=cli_env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: any(r["detail"].get("count", 0) >= 4 for r in records()),
                   timeout=60, interval=0.01, message="the first batch")
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, out, err


def http_get(url: str, token: str, timeout: float = 30) -> tuple[int, str]:
    """GET `url` with a bearer token (the console's): the status and the body; status 0
    while nothing listens (a server command restarting, or not up yet)."""
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError as exc:
        return 0, str(exc)
