"""The inspection side of design.md: what operators and tools read."""

from __future__ import annotations

import uuid
from typing import Any

from runnerq_cli.backend.context import QueueContext
from runnerq_cli.backend.events import EventCursor, EventFilter, EventStream
from runnerq_cli.backend.models import (
    Activity,
    DeadLetterRecord,
    Event,
    Priority,
    Status,
    parse_activity_id,
)
from runnerq_cli.errors import InvalidArgument, NotFound

MAX_PAGE = 10_000


def _page(offset: int, limit: int) -> tuple[int, int]:
    if offset < 0 or limit < 1 or limit > MAX_PAGE:
        raise InvalidArgument(f"offset must be >= 0 and limit between 1 and {MAX_PAGE}")
    return offset, limit


class InspectionOperations:
    """Read-only views of one queue (no method here changes anything)."""

    _ctx: QueueContext

    def stats(self) -> dict[str, Any]:
        """Counts by status and by priority, computed on the server.

        One `$group` over the claim-order index's leading fields; activities
        are never loaded into the client.
        """
        by_status = {s.value: 0 for s in Status}
        by_priority: dict[str, dict[str, int]] = {}
        pipeline = [{"$group": {"_id": {"status": "$status", "priority": "$priority"},
                                "count": {"$sum": 1}}}]
        for row in self._ctx.activities.aggregate(pipeline):
            status, priority = row["_id"].get("status"), row["_id"].get("priority")
            by_status[str(status)] = by_status.get(str(status), 0) + row["count"]
            try:
                pname = Priority(priority).name.lower()
            except ValueError:
                pname = str(priority)
            per = by_priority.setdefault(pname, {})
            per[str(status)] = per.get(str(status), 0) + row["count"]
        return {"queue": self._ctx.settings.queue, "by_status": by_status,
                "by_priority": by_priority, "total": sum(by_status.values())}

    def _list(self, query: dict[str, Any], sort: list[tuple[str, int]], offset: int,
              limit: int) -> list[Activity]:
        offset, limit = _page(offset, limit)
        cursor = self._ctx.activities.find(query, {"outbox": 0}).sort(sort).skip(offset)
        return [Activity.from_doc(doc) for doc in cursor.limit(limit)]

    def list_pending(self, offset: int = 0, limit: int = 50) -> list[Activity]:
        return self._list({"status": Status.PENDING.value},
                          [("priority", -1), ("created_at", 1)], offset, limit)

    def list_processing(self, offset: int = 0, limit: int = 50) -> list[Activity]:
        return self._list({"status": Status.PROCESSING.value},
                          [("lease_deadline", 1)], offset, limit)

    def list_scheduled(self, offset: int = 0, limit: int = 50) -> list[Activity]:
        return self._list({"status": Status.SCHEDULED.value}, [("scheduled_at", 1)], offset, limit)

    def list_completed(self, offset: int = 0, limit: int = 50) -> list[Activity]:
        return self._list({"status": Status.COMPLETED.value},
                          [("completed_at", -1)], offset, limit)

    def list_failed(self, offset: int = 0, limit: int = 50) -> list[Activity]:
        return self._list({"status": Status.FAILED.value}, [("completed_at", -1)], offset, limit)

    def list_dead_letter(self, offset: int = 0, limit: int = 50) -> list[DeadLetterRecord]:
        offset, limit = _page(offset, limit)
        cursor = self._ctx.dead_letter.find().sort([("failed_at", -1)]).skip(offset).limit(limit)
        return [DeadLetterRecord(Activity.from_doc(doc["activity"]), doc.get("error", ""),
                                 doc.get("failed_at")) for doc in cursor]

    def get_activity(self, activity_id: uuid.UUID | str) -> Activity:
        """The activity, or NotFound."""
        aid = parse_activity_id(activity_id)
        doc = self._ctx.activities.find_one({"_id": aid}, {"outbox": 0})
        if doc is None:
            raise NotFound(f"activity {aid} not found")
        return Activity.from_doc(doc)

    def get_activity_events(self, activity_id: uuid.UUID | str, limit: int = 100) -> list[Event]:
        """Events of one activity, newest first, including any not yet copied out."""
        aid = parse_activity_id(activity_id)
        _page(0, limit)
        stored = [Event.from_doc(d) for d in self._ctx.events.find({"activity_id": aid})
                  .sort([("timestamp", -1), ("_id", -1)]).limit(limit)]
        pending = self._ctx.activities.find_one({"_id": aid}, {"outbox.events": 1,
                                                               "activity_type": 1})
        known = {e.id for e in stored}
        for doc in ((pending or {}).get("outbox") or {}).get("events", []):
            if doc["_id"] not in known:
                stored.append(Event.from_doc({**doc, "activity_id": aid}))
        stored.sort(key=lambda e: (e.timestamp, str(e.id)), reverse=True)
        return stored[:limit]

    def event_stream(self, *, cursor: EventCursor | None = None,
                     filters: EventFilter | None = None, mode: str = "auto",
                     follow: bool = True, poll_interval: float = 0.5) -> EventStream:
        """Lifecycle events after `cursor` (all stored ones by default), in ingestion order."""
        return EventStream(self._ctx.events, cursor=cursor, filters=filters, mode=mode,
                           follow=follow, poll_interval=poll_interval)
