"""Lifecycle events that an activity's own fields prove, so they are not stored.

RunnerQ stores no event for a step that the activity document already
records (docs/design.md, "Events"): `Enqueued`/`Scheduled` come from
`created_at`, `Dequeued` and `Started` from `started_at`, `Completed` and
`ResultStored` from `completed_at` of a completed activity. That saves one
event document per step on the hot path (and its index entries).

What a later write overwrites is stored instead, by that write:
- an attempt that ends other than by success clears `started_at` (reaper,
  retry back-off, release, operator retry) and stores the attempt's
  `Dequeued`/`Started` as event documents with their original timestamp
  (`materialized_attempt`), next to its `Requeued`/`Retrying`/... event;
- operator changes of priority or schedule keep the previous value in their
  event's detail (`old_priority`, `previous_scheduled_at`), from which the
  enqueue event's detail is rebuilt here.

A derived event has a deterministic id (`derived_id`), the same whether it
is derived from the document or was materialized from it, so readers and
tail cursors can tell a repeat from a new event. Events stored by earlier
versions (which stored every step) are "twins" of derived ones: same
activity, type and timestamp; the stored one wins.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from bson import ObjectId

from runnerq_cli.backend.domain.event_types import EventType
from runnerq_cli.backend.domain.models import FIRE_DETAIL, Status, fired_by
from runnerq_cli.backend.domain.shapes import ACTIVITY, EVENT

# The order of steps that share one timestamp (one write may record several).
LIFECYCLE_RANK = {name: rank for rank, name in enumerate((
    "Enqueued", "Scheduled", "Dequeued", "Started", "LeaseExtended", "Failed", "Retrying",
    "Requeued", "DeadLetter", "Completed", "ResultStored"))}
# Fields a reader of the activities collection needs to derive its events: those the steps
# read, and every other field of the shape but the large ones (shapes.LARGE_FIELDS, checked
# by a query instead: shapes.proves_no_step_filter), since a malformed document proves no step.
DERIVE_FIELDS = {"_id": 1, "activity_type": 1, "priority": 1, "status": 1, "created_at": 1,
                 "scheduled_at": 1, "started_at": 1, "completed_at": 1, "worker_id": 1,
                 "last_worker_id": 1, "retry_count": 1, "max_retries": 1,
                 "timeout_seconds": 1, "retry_delay_seconds": 1, "lease_id": 1,
                 "lease_deadline": 1, "last_error_at": 1, "claims": 1,
                 # the fire a schedule's activity came from: its enqueue step shows it
                 **{f"metadata.{key}": 1 for key in FIRE_DETAIL}}
# Stored events whose detail keeps a value that a later write overwrote.
_PREVIOUS_PRIORITY = ("PriorityChanged",)
_PREVIOUS_SCHEDULE = ("Rescheduled", "RunNow", "Retrying", "Requeued", "Retried", "Redriven")
# A park's `Yielded` keeps the overwritten `scheduled_at` beside its detail, not in it (the
# spec's Yielded detail has exactly its own keys); missing means none, as in a detail.
PREVIOUS_SCHEDULE_KEY = "previous_scheduled_at"


def _as_utc(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def derived_id(activity_id: Any, event_type: str, timestamp: datetime,
               attempt: int | None = None) -> ObjectId:
    """The same ObjectId for the same step, wherever it is derived or materialized.

    The leading four bytes are the step's time in seconds (as in any
    ObjectId), the rest a hash of the activity, the type, the millisecond and
    the attempt (two attempts may start within one millisecond).
    """
    millis = int(_as_utc(timestamp).timestamp() * 1000)
    raw = activity_id.bytes if isinstance(activity_id, uuid.UUID) else str(activity_id).encode()
    digest = hashlib.blake2b(raw + event_type.encode() + millis.to_bytes(8, "big", signed=True)
                             + str(attempt).encode(), digest_size=8).digest()
    return ObjectId((millis // 1000 & 0xFFFFFFFF).to_bytes(4, "big") + digest)


def _time_of(event: dict[str, Any]) -> datetime | None:
    """An event's `timestamp`, None if it is no date (a malformed event: readers skip it,
    but it may be ordered and compared with the others before that)."""
    timestamp = event.get("timestamp")
    return timestamp if isinstance(timestamp, datetime) else None


def _attempt_of(event: dict[str, Any]) -> Any:
    detail = event.get("detail")
    return detail.get("attempt") if isinstance(detail, dict) else None


def twin_key(event: dict[str, Any]) -> tuple[str, str, int, Any]:
    """What makes a stored event the twin of a derived one (an earlier version stored
    every step; those have no attempt number, hence the key without it too)."""
    timestamp = _time_of(event)
    millis = int(_as_utc(timestamp).timestamp() * 1000) if timestamp is not None else 0
    attempt = _attempt_of(event)
    return str(event.get("activity_id")), str(event.get("event_type")), millis, attempt


def _event(doc: dict[str, Any], event_type: str, timestamp: datetime, worker_id: str | None,
           **detail: Any) -> dict[str, Any]:
    attempt = detail.get("attempt")
    return {"_id": derived_id(doc["_id"], event_type, timestamp, attempt),
            "activity_id": doc["_id"],
            "activity_type": doc.get("activity_type"), "timestamp": timestamp,
            "event_type": event_type, "worker_id": worker_id,
            "detail": {k: v for k, v in detail.items() if v is not None},
            "ingested_at": timestamp, "derived": True}


def attempt_events(activity_id: Any, activity_type: str | None, started_at: datetime,
                   worker_id: str | None, attempt: int,
                   lease_deadline: datetime | None = None) -> list[dict[str, Any]]:
    """`Dequeued` and `Started` of one attempt, as event documents with their own time.

    Stored by the write that clears `started_at` (see the module docstring);
    `ingested_at` is the attempt's start, so a tail that already showed the
    derived step does not show it again, and one catching up finds it in order.
    Exactly what `derive` gives for the attempt (one event reads the same wherever
    it is read): so `lease_deadline` is not kept (it is accepted for callers that
    have it; `LeaseExtended` and the reaper's `Requeued` carry deadlines).
    """
    del lease_deadline  # a Started step carries none (see above)
    doc = {"_id": activity_id, "activity_type": activity_type}
    started = _event(doc, EventType.STARTED.value, started_at, worker_id, attempt=attempt)
    dequeued = _event(doc, EventType.DEQUEUED.value, started_at, worker_id, attempt=attempt)
    for event in (dequeued, started):
        event.pop("derived")
        event["materialized"] = True  # a derived step stored after the fact
    return [dequeued, started]


def _original(doc: dict[str, Any], stored: Iterable[dict[str, Any]]) -> tuple[Any, Any]:
    """The priority and schedule the activity was enqueued with (before later changes)."""
    priority, scheduled_at = doc.get("priority"), doc.get("scheduled_at")
    priority_found = schedule_found = False
    for event in sorted(stored, key=lambda e: e.get("timestamp") or datetime.min.replace(
            tzinfo=UTC)):
        detail = event.get("detail") or {}
        kind = event.get("event_type")
        if not priority_found and kind in _PREVIOUS_PRIORITY and "old_priority" in detail:
            priority, priority_found = detail["old_priority"], True
        if not schedule_found and kind in _PREVIOUS_SCHEDULE and (
                PREVIOUS_SCHEDULE_KEY in detail or not _from_version_0_1(event)):
            # Absent means there was none (writers may omit a null), except in a
            # Retrying/Requeued of 0.1, which never carried it: unknown there.
            scheduled_at, schedule_found = detail.get(PREVIOUS_SCHEDULE_KEY), True
        if not schedule_found and kind == "Yielded":
            scheduled_at, schedule_found = event.get(PREVIOUS_SCHEDULE_KEY), True
    return priority, scheduled_at


def _from_version_0_1(event: dict[str, Any]) -> bool:
    """A Retrying or Requeued stored by 0.1: it has no `attempt` in its detail."""
    return event.get("event_type") in ("Retrying", "Requeued") and \
        "attempt" not in (event.get("detail") or {})


def derive(doc: dict[str, Any], stored: Iterable[dict[str, Any]] = (),
           malformed: bool = False) -> list[dict[str, Any]]:
    """The events `doc`'s fields prove, less those already stored (twins).

    `stored` are the activity's stored events (any subset that includes the
    ones that keep overwritten values; an empty one for a fresh document).
    A malformed document (docs/design.md, "Malformed documents") proves
    nothing: its stored events are all there is (doctor names it). `doc` may be
    read with DERIVE_FIELDS; `malformed` then says what a query found of the
    fields left out (shapes.proves_no_step_filter).
    """
    if malformed or ACTIVITY.problem(doc) is not None:
        return []
    # A stored event of another shape (a text timestamp, a detail that is no document)
    # is no twin of anything: readers skip it, and it must not stop the derivation.
    stored = [e for e in stored if EVENT.problem(e) is None]
    twins = {twin_key(e) for e in stored}
    out: list[dict[str, Any]] = []
    created = doc.get("created_at")
    if created is not None:
        priority, scheduled_at = _original(doc, stored)
        fire = fired_by(doc.get("metadata"))  # a schedule's fire: which one
        if scheduled_at is not None:  # delayed at enqueue (later changes are undone above)
            out.append(_event(doc, EventType.SCHEDULED.value, created, None, priority=priority,
                              scheduled_at=scheduled_at, **fire))
        else:
            out.append(_event(doc, EventType.ENQUEUED.value, created, None, priority=priority,
                              **fire))
    started = doc.get("started_at")
    status = doc.get("status")
    if started is not None:
        worker = doc.get("worker_id") or doc.get("last_worker_id")
        attempt = int(doc.get("retry_count") or 0) + 1
        # No lease_deadline: it changes (extensions) and goes when the attempt ends, and one
        # event must read the same in a live tail and in the history afterwards.
        out.append(_event(doc, EventType.DEQUEUED.value, started, worker, attempt=attempt))
        out.append(_event(doc, EventType.STARTED.value, started, worker, attempt=attempt))
    completed = doc.get("completed_at")
    if status == Status.COMPLETED.value and completed is not None:
        worker = doc.get("last_worker_id") or doc.get("worker_id")
        out.append(_event(doc, EventType.COMPLETED.value, completed, worker))
        out.append(_event(doc, EventType.RESULT_STORED.value, completed, worker, state="Ok"))
    return [e for e in out
            if twin_key(e) not in twins and (*twin_key(e)[:3], None) not in twins]


def event_order(event: dict[str, Any]) -> tuple[Any, ...]:
    """Oldest first: time, then (for steps sharing a millisecond) attempt and lifecycle
    order, then id."""
    stamp = _time_of(event) or datetime.min.replace(tzinfo=UTC)
    rank = LIFECYCLE_RANK.get(str(event.get("event_type")), 50)
    attempt = _attempt_of(event)
    if not isinstance(attempt, int):  # enqueue steps come first, the rest after attempts
        attempt = 0 if rank < LIFECYCLE_RANK["Dequeued"] else 1 << 30
    return _as_utc(stamp), attempt, rank, str(event.get("_id"))


def unique(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each event once: one may be read from several sources, and a step an earlier
    version stored (no attempt number) wins over its derived or materialized twin."""
    legacy = {twin_key(e)[:3] for e in events
              if not e.get("derived") and not e.get("materialized") and twin_key(e)[3] is None}
    seen: set[str] = set()
    out = []
    for event in sorted(events, key=lambda e: bool(e.get("derived"))):
        key = str(event.get("_id"))
        if key in seen:
            continue
        if (event.get("derived") or event.get("materialized")) and twin_key(event)[:3] in legacy:
            continue
        seen.add(key)
        out.append(event)
    return out
