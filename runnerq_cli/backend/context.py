"""What every backend operation needs: the queue's collections, settings and a clock."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pymongo.collection import Collection
from pymongo.database import Database

from runnerq_cli.backend.naming import CollectionNames
from runnerq_cli.backend.writes import OutboxWriter
from runnerq_cli.config import Settings


def utc_now() -> datetime:
    """Now, truncated to milliseconds: what MongoDB stores, so values compare equal."""
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


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
    outbox: OutboxWriter
    clock: Callable[[], datetime] = utc_now
    success_acks: Any = None  # GroupCommit of ack_success, made on first use

    @classmethod
    def create(cls, settings: Settings, db: Database,
               clock: Callable[[], datetime] = utc_now) -> QueueContext:
        names = CollectionNames(settings.queue)
        cols = {role: db[name] for role, name in names.all().items()}
        outbox = OutboxWriter(cols["activities"], cols["events"], cols["results"],
                              cols["dead_letter"], clock)
        return cls(settings=settings, db=db, names=names, outbox=outbox, clock=clock, **cols)
