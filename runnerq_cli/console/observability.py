"""Our documents in the shapes of RunnerQ 0.6's serde models (src/observability/models.rs).

RunnerQ's own console page (`runnerq-console.html`) and any client of its
`observability_api` read these field for field, so the mapping is exact and
written down in docs/console.md: statuses Pending/Running/Completed/Failed/
Retrying/DeadLetter, priorities Low/Normal/High/Critical, RFC 3339 times, the
id as the UUID's text. Pure functions of what the backend returned: no reads.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from runnerq_cli.backend.domain.documents import Activity, DeadLetterRecord, Event
from runnerq_cli.backend.domain.models import to_jsonable

# RunnerQ's ActivityPriority variants by our stored number.
PRIORITIES = {1: "Low", 2: "Normal", 3: "High", 4: "Critical"}
# The five lists of `activities/{key}` (RunnerQ's names) and our status they list.
LISTS = ("pending", "processing", "scheduled", "completed", "dead_letter")
# What may reach RunnerQ's page, whose code writes some fields into innerHTML unescaped
# (docs/console.md, "Data on RunnerQ's routes"): a worker id of the characters
# `texts.worker_id` allows at registration, an event type that is a name.
_WORKER_ID = re.compile(r"[A-Za-z0-9._:@-]{1,128}")
_EVENT_TYPE = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")


def inert_worker_id(value: Any) -> str | None:
    """A worker id another program wrote that is not of an id's characters: null."""
    return value if isinstance(value, str) and _WORKER_ID.fullmatch(value) else None


def listable(activity: Activity) -> bool:
    """An activity RunnerQ's page may list: its id is a UUID (a string `_id` holding
    markup would be written into the page as it is)."""
    return isinstance(activity.id, uuid.UUID)


def sendable(item: Event) -> bool:
    """An event RunnerQ's shapes can carry: of an activity with a UUID id, with a type
    that is a name (RunnerQ's `activity_id` is not optional)."""
    return (isinstance(item.activity_id, uuid.UUID)
            and isinstance(item.event_type, str) and bool(_EVENT_TYPE.fullmatch(item.event_type)))


def snapshots(activities: Iterable[Activity]) -> tuple[list[dict[str, Any]], int]:
    """The listable activities as snapshots, and how many were left out."""
    out: list[dict[str, Any]] = []
    skipped = 0
    for activity in activities:
        if listable(activity):
            out.append(snapshot(activity))
        else:
            skipped += 1
    return out, skipped


def rfc3339(value: datetime | None) -> str | None:
    """chrono's DateTime<Utc> serde form: `2026-12-01T10:00:00.123456Z`."""
    text = to_jsonable(value)
    return text if isinstance(text, str) else None


def status_of(status: str, retry_count: int) -> str:
    """RunnerQ's ActivityStatus for one of our eight statuses (docs/console.md): a waiting
    (parked durable) activity is `Pending` to RunnerQ's page, in none of its lists."""
    if status == "processing":
        return "Running"
    if status == "scheduled":
        return "Retrying" if retry_count > 0 else "Pending"
    return {"pending": "Pending", "waiting": "Pending", "completed": "Completed",
            "failed": "Failed", "cancelled": "Failed",
            "dead_letter": "DeadLetter"}.get(status, "Pending")


def _status_updated_at(activity: Activity) -> datetime:
    times = [t for t in (activity.completed_at, activity.started_at, activity.last_error_at,
                         activity.created_at) if isinstance(t, datetime)]
    return max(times)


def snapshot(activity: Activity) -> dict[str, Any]:
    """RunnerQ's ActivitySnapshot (score, lease_deadline_ms and processing_member are
    Redis internals RunnerQ omits when unset: omitted)."""
    running = activity.status == "processing"
    return {
        "id": str(activity.id),
        "activity_type": activity.activity_type,
        "payload": to_jsonable(activity.payload),
        "priority": PRIORITIES.get(activity.priority, "Normal"),
        "status": status_of(activity.status, activity.retry_count),
        "created_at": rfc3339(activity.created_at),
        "scheduled_at": rfc3339(activity.scheduled_at),
        "started_at": rfc3339(activity.started_at),
        "completed_at": rfc3339(activity.completed_at),
        "current_worker_id": inert_worker_id(activity.worker_id) if running else None,
        "last_worker_id": inert_worker_id(activity.worker_id),
        "retry_count": activity.retry_count,
        "max_retries": activity.max_retries,
        "timeout_seconds": int(activity.timeout_seconds),
        "retry_delay_seconds": int(activity.retry_delay_seconds),
        "metadata": {str(k): str(v) for k, v in (activity.metadata or {}).items()},
        "last_error": activity.last_error,
        "last_error_at": rfc3339(activity.last_error_at),
        "status_updated_at": rfc3339(_status_updated_at(activity)),
        "idempotency_key": activity.idempotency_key,
    }


def event(item: Event) -> dict[str, Any]:
    """RunnerQ's ActivityEvent (`detail` only when there is one, as its serde skips None)."""
    out: dict[str, Any] = {
        "activity_id": str(item.activity_id) if item.activity_id is not None else None,
        "timestamp": rfc3339(item.timestamp or item.ingested_at),
        "event_type": item.event_type,
        "worker_id": inert_worker_id(item.worker_id),
    }
    if item.detail:
        out["detail"] = to_jsonable(item.detail)
    return out


def dead_letter(record: DeadLetterRecord) -> dict[str, Any]:
    """RunnerQ's DeadLetterRecord."""
    failed_at = record.failed_at or record.activity.completed_at or record.activity.created_at
    return {"activity": snapshot(record.activity), "error": record.error,
            "failed_at": rfc3339(failed_at)}


def queue_stats(stats: dict[str, Any], max_workers: int | None) -> dict[str, Any]:
    """RunnerQ's QueueStats from `Inspector.stats()` (priorities: the live states)."""
    by_status = stats["by_status"]
    live = ("pending", "scheduled", "processing")

    def priority(name: str) -> int:
        per = stats["by_priority"].get(name, {})
        return sum(int(per.get(s, 0)) for s in live)

    return {
        "pending_activities": int(by_status.get("pending", 0)),
        "processing_activities": int(by_status.get("processing", 0)),
        "critical_priority": priority("critical"),
        "high_priority": priority("high"),
        "normal_priority": priority("normal"),
        "low_priority": priority("low"),
        "scheduled_activities": int(by_status.get("scheduled", 0)),
        "dead_letter_activities": int(by_status.get("dead_letter", 0)),
        "max_workers": max_workers,
    }
