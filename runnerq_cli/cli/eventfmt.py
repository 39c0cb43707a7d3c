"""How an event looks: the documented JSON record and the coloured one-line form.

Shared by `tail events`, `events ID` and `show ID`, so they print events alike.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from runnerq_cli.backend.models import Event

# docs/reference.md "Event JSON fields": keep these names stable.
EVENT_FIELDS = ("id", "activity_id", "activity_type", "event_type", "timestamp", "ingested_at",
                "worker_id", "detail")

STYLES = {
    "Enqueued": "cyan", "Scheduled": "cyan", "Dequeued": "blue", "Started": "blue",
    "Completed": "green", "ResultStored": "green", "Failed": "red", "DeadLetter": "bold red",
    "Retrying": "yellow", "Requeued": "yellow", "LeaseExtended": "dim",
    "Cancelled": "magenta", "Retried": "magenta", "Redriven": "magenta", "RunNow": "magenta",
    "Rescheduled": "magenta", "PriorityChanged": "magenta",
    "Paused": "bold yellow", "Resumed": "bold green", "OperatorAction": "bold magenta",
}


def event_record(event: Event) -> dict[str, Any]:
    from runnerq_cli.backend.models import to_jsonable

    return {
        "id": str(event.id),
        "activity_id": str(event.activity_id) if event.activity_id is not None else None,
        "activity_type": event.activity_type,
        "event_type": event.event_type,
        "timestamp": to_jsonable(event.timestamp),
        "ingested_at": to_jsonable(event.ingested_at),
        "worker_id": event.worker_id,
        "detail": to_jsonable(event.detail),
    }


def event_line(event: Event) -> Any:
    """A rich Text: time, type (coloured), activity id and type, worker, detail."""
    from rich.text import Text

    stamp = event.timestamp.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] if event.timestamp else "?"
    line = Text()
    line.append(stamp, style="dim")
    line.append("  ")
    line.append(f"{event.event_type:<15}", style=STYLES.get(event.event_type, "bold"))
    # Queue-level records (pause, resume, the audit) belong to no activity.
    line.append(f" {event.activity_id if event.activity_id is not None else '(queue)'}")
    if event.activity_type:
        line.append(f"  {event.activity_type}", style="bold")
    if event.worker_id:
        line.append(f"  worker={event.worker_id}", style="dim")
    for key, value in (event.detail or {}).items():
        text = str(value)
        line.append(f"  {key}={text if len(text) <= 120 else text[:117] + '...'}")
    return line
