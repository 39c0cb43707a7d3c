"""The public entry point: `connect()` returns a `RunnerQ` for one queue."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from runnerq_cli.backend.audit import AuditOperations
from runnerq_cli.backend.bulk import BulkOperations
from runnerq_cli.backend.connection import client_for, translate_errors
from runnerq_cli.backend.context import QueueContext, utc_now
from runnerq_cli.backend.control import ControlOperations
from runnerq_cli.backend.dlq import DeadLetterOperations
from runnerq_cli.backend.indexes import IndexReport, ensure_indexes
from runnerq_cli.backend.inspection import InspectionOperations
from runnerq_cli.backend.operator import OperatorOperations
from runnerq_cli.backend.queue import QueueOperations
from runnerq_cli.backend.workers import WorkerRegistryOperations
from runnerq_cli.config import Settings, load_settings


def _unavailable_as_error(cls: type) -> type:
    """Wrap every public operation so driver connection errors raise `Unavailable`.

    Callers get one exception type per error kind (see errors.py), with the
    URI's password redacted, instead of pymongo's own exception zoo.
    """

    def wrap(method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def wrapper(self: RunnerQ, *args: Any, **kwargs: Any) -> Any:
            with translate_errors(self.settings.uri):
                return method(self, *args, **kwargs)

        return wrapper

    for name in dir(cls):
        attr = getattr(cls, name)
        if name.startswith("_") or name in _NOT_WRAPPED or not callable(attr) \
                or isinstance(attr, type):
            continue
        setattr(cls, name, wrap(attr))
    return cls


# Context managers and stream factories: their errors surface later, in the caller's block.
_NOT_WRAPPED = frozenset({"buffered_outbox", "errors_translated", "event_stream"})


@_unavailable_as_error
class RunnerQ(QueueOperations, InspectionOperations, WorkerRegistryOperations,
              OperatorOperations, BulkOperations, ControlOperations, DeadLetterOperations,
              AuditOperations):
    """RunnerQ's queue and inspection operations on one MongoDB queue.

    Thread-safe: share one instance between threads (it shares one pooled
    MongoClient per process).
    """

    def __init__(self, settings: Settings, *, clock: Callable[[], datetime] = utc_now) -> None:
        self.settings = settings
        client = client_for(settings)
        self._ctx = QueueContext.create(settings, client[settings.database], clock=clock)

    @property
    def queue(self) -> str:
        return self.settings.queue

    @property
    def db(self) -> Any:
        """The pymongo Database (for tools that need a raw look)."""
        return self._ctx.db

    @property
    def collections(self) -> QueueContext:
        return self._ctx

    def ping(self) -> None:
        """Raise `Unavailable` unless the server answers."""
        with translate_errors(self.settings.uri):
            self._ctx.db.command("ping")

    def init_indexes(self, *, write: bool = True,
                     drop_obsolete: bool = False) -> list[IndexReport]:
        """Create the collections and indexes (idempotent); report each index.

        Indexes this version no longer uses are reported as obsolete, and
        dropped only with `drop_obsolete`.
        """
        return ensure_indexes(self._ctx.db, self.settings, write=write,
                              drop_obsolete=drop_obsolete)

    def missing_collections(self) -> list[str]:
        """The queue's collections that do not exist yet."""
        existing = set(self._ctx.db.list_collection_names())
        return [name for name in self._ctx.names.all().values() if name not in existing]

    # ------------------------------------------------ diagnosis (diagnose.py, metrics.py)

    def doctor(self, *, server: bool = True) -> list[Any]:
        """The doctor's checks: of the server (when `server`), then of this queue."""
        from runnerq_cli.backend.diagnose import queue_checks, server_checks

        return [*(server_checks(self) if server else []), *queue_checks(self)]

    def explain(self, activity_id: Any, *, any_queue: bool = False) -> Any:
        """Why the activity is where it is (diagnose.Explanation); NotFound if absent.

        With `any_queue`, an id not in this queue is looked for in the database's others.
        """
        from runnerq_cli.backend.diagnose import explain_activity

        return explain_activity(self, activity_id, any_queue=any_queue)

    def queue_summary(self) -> dict[str, Any]:
        """Counts by status, oldest pending age, workers and pause of this queue."""
        from runnerq_cli.backend.diagnose import queue_summary

        return queue_summary(self)

    def discover_queues(self) -> list[str]:
        """Every RunnerQ queue in this database (from its collection names)."""
        from runnerq_cli.backend.diagnose import discover_queues

        return discover_queues(self._ctx.db)

    def for_queue(self, queue: str) -> RunnerQ:
        """A RunnerQ on another queue of the same database (same client, same clock)."""
        from dataclasses import replace

        from runnerq_cli.backend.naming import validate_queue_name

        if queue == self.queue:
            return self
        return RunnerQ(replace(self.settings, queue=validate_queue_name(queue)),
                       clock=self._ctx.clock)

    def metrics_sample(self, *, window_seconds: float = 300.0) -> dict[str, Any]:
        """What one Prometheus scrape exposes for this queue (metrics.metrics_sample)."""
        from runnerq_cli.backend.diagnose import queue_pause
        from runnerq_cli.backend.metrics import MetricsOptions, metrics_sample

        options = MetricsOptions(window_seconds=window_seconds)
        workers = self.list_workers(options.stale_after)
        return metrics_sample(self._ctx, workers, queue_pause(self) is not None, options)

    @contextmanager
    def buffered_outbox(self, size: int = 64) -> Iterator[None]:
        """Batch outbox copies (events, results) for throughput; drained on exit."""
        previous = self._ctx.outbox.buffer_size
        self._ctx.outbox.buffer_size = size
        try:
            yield
        finally:
            self._ctx.outbox.buffer_size = previous
            self._ctx.outbox.drain()

    def flush_outbox(self) -> int:
        return self._ctx.outbox.drain()

    @contextmanager
    def errors_translated(self) -> Iterator[None]:
        """Raise `Unavailable` (URI redacted) for connection errors inside the block."""
        with translate_errors(self.settings.uri):
            yield


def connect(uri: str | None = None, *, database: str | None = None, queue: str | None = None,
            settings: Settings | None = None, config_path: str | None = None,
            clock: Callable[[], datetime] = utc_now) -> RunnerQ:
    """A `RunnerQ` from explicit arguments, else the environment and config file.

    >>> q = connect("mongodb://localhost:27017", queue="emails")
    >>> q.enqueue("send_email", {"to": "a@example.com"}).activity_id
    """
    if settings is None:
        overrides = {"uri": uri, "database": database, "queue": queue}
        settings = load_settings(config_path, overrides=overrides)
    return RunnerQ(settings, clock=clock)
