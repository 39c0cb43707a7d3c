"""Where a consumer of events is (`EventCursor`) and what it asks for (`EventFilter`).

Pure: a cursor is built, encoded, decoded and moved without a server, so the CLI
(`--resume`, the cursor file) and the console (`Last-Event-ID`) make one before they
read. How a tail reads and moves it is views/events.py (docs/design.md, "Following
events: the tail").
"""

from __future__ import annotations

import base64
import json
import zlib
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from runnerq_cli.backend.domain.documents import Event
from runnerq_cli.errors import InvalidArgument

DEFAULT_SETTLE_SECONDS = 5.0
V2_SETTLE_SECONDS = 2.0  # the window cursors of version 2 were written with
SINCE_MARGIN = timedelta(seconds=60)  # --since scans this far back by position
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
CURSOR_VERSION = 3
CURSOR_MAX_BYTES = 8 * 1024 * 1024  # decoded; a real cursor is a few KB


def position(event: Event) -> datetime:
    """An event's position: stamped by the server (`ingested_at`), else its own time."""
    return event.ingested_at or event.timestamp or EPOCH


@dataclass
class EventCursor:
    """Where a consumer is: the *mark* (every event positioned before it was delivered),
    the ids delivered at or after it with their positions, and an optional floor on the
    event time (`--since`).

    `delivered` counts the events handed over through this object (not encoded): the
    cursor file tells by it which position was printed last.
    """

    mark: datetime = EPOCH
    seen: dict[str, datetime] = field(default_factory=dict)
    floor: datetime | None = None
    delivered: int = 0

    @property
    def ingested_at(self) -> datetime:
        """The newest position delivered (the mark when none is kept)."""
        return max(self.seen.values(), default=self.mark)

    def advance(self, event: Event, settle: float | None = None) -> None:
        """Record `event` as delivered (the mark moves only after a whole read)."""
        self.seen[str(event.id)] = position(event)
        self.delivered += 1

    def move_mark(self, to: datetime) -> None:
        """Everything positioned before `to` is delivered: forget those ids."""
        if to <= self.mark:
            return
        self.mark = to
        for key in [k for k, v in self.seen.items() if v < to]:
            del self.seen[key]

    def copy(self) -> EventCursor:
        seen = dict(self.seen)  # one step under the GIL: never a half-updated dict
        return EventCursor(self.mark, seen, self.floor, self.delivered)

    def encode(self) -> str:
        """An opaque, URL-safe text (compressed: the ids share prefixes)."""
        base = self.mark
        data = {"v": CURSOR_VERSION, "m": base.isoformat(),
                "f": self.floor.isoformat() if self.floor else None,
                "s": [[k, round((v - base).total_seconds() * 1000)] for k, v in self.seen.items()]}
        raw = zlib.compress(json.dumps(data, separators=(",", ":")).encode(), 9)
        return "ec" + base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @classmethod
    def decode(cls, text: str) -> EventCursor:
        """A cursor of this version, or of version 2 (its window becomes the mark)."""
        value = (text or "").strip()
        try:
            if not value.startswith("ec"):
                raise ValueError("no prefix")
            body = value[2:]
            inflate = zlib.decompressobj()
            raw = inflate.decompress(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)),
                                     CURSOR_MAX_BYTES)
            if inflate.unconsumed_tail:  # a cursor never holds this much: a bomb, or junk
                raise ValueError("too large")
            data = json.loads(raw)
            version = data.get("v")
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError, zlib.error):
            raise InvalidArgument(f"invalid event cursor {value[:40]!r}") from None
        if isinstance(version, int) and not isinstance(version, bool) and \
                version > CURSOR_VERSION:
            raise InvalidArgument(f"event cursor of a newer version ({version}) than this "
                                  f"runnerq-mongo reads ({CURSOR_VERSION}): upgrade, or start "
                                  "again with since", "since")
        try:
            if version == CURSOR_VERSION:
                base = datetime.fromisoformat(data["m"])
                mark = base
            elif version == 2:  # ids within 2 s behind the high-water mark `t`
                base = datetime.fromisoformat(data["t"])
                mark = base - timedelta(seconds=V2_SETTLE_SECONDS)
            else:
                raise ValueError("version")
            floor = datetime.fromisoformat(data["f"]) if data.get("f") else None
            seen = {str(k): base + timedelta(milliseconds=int(ms)) for k, ms in data["s"]}
            if base.tzinfo is None or (floor is not None and floor.tzinfo is None):
                raise ValueError("naive time")
            return cls(mark, seen, floor)
        except (ValueError, KeyError, TypeError, OverflowError, RecursionError):
            raise InvalidArgument(f"invalid event cursor {value[:40]!r}") from None

    @classmethod
    def starting_at(cls, since: datetime) -> EventCursor:
        """Every event whose own `timestamp` is at or after `since`, then all new ones."""
        if since.tzinfo is None:
            since = since.replace(tzinfo=UTC)
        return cls(mark=since - SINCE_MARGIN, floor=since)


@dataclass(frozen=True)
class EventFilter:
    activity_id: Any = None
    event_types: tuple[str, ...] = ()
    activity_types: tuple[str, ...] = ()
    worker_id: str | None = None

    def __post_init__(self) -> None:
        from runnerq_cli import filter_values

        filter_values.filter_terms(self.event_types, "event_types")
        filter_values.filter_terms(self.activity_types, "activity_types")
        filter_values.filter_term(self.worker_id, "worker_id")

    def query(self) -> dict[str, Any]:
        """Equality and `$in` filters only: user input never reaches an operator position."""
        query: dict[str, Any] = {}
        if self.activity_id is not None:
            query["activity_id"] = self.activity_id
        if self.event_types:
            query["event_type"] = {"$in": [str(t) for t in self.event_types]}
        if self.activity_types:
            query["activity_type"] = {"$in": [str(t) for t in self.activity_types]}
        if self.worker_id:
            query["worker_id"] = str(self.worker_id)
        return query
