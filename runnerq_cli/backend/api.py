"""The public entry point: `connect()` returns a `RunnerQ` for one queue."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from runnerq_cli.backend.audit import AuditLog
from runnerq_cli.backend.bulk import BulkActions
from runnerq_cli.backend.connection import client_for, translate_errors
from runnerq_cli.backend.context import QueueContext, utc_now
from runnerq_cli.backend.control import Control
from runnerq_cli.backend.dlq import DeadLetters
from runnerq_cli.backend.indexes import IndexReport, ensure_indexes
from runnerq_cli.backend.inspection import Inspector
from runnerq_cli.backend.maintenance import Maintenance
from runnerq_cli.backend.operator import Operator
from runnerq_cli.backend.queue import ActivityQueue
from runnerq_cli.backend.workers import WorkerRegistry
from runnerq_cli.config import Settings, load_settings

# The facade's operations, by the part that owns them (each part is given, when it
# is made, the context and the other parts it uses: see RunnerQ.__init__).
PARTS: dict[str, tuple[type, tuple[str, ...]]] = {
    "activities": (ActivityQueue, (
        "enqueue", "enqueue_many", "check_idempotency", "dequeue", "ack_success",
        "ack_success_many", "ack_failure", "extend_lease", "release", "store_result",
        "get_result")),
    "maintenance": (Maintenance, (
        "process_scheduled", "requeue_expired", "repair_outboxes", "retention_queries",
        "purge_expired")),
    "inspector": (Inspector, (
        "stats", "stats_snapshot", "list_pending", "list_processing", "list_scheduled",
        "list_completed", "list_failed", "list_dead_letter", "list_page", "get_activity",
        "get_activity_events", "event_stream", "event_cursor_at_end")),
    "registry": (WorkerRegistry, (
        "register_worker", "heartbeat_worker", "unregister_worker", "count_live_workers",
        "list_workers")),
    "operator": (Operator, (
        "cancel", "retry", "run_now", "reschedule", "set_priority", "delete", "redrive",
        "purge_preview", "purge")),
    "bulk": (BulkActions, ("select", "preview_ids", "apply")),
    "control": (Control, ("paused", "pause", "resume")),
    "dead_letters": (DeadLetters, ("dlq_export", "dlq_import")),
    "audit_log": (AuditLog, ("record_action", "audit")),
}
# A stream factory: its stream translates errors while it is iterated (events.py).
_NOT_WRAPPED = frozenset({"event_stream"})
# Generators: translated while they are iterated.
_GENERATORS = frozenset({"dlq_export"})


def _forward(part: str, name: str, cls: type) -> Callable[..., Any]:
    """RunnerQ.`name`: the part's method, with driver connection errors as `Unavailable`.

    Callers get one exception type per error kind (see errors.py), with the
    URI's password redacted, instead of pymongo's own exception zoo.
    """
    target = getattr(cls, name)
    if name in _NOT_WRAPPED:
        @functools.wraps(target)
        def plain(self: RunnerQ, *args: Any, **kwargs: Any) -> Any:
            return getattr(getattr(self, part), name)(*args, **kwargs)
        return plain
    if name in _GENERATORS:
        @functools.wraps(target)
        def generator(self: RunnerQ, *args: Any, **kwargs: Any) -> Iterator[Any]:
            with translate_errors(self.settings.uri):  # while it is iterated
                yield from getattr(getattr(self, part), name)(*args, **kwargs)
        return generator

    @functools.wraps(target)
    def method(self: RunnerQ, *args: Any, **kwargs: Any) -> Any:
        return getattr(getattr(self, part), name)(*args, **kwargs)
    return _translated(method)


def _translated(method: Callable[..., Any]) -> Callable[..., Any]:
    """A RunnerQ method of its own, with driver connection errors as `Unavailable`."""
    @functools.wraps(method)
    def wrapper(self: RunnerQ, *args: Any, **kwargs: Any) -> Any:
        with translate_errors(self.settings.uri):
            return method(self, *args, **kwargs)
    return wrapper


class RunnerQ:
    """RunnerQ's queue, inspection and operator operations on one MongoDB queue.

    A facade: each operation belongs to one part (`PARTS`), an object that
    owns its queries and is given what it uses; `rq.enqueue(...)` is
    `rq.activities.enqueue(...)` with driver errors translated.

    Thread-safe: share one instance between threads (it shares one pooled
    MongoClient per process).
    """

    def __init__(self, settings: Settings, *, clock: Callable[[], datetime] = utc_now) -> None:
        self.settings = settings
        client = client_for(settings)
        ctx = self._ctx = QueueContext.create(settings, client[settings.database], clock=clock)
        self.audit_log = AuditLog(ctx)
        self.activities = ActivityQueue(ctx)
        self.maintenance = Maintenance(ctx)
        self.registry = WorkerRegistry(ctx)
        self.inspector = Inspector(ctx, self.registry)
        self.operator = Operator(ctx, self.maintenance, self.audit_log)
        self.bulk = BulkActions(ctx, self.operator, self.audit_log)
        self.control = Control(ctx, self.audit_log)
        self.dead_letters = DeadLetters(ctx, self.activities, self.operator, self.audit_log)

    @property
    def queue(self) -> str:
        return self.settings.queue

    @property
    def db(self) -> Any:
        """The pymongo Database (for tools that need a raw look)."""
        return self._ctx.db

    @property
    def context(self) -> QueueContext:
        """The queue's collections, settings, clock and outbox writer (tests and tools)."""
        return self._ctx

    @property
    def collections(self) -> QueueContext:
        """`context`, by the name earlier versions used."""
        return self._ctx

    def ping(self) -> None:
        """Raise `Unavailable` unless the server answers."""
        with translate_errors(self.settings.uri):
            self._ctx.db.command("ping")

    @_translated
    def init_indexes(self, *, write: bool = True,
                     drop_obsolete: bool = False) -> list[IndexReport]:
        """Create the collections and indexes (idempotent); report each index.

        Indexes this version no longer uses are reported as obsolete, and
        dropped only with `drop_obsolete`.
        """
        return ensure_indexes(self._ctx.db, self.settings, write=write,
                              drop_obsolete=drop_obsolete)

    @_translated
    def missing_collections(self) -> list[str]:
        """The queue's collections that do not exist yet."""
        existing = set(self._ctx.db.list_collection_names())
        return [name for name in self._ctx.names.all().values() if name not in existing]

    # ------------------------------------------------ diagnosis (diagnose.py, metrics.py)

    @_translated
    def doctor(self, *, server: bool = True) -> list[Any]:
        """The doctor's checks: of the server (when `server`), then of this queue."""
        from runnerq_cli.backend.diagnose import queue_checks, server_checks

        return [*(server_checks(self) if server else []), *queue_checks(self)]

    @_translated
    def explain(self, activity_id: Any, *, any_queue: bool = False) -> Any:
        """Why the activity is where it is (diagnose.Explanation); NotFound if absent.

        With `any_queue`, an id not in this queue is looked for in the database's others.
        """
        from runnerq_cli.backend.diagnose import explain_activity

        return explain_activity(self, activity_id, any_queue=any_queue)

    @_translated
    def queue_summary(self) -> dict[str, Any]:
        """Counts by status, oldest pending age, workers and pause of this queue."""
        from runnerq_cli.backend.diagnose import queue_summary

        return queue_summary(self)

    @_translated
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

    @_translated
    def metrics_sample(self, *, window_seconds: float = 300.0) -> dict[str, Any]:
        """What one Prometheus scrape exposes for this queue (metrics.metrics_sample)."""
        from runnerq_cli.backend.diagnose import queue_pause
        from runnerq_cli.backend.metrics import MetricsOptions, metrics_sample

        options = MetricsOptions(window_seconds=window_seconds)
        return metrics_sample(self._ctx, queue_pause(self) is not None, options)

    @contextmanager
    def buffered_outbox(self, size: int = 64, *, drain: bool = True) -> Iterator[None]:
        """Batch outbox copies (events, results) for throughput inside the block.

        On exit the buffer is drained, unless `drain` is False (a worker stopped
        at once leaves it to the repair: the copies are safe in the documents).
        """
        previous = self._ctx.outbox.buffer_size
        self._ctx.outbox.buffer_size = size
        try:
            yield
        finally:
            self._ctx.outbox.buffer_size = previous
            if drain:
                self._ctx.outbox.drain()

    def wait(self, activity_id: Any, timeout: float | None = None, *, poll: float = 0.25,
             max_poll: float = 2.0) -> Any:
        """Wait until the activity is terminal or `timeout` seconds pass (None: no limit).

        Returns a `waiting.WaitOutcome` (status, result, exit code); NotFound if the
        activity does not exist and left no result.
        """
        from runnerq_cli.backend.waiting import wait_for

        return wait_for(self, activity_id, timeout, poll=poll, max_poll=max_poll)

    def now(self) -> datetime:
        """The backend's clock (what it stamps documents with)."""
        return self._ctx.clock()

    @_translated
    def flush_outbox(self) -> int:
        return self._ctx.outbox.drain()

    @contextmanager
    def errors_translated(self) -> Iterator[None]:
        """Raise `Unavailable` (URI redacted) for connection errors inside the block."""
        with translate_errors(self.settings.uri):
            yield


for _part, (_cls, _names) in PARTS.items():
    for _name in _names:
        setattr(RunnerQ, _name, _forward(_part, _name, _cls))


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
