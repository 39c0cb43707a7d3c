"""The audit trail: one record per operator action, in the events collection.

A record is an event with `activity_id` null, so it lives (and expires)
with the lifecycle events (the events TTL, `events_ttl`), is followed by
`tail events`, and is found through the `(activity_id, timestamp)` index:

    event_type  "OperatorAction" (or "Paused" / "Resumed")
    worker_id   "operator"
    detail      {action, count, ids, reason, actor, ...}

It is written once per action (a bulk action is one record), after the
activities changed: a crash in between loses the record, never a change.
The per-activity events (Cancelled, Retried, ...) carry reason and actor too.
"""

from __future__ import annotations

import getpass
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from bson import ObjectId

from runnerq_cli.backend.context import QueueContext
from runnerq_cli.backend.models import EventType, to_jsonable
from runnerq_cli.backend.writes import insert_stamped
from runnerq_cli.errors import InvalidArgument

OPERATOR = "operator"
AUDIT_EVENT_TYPES = (EventType.OPERATOR_ACTION.value, EventType.PAUSED.value,
                     EventType.RESUMED.value)
AUDIT_IDS_MAX = 10_000  # ids kept in one record (the count is always exact)
TEXT_MAX = 1000


def default_actor() -> str:
    """The operating-system user, the default `--actor`."""
    try:
        return getpass.getuser() or "unknown"
    except Exception:  # no user name in this environment (containers)
        return "unknown"


def check_text(value: str | None, what: str) -> str | None:
    """A reason or actor: at most TEXT_MAX characters, no NUL (BSON refuses it in keys only,
    but it is never meant)."""
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > TEXT_MAX or "\x00" in value:
        raise InvalidArgument(f"{what}: at most {TEXT_MAX} characters, no NUL")
    return value


@dataclass(frozen=True)
class AuditEntry:
    """One operator action as recorded."""

    id: str
    timestamp: datetime
    action: str
    actor: str | None
    reason: str | None
    count: int
    ids: list[str] = field(default_factory=list)
    detail: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> AuditEntry:
        detail = dict(doc.get("detail") or {})
        ids = [str(i) for i in detail.pop("ids", []) or []]
        action = str(detail.pop("action", doc.get("event_type", "?")))
        return cls(id=str(doc["_id"]), timestamp=doc.get("timestamp"), action=action,
                   actor=detail.pop("actor", None), reason=detail.pop("reason", None),
                   count=int(detail.pop("count", len(ids))), ids=ids, detail=detail)

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "timestamp": to_jsonable(self.timestamp), "action": self.action,
                "actor": self.actor, "reason": self.reason, "count": self.count,
                "ids": self.ids, "detail": to_jsonable(self.detail)}


class AuditLog:
    """Write and read the audit trail of one queue."""

    def __init__(self, ctx: QueueContext) -> None:
        self._ctx = ctx

    def record_action(self, action: str, ids: Iterable[uuid.UUID | str] = (), *,
                      reason: str | None = None, actor: str | None = None,
                      event_type: str = EventType.OPERATOR_ACTION.value,
                      count: int | None = None, **detail: Any) -> dict[str, Any]:
        """Write one audit record; returns it. `detail` adds fields (filter, skipped...);
        `count` is for actions that do not list ids (purge)."""
        now = self._ctx.clock()
        id_list = list(ids)
        body = {"action": action, "count": len(id_list) if count is None else count,
                "ids": id_list[:AUDIT_IDS_MAX],
                "reason": reason, "actor": actor or default_actor(), **detail}
        if len(id_list) > AUDIT_IDS_MAX:
            body["ids_truncated"] = True
        doc = {"_id": ObjectId(), "activity_id": None, "activity_type": None,
               "timestamp": now, "event_type": event_type, "worker_id": OPERATOR,
               "detail": {k: v for k, v in body.items() if v is not None}}
        # ingested_at: the server's time of the insert, a tail's position (design.md).
        insert_stamped(self._ctx.events, doc, "ingested_at", self._ctx.clock, now)
        return {**doc, "ingested_at": now}

    def audit(self, *, since: datetime | None = None, actor: str | None = None,
              action: str | None = None, limit: int = 100) -> list[AuditEntry]:
        """Operator actions, newest first (kept as long as events: the events TTL)."""
        if limit < 1 or limit > 10_000:
            raise InvalidArgument("--limit must be between 1 and 10000")
        query: dict[str, Any] = {"activity_id": None,
                                 "event_type": {"$in": list(AUDIT_EVENT_TYPES)}}
        if since is not None:
            query["timestamp"] = {"$gte": since}
        if actor is not None:
            query["detail.actor"] = str(actor)
        if action is not None:
            query["detail.action"] = str(action)
        docs = self._ctx.events.find(query).sort([("timestamp", -1), ("_id", -1)]).limit(limit)
        return [AuditEntry.from_doc(doc) for doc in docs]
