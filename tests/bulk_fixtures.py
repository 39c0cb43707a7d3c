"""Fixtures for the bulk tests: many activities inserted directly, commands counted.

The dev server writes about a hundred documents a second one by one, so the
hundreds of activities these tests need are inserted with one insert_many,
shaped as `ActivityQueue` shapes a new activity (then moved to a terminal status
with the fields a worker leaves), not driven through a worker one by one.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from pymongo import MongoClient, monitoring

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.backend.ops.audit import AuditLog
from runnerq_cli.backend.ops.bulk import BulkActions
from runnerq_cli.backend.ops.operator import Operator
from runnerq_cli.backend.queue.maintenance import Maintenance
from runnerq_cli.backend.queue.queue import ActivityQueue, ActivitySpec
from runnerq_cli.backend.store.context import QueueContext
from runnerq_cli.config import Settings


class Commands(monitoring.CommandListener):
    """Counts the commands a client sends (name -> count), since the last `take`."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.names.append(event.command_name)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass

    def take(self) -> list[str]:
        names, self.names = self.names, []
        return names


def counted_context(settings: Settings) -> Iterator[tuple[QueueContext, Commands]]:
    """A QueueContext on its own client, whose every command is counted."""
    listener = Commands()
    client: MongoClient[dict[str, Any]] = MongoClient(
        settings.uri, uuidRepresentation="standard", tz_aware=True,
        event_listeners=[listener])
    try:
        yield QueueContext.create(settings, client[settings.database]), listener
    finally:
        client.close()


@pytest.fixture
def counted(settings: Settings) -> Iterator[tuple[QueueContext, Commands]]:
    """An indexed queue's context whose commands are counted (import it by name)."""
    RunnerQ(settings).maintenance.init_indexes()
    yield from counted_context(settings)


def bulk_actions(ctx: QueueContext) -> BulkActions:
    """The bulk actions over `ctx`, with their operator and audit log, as the CLI builds them."""
    audit = AuditLog(ctx)
    return BulkActions(ctx, Operator(ctx, Maintenance(ctx), audit), audit)


def insert_activities(ctx: QueueContext, count: int, status: str = "pending",
                      activity_type: str = "job") -> list[uuid.UUID]:
    """`count` activities in `status` (pending, failed or dead_letter), oldest first."""
    queue = ActivityQueue(ctx)
    now = ctx.clock()
    docs = []
    for index in range(count):
        created = now - timedelta(seconds=count - index)
        doc = queue.new_document(ActivitySpec(activity_type, {"n": index}),
                                          uuid.uuid4(), created)
        doc["created_at"] = created  # inserted directly, not stamped by an enqueue
        if status in ("failed", "dead_letter"):
            doc.update(status=status, completed_at=now, last_error="boom",
                       last_outcome=status, retry_count=1 if status == "failed" else 3)
        docs.append(doc)
    for start in range(0, len(docs), 500):
        ctx.activities.insert_many(docs[start:start + 500])
    return [d["_id"] for d in docs]
