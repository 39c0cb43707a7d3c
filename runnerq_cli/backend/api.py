"""The public entry point: `connect()` returns a `RunnerQ` for one queue.

`RunnerQ` is RunnerQ's two traits (traits.py) implemented on MongoDB: the queue
operations (queue.ActivityQueue, maintenance.QueueChores) and the inspection ones
(inspection.Inspection) are its own methods, inherited, over one shared context, so
no method is restated here. Everything else is a part of its own, made on first use:
`rq.operator`, `rq.bulk`, `rq.control`, `rq.dead_letters`, `rq.audit_log`, `rq.schedules`,
`rq.diagnosis`, `rq.registry`, `rq.maintenance`, `rq.inspector`.
Driver errors are translated below every part, at the queue's collections
(driver.py), so every part is as safe as the traits.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING

from runnerq_cli.backend.domain.naming import validate_queue_name
from runnerq_cli.backend.producer import Producer
from runnerq_cli.backend.queue.maintenance import QueueChores
from runnerq_cli.backend.queue.queue import ActivityQueue
from runnerq_cli.backend.store.context import QueueContext, utc_now
from runnerq_cli.backend.views.inspection import Inspection
from runnerq_cli.config import Settings, load_settings

# The parts below are imported where first used (each is an attribute made on first
# access): `enqueue` loads the queue's modules, not those of dlq, bulk, metrics, diagnosis.
if TYPE_CHECKING:
    from runnerq_cli.backend.diagnosis.diagnose import Diagnosis
    from runnerq_cli.backend.domain.outage import OutageWatch
    from runnerq_cli.backend.ops.audit import AuditLog
    from runnerq_cli.backend.ops.bulk import BulkActions
    from runnerq_cli.backend.ops.control import Control
    from runnerq_cli.backend.ops.dlq import DeadLetters
    from runnerq_cli.backend.ops.limits import FlowLimits
    from runnerq_cli.backend.ops.operator import Operator
    from runnerq_cli.backend.ops.schedule_views import ScheduleViews
    from runnerq_cli.backend.ops.schedules import Schedules
    from runnerq_cli.backend.ops.signals import Signals
    from runnerq_cli.backend.queue.durable import Durable
    from runnerq_cli.backend.queue.intake import Intake
    from runnerq_cli.backend.queue.maintenance import Maintenance
    from runnerq_cli.backend.queue.workers import WorkerRegistry
    from runnerq_cli.backend.store.driver import Database
    from runnerq_cli.backend.traits import InspectionBackend, WorkerBackend
    from runnerq_cli.backend.views.inspection import Inspector
    from runnerq_cli.backend.views.result_wait import Waiting, WaitOutcome
    from runnerq_cli.backend.views.trees import Trees


class RunnerQ(Producer, ActivityQueue, QueueChores, Inspection):
    """RunnerQ's queue and inspection traits on one MongoDB queue, and its other parts.

    Made as a `Producer` is (producer.py: `RunnerQ(settings, clock=...)`). Thread-safe:
    share one instance between threads (it shares one pooled MongoClient per process).
    """

    # The other parts, each made on first use (they hold no state of their own: two
    # threads racing to make one make equal parts).

    @property
    def activities(self) -> ActivityQueue:
        """The queue operations (this RunnerQ itself: they are its own methods)."""
        return self

    @functools.cached_property
    def audit_log(self) -> AuditLog:
        from runnerq_cli.backend.ops.audit import AuditLog

        return AuditLog(self._ctx)

    @functools.cached_property
    def durable(self) -> Durable:
        """Durable activities' storage operations: checkpoints, dependencies, park, signal,
        fenced spawns, wakes (docs/design.md, "Durable activities")."""
        from runnerq_cli.backend.queue.durable import Durable
        return Durable(self._ctx, self)

    @functools.cached_property
    def trees(self) -> Trees:
        """Trees of durable activities and what a waiting one waits for (reads)."""
        from runnerq_cli.backend.views.trees import Trees
        return Trees(self._ctx)

    @functools.cached_property
    def signals(self) -> Signals:
        """A signal sent by an operator: refused to a finished activity, audited."""
        from runnerq_cli.backend.ops.signals import Signals
        return Signals(self._ctx, self.durable, self.audit_log)

    @functools.cached_property
    def maintenance(self) -> Maintenance:
        from runnerq_cli.backend.queue.maintenance import Maintenance

        return Maintenance(self._ctx)

    @functools.cached_property
    def registry(self) -> WorkerRegistry:
        from runnerq_cli.backend.queue.workers import WorkerRegistry

        return WorkerRegistry(self._ctx)

    @functools.cached_property
    def inspector(self) -> Inspector:
        from runnerq_cli.backend.views.inspection import Inspector

        return Inspector(self._ctx, self.control)

    @functools.cached_property
    def operator(self) -> Operator:
        from runnerq_cli.backend.ops.operator import Operator

        return Operator(self._ctx, self.maintenance, self.audit_log)

    @functools.cached_property
    def bulk(self) -> BulkActions:
        from runnerq_cli.backend.ops.bulk import BulkActions

        return BulkActions(self._ctx, self.operator, self.audit_log)

    @functools.cached_property
    def control(self) -> Control:
        from runnerq_cli.backend.ops.control import Control

        return Control(self._ctx, self.audit_log)

    @functools.cached_property
    def schedules(self) -> Schedules:
        """The queue's recurring schedules: the store, the firing chore, the views' reads
        (docs/design.md, "Schedules")."""
        from runnerq_cli.backend.ops.schedules import Schedules

        return Schedules(self._ctx, self, self.audit_log)

    @functools.cached_property
    def limits(self) -> FlowLimits:
        """The queue's flow limits (docs/design.md, "Flow control")."""
        from runnerq_cli.backend.ops.limits import FlowLimits

        return FlowLimits(self._ctx, self.audit_log)

    @functools.cached_property
    def schedule_views(self) -> ScheduleViews:
        """The schedules as stats, queues, metrics and explain show them (one read)."""
        from runnerq_cli.backend.ops.schedule_views import ScheduleViews

        return ScheduleViews(self._ctx, self.schedules)

    @functools.cached_property
    def intake(self) -> Intake:
        """Streams of NDJSON lines into the queue (`enqueue --from`)."""
        from runnerq_cli.backend.queue.intake import Intake

        return Intake(self)

    @functools.cached_property
    def dead_letters(self) -> DeadLetters:
        from runnerq_cli.backend.ops.dlq import DeadLetters

        return DeadLetters(self._ctx, self, self.operator, self.audit_log)

    @functools.cached_property
    def diagnosis(self) -> Diagnosis:
        """The doctor's checks, explanations and queue discovery (made on first use: the
        commands that enqueue or work never import them)."""
        from runnerq_cli.backend.diagnosis.diagnose import Diagnosis

        return Diagnosis(self._ctx, self.registry, self.get_activity,
                         self.control.paused, lambda queue: self.for_queue(queue).diagnosis,
                         schedules=lambda: self.schedule_views)

    @property
    def queue(self) -> str:
        return self.settings.queue

    @property
    def db(self) -> Database:
        """The queue's database, errors translated (for tests and tools that need a raw
        look; the CLI never uses it)."""
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
        """The backend's clock: the server's as this process knows it (servertime.py), or
        the clock it was built with (`RunnerQ(settings, clock=...)`: tests travel in time)."""
        return self._ctx.clock()

    def ping(self) -> None:
        """Raise `Unavailable` unless the server answers."""
        self._ctx.db.command("ping")

    def away_since(self) -> datetime | None:
        """When this queue's server was found away (or stalled) in an outage that no call
        of this process has had an answer since, else None: how a front end that retries
        by request (the console) learns that the server is back."""
        from runnerq_cli.backend.store.connection import away_since

        return away_since(self.settings.uri)

    def wait(self, activity_id: uuid.UUID | str, timeout: float | None = None, *,
             poll: float = 0.25, max_poll: float = 2.0,
             outage: OutageWatch | None = None) -> WaitOutcome:
        """Wait until the activity is terminal or `timeout` seconds pass (None: no limit).

        Returns a `waiting.WaitOutcome` (status, result, whether it timed out);
        NotFound if the activity does not exist and left no result. With `outage`
        (domain/outage.py), a server that goes away once the wait has begun is waited
        for, within `timeout`, and shown through the watch's callbacks.
        """
        from runnerq_cli.backend.views.result_wait import wait_for

        return wait_for(self.get_activity, self.get_result, activity_id,
                        timeout, poll=poll, max_poll=max_poll, outage=outage)

    def waiting(self, activity_id: uuid.UUID | str, timeout: float | None = None, *,
                poll: float = 0.25, max_poll: float = 2.0,
                outage: OutageWatch | None = None) -> Waiting:
        """`wait`'s rules apart from its sleeps (result_wait.Waiting): each `look()` reads
        once and answers the outcome or how long to sleep. The asyncio API drives it with
        `asyncio.sleep` (runnerq_cli/aio/queue.py)."""
        from runnerq_cli.backend.views.result_wait import Waiting

        return Waiting(self.get_activity, self.get_result, activity_id, timeout,
                       poll=poll, max_poll=max_poll, outage=outage)


if TYPE_CHECKING:
    # mypy --strict checks here that RunnerQ implements both traits (and what a worker
    # needs): a method that drifts from its trait fails the type check.
    def _implements(rq: RunnerQ) -> tuple[WorkerBackend, InspectionBackend]:
        return rq, rq


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
