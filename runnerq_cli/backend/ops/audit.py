"""The audit trail: one record per operator action, in the events collection.

A record is an event with `activity_id` null, so it lives (and expires)
with the lifecycle events (the events TTL, `events_ttl`), is followed by
`tail events`, and is found through the `(activity_id, timestamp)` index:

    event_type  "OperatorAction" (or "Paused" / "Resumed")
    worker_id   "operator"
    detail      {action, state, count, ids, reason, actor, os_user, host, ...}

Audit before acting: a change (`AuditRun`) inserts its record with its
intent (`state: "running"`: who, from which OS user and host, why, the
filter, `--max`, the command) *before* its first write, updates it once per
batch with what was done so far, and sets `state` to `done` (or
`interrupted`, `failed`) at the end. A crash or a signal midway therefore
leaves the intent and the progress; `audit` shows a `running` record whose
progress stopped more than `STALE_AFTER` ago as interrupted.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import socket
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any

from bson import ObjectId

from runnerq_cli.backend.domain.event_types import EventType
from runnerq_cli.backend.domain.models import to_jsonable
from runnerq_cli.backend.domain.operator_text import check_text
from runnerq_cli.backend.store.context import QueueContext
from runnerq_cli.backend.store.stamps import insert_stamped
from runnerq_cli.errors import InvalidArgument

OPERATOR = "operator"
AUDIT_EVENT_TYPES = (EventType.OPERATOR_ACTION.value, EventType.PAUSED.value,
                     EventType.RESUMED.value)
AUDIT_IDS_MAX = 10_000  # ids kept in one record (the count is always exact)
COMMAND_MAX = 2000  # the command line kept in a record
# A `running` record without progress for this long is shown as interrupted.
STALE_AFTER = timedelta(minutes=2)
STATES = ("running", "done", "interrupted", "failed")


def os_user() -> str:
    """The operating-system user running this process (recorded beside the declared actor)."""
    try:
        return getpass.getuser() or "unknown"
    except Exception:  # no user name in this environment (containers)
        try:
            import pwd

            return pwd.getpwuid(os.getuid()).pw_name
        except Exception:
            return f"uid {os.getuid()}" if hasattr(os, "getuid") else "unknown"


def default_actor() -> str:
    """The operating-system user, the default `--actor`."""
    return os_user()


def safe_text(value: Any, limit: int = COMMAND_MAX) -> str:
    """Any text made storable: undecodable bytes (surrogates) escaped, cut to `limit`."""
    text = str(value).encode("utf-8", "backslashreplace").decode("utf-8")
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _text_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def _as_int(value: Any, default: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return default
    return int(value)


@dataclass(frozen=True)
class AuditEntry:
    """One operator action as recorded (any stored shape is read without failing)."""

    id: str
    timestamp: datetime | None
    action: str
    actor: str | None
    reason: str | None
    count: int
    ids: list[str] = field(default_factory=list)
    detail: dict[str, Any] = field(default_factory=dict)
    state: str = "done"

    @classmethod
    def from_doc(cls, doc: dict[str, Any], now: datetime | None = None) -> AuditEntry:
        raw = doc.get("detail")
        detail = dict(raw) if isinstance(raw, dict) else {}
        raw_ids = detail.pop("ids", [])
        ids = [str(i) for i in raw_ids] if isinstance(raw_ids, list) else []
        action = str(detail.pop("action", doc.get("event_type", "?")))
        stamp = doc.get("timestamp")
        state = detail.pop("state", "done")
        state = state if state in STATES else "done"  # records before states were kept
        if state == "running" and now is not None:
            last = detail.get("updated_at") or stamp
            if isinstance(last, datetime) and now - _aware(last) > STALE_AFTER:
                state = "interrupted"
        return cls(id=str(doc.get("_id")),
                   timestamp=stamp if isinstance(stamp, datetime) else None,
                   action=action, actor=_text_or_none(detail.pop("actor", None)),
                   reason=_text_or_none(detail.pop("reason", None)),
                   count=_as_int(detail.pop("count", None), len(ids)), ids=ids,
                   detail=detail, state=state)

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "timestamp": to_jsonable(self.timestamp), "action": self.action,
                "state": self.state, "actor": self.actor, "reason": self.reason,
                "count": self.count, "ids": self.ids, "detail": to_jsonable(self.detail)}


def _aware(moment: datetime) -> datetime:
    from datetime import UTC

    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


class AuditRun:
    """One audited change: intent first, progress per batch, the outcome last.

        run = log.begin("cancel", reason=..., actor=..., filter=..., max=100)
        run.progress(ids_of_batch, applied=10, skipped=2, last=str(last_id))
        run.finish("done", applied=10)

    Used as a context manager, an exception marks the record `interrupted`
    (KeyboardInterrupt, a signal) or `failed` before it propagates; writing
    that mark is best effort (the server may be the reason it failed).
    """

    def __init__(self, log: AuditLog, doc: dict[str, Any]) -> None:
        self._log = log
        self.doc = doc
        self.count = 0
        self.ids_kept = 0
        self.finished = False

    @property
    def id(self) -> ObjectId:
        record_id: ObjectId = self.doc["_id"]
        return record_id

    def progress(self, ids: Iterable[uuid.UUID | str] = (), *, count: int | None = None,
                 **fields: Any) -> None:
        """Add what one batch did: its ids (the count grows by them, or by `count`)."""
        id_list = list(ids)
        added = len(id_list) if count is None else count
        self.count += added
        room = max(0, AUDIT_IDS_MAX - self.ids_kept)
        kept = id_list[:room]
        self.ids_kept += len(kept)
        update: dict[str, Any] = {
            "$inc": {"detail.count": added},
            "$set": {"detail.updated_at": self._log.now(),
                     **{f"detail.{k}": to_storable(v) for k, v in fields.items()}}}
        if kept:
            update["$push"] = {"detail.ids": {"$each": kept}}
        if len(id_list) > room:
            update["$set"]["detail.ids_truncated"] = True
        self._log.update(self.id, update)

    def finish(self, state: str = "done", **fields: Any) -> None:
        """The outcome: `state` and the final figures (one update)."""
        if state not in STATES:
            raise ValueError(f"unknown audit state {state!r}")
        now = self._log.now()
        self._log.update(self.id, {"$set": {
            "detail.state": state, "detail.finished_at": now, "detail.updated_at": now,
            **{f"detail.{k}": to_storable(v) for k, v in fields.items()}}})
        self.finished = True

    def __enter__(self) -> AuditRun:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc is None or self.finished:
            return
        state = "interrupted" if isinstance(exc, KeyboardInterrupt | SystemExit) else "failed"
        with contextlib.suppress(Exception):  # else the record keeps intent and progress
            self.finish(state, error=safe_text(f"{type(exc).__name__}: {exc}", 500))


def to_storable(value: Any) -> Any:
    """A value for a record: JSON-able, with any undecodable text escaped."""
    value = to_jsonable(value)
    if isinstance(value, str):
        return safe_text(value)
    if isinstance(value, dict):
        return {safe_text(k, 200): to_storable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [to_storable(v) for v in value]
    return value


class AuditLog:
    """Write and read the audit trail of one queue."""

    def __init__(self, ctx: QueueContext) -> None:
        self._ctx = ctx

    def now(self) -> datetime:
        return self._ctx.clock()

    def update(self, record_id: ObjectId, update: dict[str, Any]) -> None:
        self._ctx.events.update_one({"_id": record_id}, update)

    def begin(self, action: str, *, reason: str | None = None, actor: str | None = None,
              event_type: str = EventType.OPERATOR_ACTION.value,
              **intent: Any) -> AuditRun:
        """Record the intent of a change before its first write; returns the run to update.

        `reason` and `actor` are checked first (InvalidArgument, nothing written).
        `intent` adds fields (filter, max, command, types...).
        """
        check_text(reason, "reason")
        check_text(actor, "actor")
        now = self.now()
        body = {"action": action, "state": "running", "count": 0, "ids": [],
                "reason": reason, "actor": actor or default_actor(), "os_user": os_user(),
                "host": safe_text(socket.gethostname(), 255), "pid": os.getpid(),
                "started_at": now, "updated_at": now,
                **{k: to_storable(v) for k, v in intent.items()}}
        doc = {"_id": ObjectId(), "activity_id": None, "activity_type": None,
               "timestamp": now, "event_type": event_type, "worker_id": OPERATOR,
               "detail": {k: v for k, v in body.items() if v is not None}}
        # ingested_at: the server's time of the insert, a tail's position (design.md).
        insert_stamped(self._ctx.events, doc, "ingested_at", self._ctx.clock, now)
        return AuditRun(self, {**doc, "ingested_at": now})

    @contextlib.contextmanager
    def one_change(self, action: str, *, reason: str | None, actor: str | None,
                   command: str | None, **intent: Any) -> Iterator[AuditRun]:
        """One change of a definition (a schedule, a limit) as an audit run: the intent
        recorded before the write, `done` (count 1) after it. A change cut short (killed,
        the server away) leaves the record `interrupted` or `failed`, or `running` when
        not even that could be written, as every operator action does."""
        with self.begin(action, reason=reason, actor=actor, command=command,
                        **intent) as run:
            yield run
            if not run.finished:
                run.finish("done", count=1)

    def audit(self, *, since: datetime | None = None, actor: str | None = None,
              action: str | None = None, limit: int = 100) -> list[AuditEntry]:
        """Operator actions, newest first (kept as long as events: the events TTL)."""
        if limit < 1 or limit > 10_000:
            raise InvalidArgument("limit must be between 1 and 10000", "limit")
        query: dict[str, Any] = {"activity_id": None,
                                 "event_type": {"$in": list(AUDIT_EVENT_TYPES)}}
        if since is not None:
            query["timestamp"] = {"$gte": since}
        if actor is not None:
            query["detail.actor"] = str(actor)
        if action is not None:
            query["detail.action"] = str(action)
        docs = self._ctx.events.find(query).sort([("timestamp", -1), ("_id", -1)]).limit(limit)
        now = self.now()
        return [AuditEntry.from_doc(doc, now) for doc in docs]
