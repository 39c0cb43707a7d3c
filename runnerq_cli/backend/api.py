"""The public entry point: `connect()` returns a `RunnerQ` for one queue.

`RunnerQ` is a written facade: every operation below is spelled out with its
types and forwards to the part that owns it (each part is also an attribute,
typed, for tools that want one concern: `rq.activities`, `rq.inspector`,
`rq.diagnosis`...). Driver errors are translated below every part, at the
queue's collections (driver.py), so a part called directly is as safe as the
facade.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from runnerq_cli.backend.connection import client_for
from runnerq_cli.backend.context import QueueContext, utc_now
from runnerq_cli.backend.models import (
    AckOutcome,
    Activity,
    Claim,
    DeadLetterRecord,
    EnqueueResult,
    Event,
    Priority,
    Result,
    Status,
)
from runnerq_cli.backend.naming import validate_queue_name
from runnerq_cli.backend.queue import ActivityQueue, ActivitySpec
from runnerq_cli.backend.sizes import BULK_BATCH_SIZE, IMPORT_BATCH
from runnerq_cli.config import Settings, load_settings

# The parts below are imported where first used (each is an attribute made on first
# access): `enqueue` loads the queue's modules, not those of dlq, bulk, metrics, diagnosis.
if TYPE_CHECKING:
    from runnerq_cli.backend.audit import AuditEntry, AuditLog
    from runnerq_cli.backend.bulk import BulkActions, BulkReport, Selection
    from runnerq_cli.backend.checks import Check
    from runnerq_cli.backend.control import Control, PauseState
    from runnerq_cli.backend.diagnose import Diagnosis
    from runnerq_cli.backend.dlq import DeadLetters, ImportLine, ImportOutcome, ImportReport
    from runnerq_cli.backend.driver import Database
    from runnerq_cli.backend.events import EventCursor, EventFilter, EventStream
    from runnerq_cli.backend.explain import Explanation
    from runnerq_cli.backend.filters import ActivityFilter
    from runnerq_cli.backend.indexes import IndexReport
    from runnerq_cli.backend.inspection import Inspector
    from runnerq_cli.backend.maintenance import Maintenance
    from runnerq_cli.backend.operator import ActionResult, Expect, Operator, RedriveReport
    from runnerq_cli.backend.pagination import ListFilter, Page
    from runnerq_cli.backend.snapshots import MetricsSample, StatsSnapshot
    from runnerq_cli.backend.waiting import WaitOutcome
    from runnerq_cli.backend.workers import WorkerInfo, WorkerRegistry



class RunnerQ:
    """RunnerQ's queue, inspection, operator and diagnosis operations on one MongoDB queue.

    Thread-safe: share one instance between threads (it shares one pooled
    MongoClient per process).
    """

    def __init__(self, settings: Settings, *, clock: Callable[[], datetime] = utc_now) -> None:
        self.settings = settings
        client = client_for(settings)
        self._ctx = QueueContext.create(settings, client[settings.database], clock=clock)
        self.activities = ActivityQueue(self._ctx)

    # The other parts, each made on first use (they hold no state of their own: two
    # threads racing to make one make equal parts).

    @functools.cached_property
    def audit_log(self) -> AuditLog:
        from runnerq_cli.backend.audit import AuditLog

        return AuditLog(self._ctx)

    @functools.cached_property
    def maintenance(self) -> Maintenance:
        from runnerq_cli.backend.maintenance import Maintenance

        return Maintenance(self._ctx)

    @functools.cached_property
    def registry(self) -> WorkerRegistry:
        from runnerq_cli.backend.workers import WorkerRegistry

        return WorkerRegistry(self._ctx)

    @functools.cached_property
    def inspector(self) -> Inspector:
        from runnerq_cli.backend.inspection import Inspector

        return Inspector(self._ctx, self.registry)

    @functools.cached_property
    def operator(self) -> Operator:
        from runnerq_cli.backend.operator import Operator

        return Operator(self._ctx, self.maintenance, self.audit_log)

    @functools.cached_property
    def bulk(self) -> BulkActions:
        from runnerq_cli.backend.bulk import BulkActions

        return BulkActions(self._ctx, self.operator, self.audit_log)

    @functools.cached_property
    def control(self) -> Control:
        from runnerq_cli.backend.control import Control

        return Control(self._ctx, self.audit_log)

    @functools.cached_property
    def dead_letters(self) -> DeadLetters:
        from runnerq_cli.backend.dlq import DeadLetters

        return DeadLetters(self._ctx, self.activities, self.operator, self.audit_log)

    @functools.cached_property
    def diagnosis(self) -> Diagnosis:
        """The doctor's checks, explanations and queue discovery (made on first use: the
        commands that enqueue or work never import them)."""
        from runnerq_cli.backend.diagnose import Diagnosis

        return Diagnosis(self._ctx, self.registry, self.inspector.get_activity,
                         self.control.paused, lambda queue: self.for_queue(queue).diagnosis)

    @property
    def queue(self) -> str:
        return self.settings.queue

    @property
    def db(self) -> Database:
        """The queue's database, errors translated (for tools that need a raw look)."""
        return self._ctx.db

    @property
    def context(self) -> QueueContext:
        """The queue's collections, settings, clock and outbox writer (tests and tools)."""
        return self._ctx

    def for_queue(self, queue: str) -> RunnerQ:
        """A RunnerQ on another queue of the same database (same client, same clock)."""
        if queue == self.queue:
            return self
        return RunnerQ(replace(self.settings, queue=validate_queue_name(queue)),
                       clock=self._ctx.clock)

    def now(self) -> datetime:
        """The backend's clock (what it stamps documents with)."""
        return self._ctx.clock()

    # ------------------------------------------------------------- set-up

    def ping(self) -> None:
        """Raise `Unavailable` unless the server answers."""
        self._ctx.db.command("ping")

    def init_indexes(self, *, write: bool = True,
                     drop_obsolete: bool = False) -> list[IndexReport]:
        """Create the collections and indexes (idempotent); report each index.

        Indexes this version no longer uses are reported as obsolete, and
        dropped only with `drop_obsolete`.
        """
        from runnerq_cli.backend.indexes import ensure_indexes

        return ensure_indexes(self._ctx.db, self.settings, write=write,
                              drop_obsolete=drop_obsolete)

    def missing_collections(self) -> list[str]:
        """The queue's collections that do not exist yet."""
        existing = set(self._ctx.db.list_collection_names())
        return [name for name in self._ctx.names.all().values() if name not in existing]

    # ---------------------------------------------------------- the outbox

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

    def flush_outbox(self) -> int:
        """Copy out the buffered outboxes now; returns how many."""
        return self._ctx.outbox.drain()

    # ------------------------------------------------------------- waiting

    def wait(self, activity_id: uuid.UUID | str, timeout: float | None = None, *,
             poll: float = 0.25, max_poll: float = 2.0) -> WaitOutcome:
        """Wait until the activity is terminal or `timeout` seconds pass (None: no limit).

        Returns a `waiting.WaitOutcome` (status, result, whether it timed out);
        NotFound if the activity does not exist and left no result.
        """
        from runnerq_cli.backend.waiting import wait_for

        return wait_for(self.inspector.get_activity, self.activities.get_result, activity_id,
                        timeout, poll=poll, max_poll=max_poll)

    # ----------------------------------------------------------- diagnosis

    def doctor(self, *, server: bool = True) -> list[Check]:
        """The doctor's checks: of the server (when `server`), then of this queue."""
        return self.diagnosis.doctor(server=server)

    def server_checks(self) -> list[Check]:
        """The doctor's checks of the server alone."""
        return self.diagnosis.server_checks()

    def explain(self, activity_id: uuid.UUID | str, *, any_queue: bool = False) -> Explanation:
        """Why the activity is where it is; NotFound if absent.

        With `any_queue`, an id not in this queue is looked for in the database's others.
        """
        return self.diagnosis.explain(activity_id, any_queue=any_queue)

    def queue_summary(self) -> dict[str, Any]:
        """Counts by status, oldest pending age, workers and pause of this queue."""
        return self.diagnosis.summary()

    def discover_queues(self) -> list[str]:
        """Every RunnerQ queue in this database (from its collection names)."""
        return self.diagnosis.discover_queues()

    def require_queues(self, wanted: list[str]) -> list[str]:
        """`wanted`, each checked to exist in this database; NotFound names those that do."""
        return self.diagnosis.require_queues(wanted)

    def metrics_sample(self, *, window_seconds: float = 300.0) -> MetricsSample:
        """What one Prometheus scrape exposes for this queue (metrics.metrics_sample)."""
        from runnerq_cli.backend.metrics import MetricsOptions, metrics_sample

        options = MetricsOptions(window_seconds=window_seconds)
        return metrics_sample(self._ctx, self.control.paused(), options)

    # activities (queue.ActivityQueue)

    def enqueue(self, activity_type: str | ActivitySpec, payload: Mapping[str, Any] | None = None,
                **options: Any) -> EnqueueResult:
        """Put one activity on the queue (see `ActivitySpec` for the options)."""
        return self.activities.enqueue(activity_type, payload, **options)

    def enqueue_many(self, specs: Sequence[ActivitySpec]) -> list[EnqueueResult | Exception]:
        """Enqueue many in few round trips; one entry per spec, an exception where it failed."""
        return self.activities.enqueue_many(specs)

    def check_idempotency(self, activity_type: str, key: str,
                          activity_id: uuid.UUID) -> tuple[bool, uuid.UUID]:
        """Atomically take `key` for `activity_id`: (True, activity_id) if taken, else
        (False, the id that holds it)."""
        return self.activities.check_idempotency(activity_type, key, activity_id)

    def dequeue(self, worker_id: str, *, types: Iterable[str] | None = None, limit: int = 1,
                lease_seconds: float | None = None, exclude_types: Iterable[str] | None = None,
                on_claim: Callable[[Claim], None] | None = None) -> list[Claim]:
        """Claim up to `limit` pending activities in claim order."""
        return self.activities.dequeue(worker_id, types=types, limit=limit,
                                       lease_seconds=lease_seconds, exclude_types=exclude_types,
                                       on_claim=on_claim)

    def ack_success(self, claim: Claim, result: Any = None) -> AckOutcome:
        """Complete the claimed activity and store its result (None is a result too)."""
        return self.activities.ack_success(claim, result)

    def ack_success_many(self, acks: Sequence[tuple[Claim, Any]]) -> list[AckOutcome | Exception]:
        """`ack_success` for many claims in two commands; one outcome (or error) each."""
        return self.activities.ack_success_many(acks)

    def ack_failure(self, claim: Claim, error: str, *, retryable: bool = True) -> AckOutcome:
        """Record a failed attempt: retry after a back-off, fail, or dead-letter."""
        return self.activities.ack_failure(claim, error, retryable=retryable)

    def extend_lease(self, claim: Claim, seconds: float | None = None) -> bool:
        """Move the lease deadline to now + `seconds`; False if this claim already ended."""
        return self.activities.extend_lease(claim, seconds)

    def release(self, claim: Claim, reason: str = 'released by worker') -> bool:
        """Give a held activity back to the queue without counting an attempt."""
        return self.activities.release(claim, reason)

    def store_result(self, activity_id: uuid.UUID | str, data: Any, state: str = 'Ok') -> None:
        """Upsert a result directly (ack_success already stores the handler's result)."""
        return self.activities.store_result(activity_id, data, state)

    def get_result(self, activity_id: uuid.UUID | str) -> Result | None:
        """The result of the activity's last run, or None when there is none (yet)."""
        return self.activities.get_result(activity_id)

    # maintenance (maintenance.Maintenance)

    def process_scheduled(self, limit: int | None = None) -> int:
        """Scheduled activities that are due become pending; returns how many."""
        return self.maintenance.process_scheduled(limit)

    def requeue_expired(self, limit: int = 100) -> dict[str, int]:
        """The reaper: expired leases count as a retryable failure without back-off."""
        return self.maintenance.requeue_expired(limit)

    def repair_outboxes(self, grace_seconds: float = 60.0) -> int:
        """Copy out outboxes a crashed process left behind (see writes.py)."""
        return self.maintenance.repair_outboxes(grace_seconds)

    def retention_queries(self) -> dict[str, dict[str, Any]]:
        """{"completed"|"failed": query of the terminal activities past their retention}."""
        return self.maintenance.retention_queries()

    def purge_expired(self, limit: int = 1000,
                      kinds: tuple[str, ...] = ('completed', 'failed')) -> dict[str, int]:
        """Retention: delete terminal activities past their retention, with results and events."""
        return self.maintenance.purge_expired(limit, kinds)

    # inspector (inspection.Inspector)

    def stats(self) -> dict[str, Any]:
        """Counts by status and by priority, computed on the server."""
        return self.inspector.stats()

    def stats_snapshot(self, *, by_type: bool = False, throughput_minutes: int = 5,
                       latency_window_seconds: float = 900.0,
                       sample_cap: int = 10_000,
                       history_seconds: float | None = None) -> StatsSnapshot:
        """The full `stats` snapshot (metrics.py: schema, and what each query costs);
        with `history_seconds`, the per-type history of that window too."""
        return self.inspector.stats_snapshot(by_type=by_type, throughput_minutes=throughput_minutes,
                                             latency_window_seconds=latency_window_seconds,
                                             sample_cap=sample_cap,
                                             history_seconds=history_seconds)

    def list_pending(self, offset: int = 0, limit: int = 50) -> list[Activity]:
        return self.inspector.list_pending(offset, limit)

    def list_processing(self, offset: int = 0, limit: int = 50) -> list[Activity]:
        return self.inspector.list_processing(offset, limit)

    def list_scheduled(self, offset: int = 0, limit: int = 50) -> list[Activity]:
        return self.inspector.list_scheduled(offset, limit)

    def list_completed(self, offset: int = 0, limit: int = 50) -> list[Activity]:
        return self.inspector.list_completed(offset, limit)

    def list_failed(self, offset: int = 0, limit: int = 50) -> list[Activity]:
        return self.inspector.list_failed(offset, limit)

    def list_dead_letter(self, offset: int = 0, limit: int = 50) -> list[DeadLetterRecord]:
        return self.inspector.list_dead_letter(offset, limit)

    def list_page(self, status: Status | str, *, filters: ListFilter | None = None, limit: int = 50,
                  after: str | None = None) -> Page:
        """One page of activities in `status`, after the cursor `after` (keyset pagination)."""
        return self.inspector.list_page(status, filters=filters, limit=limit, after=after)

    def get_activity(self, activity_id: uuid.UUID | str) -> Activity:
        """The activity, or NotFound."""
        return self.inspector.get_activity(activity_id)

    def get_activity_events(self, activity_id: uuid.UUID | str, limit: int = 100) -> list[Event]:
        """Events of one activity, newest first: stored ones, those still in its outbox,
        and those its fields prove."""
        return self.inspector.get_activity_events(activity_id, limit)

    def event_stream(self, *, cursor: EventCursor | None = None, filters: EventFilter | None = None,
                     mode: str = 'auto', follow: bool = True,
                     poll_interval: float = 0.5) -> EventStream:
        """Lifecycle events after `cursor` (all stored ones by default), in ingestion order."""
        return self.inspector.event_stream(cursor=cursor, filters=filters, mode=mode, follow=follow,
                                           poll_interval=poll_interval)

    def event_cursor_at_end(self) -> EventCursor:
        """A cursor after the newest event: follow only what happens from now on."""
        return self.inspector.event_cursor_at_end()

    # registry (workers.WorkerRegistry)

    def register_worker(self, worker_id: str, *, types: list[str] | tuple[str, ...] = (),
                        concurrency: int = 1) -> None:
        return self.registry.register_worker(worker_id, types=types, concurrency=concurrency)

    def heartbeat_worker(self, worker_id: str, *, in_flight: int, counters: dict[str, int]) -> None:
        """Refresh the entry (re-creating it if the TTL monitor removed it)."""
        return self.registry.heartbeat_worker(worker_id, in_flight=in_flight, counters=counters)

    def unregister_worker(self, worker_id: str) -> None:
        return self.registry.unregister_worker(worker_id)

    def count_live_workers(self, stale_after: float = 30.0) -> int:
        """Workers whose heartbeat is fresh: the size of the fleet sharing maintenance."""
        return self.registry.count_live_workers(stale_after)

    def list_workers(self, stale_after: float = 30.0) -> list[WorkerInfo]:
        """Every registered worker, freshest first, stale ones marked."""
        return self.registry.list_workers(stale_after)

    # operator (operator.Operator)

    def cancel(self, activity_id: uuid.UUID | str, reason: str | None = None,
               actor: str | None = None, *, expect: Expect = None) -> ActionResult:
        """pending or scheduled -> cancelled (terminal; retention counts from completed_at)."""
        return self.operator.cancel(activity_id, reason, actor, expect=expect)

    def retry(self, activity_id: uuid.UUID | str, reason: str | None = None,
              actor: str | None = None, *, expect: Expect = None) -> ActionResult:
        """failed, dead_letter or cancelled -> pending, as a fresh start (retry_count 0)."""
        return self.operator.retry(activity_id, reason, actor, expect=expect)

    def run_now(self, activity_id: uuid.UUID | str, reason: str | None = None,
                actor: str | None = None, *, expect: Expect = None) -> ActionResult:
        """scheduled -> pending now (skips a delay or a retry back-off)."""
        return self.operator.run_now(activity_id, reason, actor, expect=expect)

    def reschedule(self, activity_id: uuid.UUID | str, at: datetime, reason: str | None = None,
                   actor: str | None = None, *, expect: Expect = None) -> ActionResult:
        """pending or scheduled -> scheduled at `at` (timezone-aware, in the future)."""
        return self.operator.reschedule(activity_id, at, reason, actor, expect=expect)

    def set_priority(self, activity_id: uuid.UUID | str, priority: Priority | int | str,
                     reason: str | None = None, actor: str | None = None, *,
                     expect: Expect = None) -> ActionResult:
        """pending or scheduled -> the new priority (the event has the old and the new)."""
        return self.operator.set_priority(activity_id, priority, reason, actor, expect=expect)

    def delete(self, activity_id: uuid.UUID | str, reason: str | None = None,
               actor: str | None = None, *, expect: Expect = None) -> ActionResult:
        """Remove a terminal activity with its result, events, dead-letter record and key."""
        return self.operator.delete(activity_id, reason, actor, expect=expect)

    def redrive(self, types: Iterable[str] | None = None, *, dry_run: bool = False,
                ids: Iterable[uuid.UUID | str] | None = None, limit: int | None = None,
                reason: str | None = None, actor: str | None = None,
                should_stop: Callable[[], bool] | None = None,
                on_batch: Callable[[int], None] | None = None,
                command: str | None = None) -> RedriveReport:
        """Every dead-lettered activity (of `types`, if given) back to pending, in batches."""
        return self.operator.redrive(types, dry_run=dry_run, ids=ids, limit=limit, reason=reason,
                                     actor=actor, should_stop=should_stop, on_batch=on_batch,
                                     command=command)

    def purge_preview(self) -> dict[str, int]:
        """What `purge` would delete now: terminal activities past their retention."""
        return self.operator.purge_preview()

    def purge(self, *, limits: dict[str, int] | None = None, batch: int = 1000,
              reason: str | None = None, actor: str | None = None,
              audit: bool = False, should_stop: Callable[[], bool] | None = None,
              on_batch: Callable[[int], None] | None = None,
              command: str | None = None) -> dict[str, int]:
        """Apply retention now (queue.purge_expired) until nothing is left to purge."""
        return self.operator.purge(limits=limits, batch=batch, reason=reason, actor=actor,
                                   audit=audit, should_stop=should_stop, on_batch=on_batch,
                                   command=command)

    # bulk (bulk.BulkActions)

    def select(self, action: str, flt: ActivityFilter, max_count: int | None = None, *,
               sample_size: int = 10) -> Selection:
        """The activities `flt` matches for `action` (only its eligible statuses), oldest first."""
        return self.bulk.select(action, flt, max_count, sample_size=sample_size)

    def preview_ids(self, action: str, ids: Iterable[uuid.UUID | str]) -> list[dict[str, Any]]:
        """What `apply` would do to each id now (a dry run by ids): reads only."""
        return self.bulk.preview_ids(action, ids)

    def apply(self, action: str, target: Selection | Iterable[uuid.UUID | str], *,
              reason: str | None = None, actor: str | None = None,
              batch_size: int = BULK_BATCH_SIZE, should_stop: Callable[[], bool] | None = None,
              on_batch: Callable[[BulkReport], None] | None = None,
              command: str | None = None, **params: Any) -> BulkReport:
        """Run `action` on each id of `target` in fenced batches; one audit record per run."""
        return self.bulk.apply(action, target, reason=reason, actor=actor,
                               batch_size=batch_size, should_stop=should_stop,
                               on_batch=on_batch, command=command, **params)

    # control (control.Control)

    def paused(self) -> PauseState:
        """What is paused now (one indexed read by `_id`)."""
        return self.control.paused()

    def pause(self, types: Iterable[str] | None = None, *, reason: str | None = None,
              actor: str | None = None, command: str | None = None) -> PauseState:
        """Pause the whole queue, or add `types` to the paused ones."""
        return self.control.pause(types, reason=reason, actor=actor, command=command)

    def resume(self, types: Iterable[str] | None = None, *, reason: str | None = None,
               actor: str | None = None, command: str | None = None) -> PauseState:
        """Resume everything, or only `types` (when those, not the whole queue, are paused)."""
        return self.control.resume(types, reason=reason, actor=actor, command=command)

    # dead_letters (dlq.DeadLetters)

    def dlq_export(self, types: Iterable[str] | None = None, since: datetime | None = None,
                   max_count: int | None = None) -> Iterator[dict[str, Any]]:
        """Exported lines, oldest dead-lettering first. Reads only."""
        return self.dead_letters.dlq_export(types, since, max_count)

    def dlq_import(self, lines: Iterable[ImportLine], *, redrive: bool = False,
                   dry_run: bool = False, reason: str | None = None,
                   actor: str | None = None, batch_size: int = IMPORT_BATCH,
                   should_stop: Callable[[], bool] | None = None,
                   on_outcome: Callable[[ImportOutcome], None] | None = None,
                   on_batch: Callable[[ImportReport], None] | None = None,
                   command: str | None = None, collect: bool = True) -> ImportReport:
        """Enqueue (or, `redrive`, revive) each line, in batches; outcomes in line order."""
        return self.dead_letters.dlq_import(lines, redrive=redrive, dry_run=dry_run, reason=reason,
                                            actor=actor, batch_size=batch_size,
                                            should_stop=should_stop, on_outcome=on_outcome,
                                            on_batch=on_batch, command=command, collect=collect)

    # audit_log (audit.AuditLog)

    def record_action(self, action: str, ids: Iterable[uuid.UUID | str] = (), *,
                      reason: str | None = None, actor: str | None = None,
                      event_type: str = 'OperatorAction', count: int | None = None,
                      **detail: Any) -> dict[str, Any]:
        """Write one audit record; returns it. `detail` adds fields (filter, skipped...);"""
        return self.audit_log.record_action(action, ids, reason=reason, actor=actor,
                                            event_type=event_type, count=count, **detail)

    def audit(self, *, since: datetime | None = None, actor: str | None = None,
              action: str | None = None, limit: int = 100) -> list[AuditEntry]:
        """Operator actions, newest first (kept as long as events: the events TTL)."""
        return self.audit_log.audit(since=since, actor=actor, action=action, limit=limit)


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
