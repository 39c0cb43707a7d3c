"""What every backend operation needs: the queue's collections, settings and a clock.

The collections are driver.py's: every call through them translates driver
errors, so whatever holds a context holds no untranslated way to MongoDB.
The clock is the server's (servertime.ServerClock) unless the caller brings
its own (tests travel in time with one).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar, cast

from pymongo.database import Database as PyDatabase

from runnerq_cli.backend.domain.naming import CollectionNames
from runnerq_cli.backend.store.driver import Collection, Database
from runnerq_cli.backend.store.partitions import PartitionCount
from runnerq_cli.backend.store.servertime import utc_now as utc_now  # re-exported (api.py)
from runnerq_cli.config import Settings

if TYPE_CHECKING:
    from runnerq_cli.backend.domain.documents import Claim
    from runnerq_cli.backend.domain.models import AckOutcome
    from runnerq_cli.backend.store.flowstate import FlowState
    from runnerq_cli.backend.store.writes import OutboxWriter
    from runnerq_cli.group_commit import Answers

_T = TypeVar("_T")


@dataclass
class QueueContext:
    settings: Settings
    db: Database
    names: CollectionNames
    activities: Collection
    dead_letter: Collection
    results: Collection
    idempotency: Collection
    events: Collection
    workers: Collection
    control: Collection
    schedules: Collection
    checkpoints: Collection
    dependencies: Collection
    limits: Collection
    clock: Callable[[], datetime] = utc_now
    # ActivityQueue.ack_success's group commit, made on its first use
    success_acks: Answers[tuple[Claim, Any], AckOutcome] | None = None
    # The partition count (docs/design.md, "Partitions"), read through a cache
    partitions: PartitionCount = field(init=False)
    # Reads a view repeats less often than it is asked (views/metrics.py's scan of the
    # documents' shapes): {name: (monotonic time, value)}
    cached_reads: dict[str, tuple[float, Any]] = field(default_factory=dict)
    # The claimers' and the writers' state, each made on first use (`outbox`, `flow`): an
    # enqueue needs neither, and a process that only enqueues does not load their modules
    # (benchmarks/bench_cli_startup.py part 2).
    _outbox: OutboxWriter | None = field(default=None, init=False, repr=False)
    _flow: FlowState | None = field(default=None, init=False, repr=False)
    _making: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        self.partitions = PartitionCount(self.control)

    @property
    def outbox(self) -> OutboxWriter:
        """The one writer of this queue's outboxes (writes.py)."""
        def make() -> OutboxWriter:
            from runnerq_cli.backend.store.writes import OutboxWriter

            return OutboxWriter(self.activities, self.events, self.results,
                                self.dead_letter, self.clock)
        return self._made_once("_outbox", make)

    @property
    def flow(self) -> FlowState:
        """Which types are limited, as this process last read them (flowstate.py,
        queue/flow_claims.py)."""
        def make() -> FlowState:
            from runnerq_cli.backend.store.flowstate import FlowState

            return FlowState()
        return self._made_once("_flow", make)

    def _made_once(self, name: str, make: Callable[[], _T]) -> _T:
        """The field `name`, made by `make` on first use, once, under a lock: no worker
        thread keeps using one that another thread's first use replaced."""
        value = getattr(self, name)
        if value is None:
            with self._making:
                value = getattr(self, name)
                if value is None:
                    value = make()
                    setattr(self, name, value)
        return cast("_T", value)

    @classmethod
    def create(cls, settings: Settings, db: PyDatabase[Any],
               clock: Callable[[], datetime] = utc_now) -> QueueContext:
        names = CollectionNames(settings.queue)
        database = Database.wrap(settings.uri, db)
        if clock is utc_now:  # the default: what decides what runs when is the server's
            from runnerq_cli.backend.store.servertime import ServerClock

            clock = ServerClock(database)
        activities, events = database[names.activities], database[names.events]
        return cls(settings=settings, db=database, names=names, activities=activities,
                   dead_letter=database[names.dead_letter], results=database[names.results],
                   idempotency=database[names.idempotency], events=events,
                   workers=database[names.workers], control=database[names.control],
                   schedules=database[names.schedules],
                   checkpoints=database[names.checkpoints],
                   dependencies=database[names.dependencies],
                   limits=database[names.limits], clock=clock)

    def collection(self, role: str) -> Collection:
        """The collection of a role ("activities", "events", ...: CollectionNames.all())."""
        value = getattr(self, role) if role in self.names.all() else None
        if not isinstance(value, Collection):
            raise KeyError(role)
        return value


class Part:
    """One concern's operations on a queue, over the queue's shared context.

    `RunnerQ` is made of parts by inheritance (api.py), so a part's method is the API's
    method itself: no forwarder restates its signature or its defaults.
    """

    def __init__(self, ctx: QueueContext) -> None:
        self._ctx = ctx
