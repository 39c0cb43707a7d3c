"""How an event looks: the documented JSON record and the coloured one-line form.

Shared by `tail events`, `events ID` and `show ID`, so they print events alike.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from runnerq_cli.backend.domain.documents import Event

# docs/reference.md "Event JSON fields": keep these names stable.
EVENT_FIELDS = ("id", "activity_id", "activity_type", "event_type", "timestamp", "ingested_at",
                "worker_id", "detail")

STYLES = {
    "Enqueued": "cyan", "Scheduled": "cyan", "Dequeued": "blue", "Started": "blue",
    "Completed": "green", "ResultStored": "green", "Failed": "red", "DeadLetter": "bold red",
    "Retrying": "yellow", "Requeued": "yellow", "LeaseExtended": "dim",
    "Cancelled": "magenta", "Retried": "magenta", "Redriven": "magenta", "RunNow": "magenta",
    "Rescheduled": "magenta", "PriorityChanged": "magenta", "Progress": "cyan",
    "Paused": "bold yellow", "Resumed": "bold green", "OperatorAction": "bold magenta",
}


def event_record(event: Event) -> dict[str, Any]:
    from runnerq_cli.backend.domain.models import to_jsonable

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


class OneLine:
    """A Text printed as one line: on a terminal cut with … at the screen's width (-o
    jsonl has every field); printed with soft wrap (piped: consoles never cut), whole,
    so grep sees every word.

    Not a Text itself: rich joins consecutive Texts into a new one before rendering
    and drops their `no_wrap`, so the choice is made here, at render time.
    """

    def __init__(self, text: Any, keep_from: int | None = None,
                 spare: tuple[tuple[int, int], ...] = ()) -> None:
        self.text = text
        # Where a field starts that is cut inside rather than dropped (an error: what a
        # DeadLetter or Failed line is for), when the screen is too narrow for it whole;
        # `spare` the spans given up, last first, to make room for it (the activity type,
        # then the event column's padding: alignment matters less than the error).
        self.keep_from = keep_from
        self.spare = spare

    @property
    def plain(self) -> str:
        return str(self.text.plain)

    def __rich_console__(self, console: Any, options: Any) -> Any:
        text = self.text
        if not options.no_wrap:  # a terminal: no soft wrap asked for
            options = options.update(no_wrap=True, overflow="ellipsis")
            width = options.max_width
            if text.cell_len > width:  # cut between fields, so a value is whole or gone
                keep = self.keep_from
                for start, end in reversed(self.spare):
                    if keep is None or keep + ERROR_ROOM <= width:
                        break
                    text = text[:start] + text[end:]
                    keep -= end - start
                cut = text.plain.rfind("  ", 0, width - 2)
                if text.cell_len <= width:
                    pass
                elif keep is not None and cut <= keep < width - 12:
                    text = text[:width - 1]  # the error, cut inside: its start is the news
                    text.append("…", style="dim")
                elif cut > 0:
                    text = text[:cut]
                    text.append("  …", style="dim")
        yield from console.render(text, options)


ERROR_ROOM = 30  # columns an error needs to say something: the type gives way below it


def event_width() -> int:
    """The event column's width: the longest event name's (PriorityChanged), so every
    line's id starts in the same column (a fixed 11 let `ResultStored` push its line one
    column to the right). A foreign name longer than that still shifts its own line."""
    from runnerq_cli.backend.domain.event_types import EventType

    return max(len(kind.value) for kind in EventType)


def _detail_value(value: Any) -> str:
    """A detail value in words: times in the one format, structures as compact JSON."""
    import json
    from datetime import datetime

    from runnerq_cli.backend.domain.models import to_jsonable
    from runnerq_cli.cli.timefmt import stamp

    if isinstance(value, datetime):
        return stamp(value)
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        return ",".join(value)
    if isinstance(value, dict | list | tuple):
        return json.dumps(to_jsonable(value), separators=(",", ":"), ensure_ascii=False)
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def event_line(event: Event) -> OneLine:
    """One line (OneLine): time, event (coloured), short activity id, type, detail, worker.

    Every value from the database goes through literal() (a type or an error can
    carry markup, ESC sequences or newlines); the activity id is its first
    SHORT_ID characters, accepted back as input (`events 3f0c2a9e`). Details
    with no value are left out (never `None`).
    """
    from rich.text import Text

    from runnerq_cli.cli.tables import SHORT_ID, short_id
    from runnerq_cli.cli.timefmt import stamp
    from runnerq_cli.literal import literal

    line = Text()
    line.append(stamp(event.timestamp) if event.timestamp else "?", style="dim")
    line.append("  ")
    kind = literal(event.event_type, max_length=40)
    line.append(kind, style=STYLES.get(event.event_type, "bold"))
    padding = (len(line.plain), len(line.plain) + max(0, event_width() - len(kind)))
    line.append(" " * (padding[1] - padding[0]))
    # Queue-level records (pause, resume, the audit) belong to no activity.
    owner = short_id(event.activity_id) if event.activity_id is not None else "(queue)"
    line.append(f" {owner:<{SHORT_ID}}")
    type_start = len(line.plain)
    if event.activity_type:
        line.append(f"  {literal(event.activity_type, max_length=120)}", style="bold")
    spare = (padding, *([(type_start, len(line.plain))] if event.activity_type else []))
    keep_from = None
    detail = dict(event.detail or {})
    # The error first: on a narrow screen it is what a Failed or DeadLetter line is read for.
    for key in sorted(detail, key=lambda k: k != "error"):
        value = detail[key]
        if value is None or value == "" or value == [] or value == {}:
            continue
        if key == "error":
            keep_from = len(line.plain)
        line.append(f"  {literal(key, max_length=40)}="
                    f"{literal(_detail_value(value), max_length=120)}")
    if event.worker_id:  # last: the detail (an error) matters more on a narrow screen
        line.append(f"  worker={literal(event.worker_id, max_length=120)}", style="dim")
    return OneLine(line, keep_from, spare)
