"""Following the events collection: change streams where offered, polling otherwise.

Both paths share one resumable position, `EventCursor`, so a consumer can
stop, switch mode or reconnect without losing or repeating an event.

Polling reads by `ingested_at` (when the outbox flush wrote the event), not
by the event's own `timestamp`, so events copied late by a crash repair are
still seen. Writers' clocks may differ a little, so every poll re-reads the
last `settle` seconds and skips the ids it has already delivered.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from pymongo.collection import Collection
from pymongo.errors import OperationFailure, PyMongoError

from runnerq_cli.backend.models import Event
from runnerq_cli.errors import InvalidArgument

DEFAULT_SETTLE_SECONDS = 2.0
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass
class EventCursor:
    """The high-water mark of delivered events, plus ids delivered within the settle window."""

    ingested_at: datetime = EPOCH
    seen: dict[str, datetime] = field(default_factory=dict)

    def advance(self, event: Event, settle: float) -> None:
        stamp = event.ingested_at or event.timestamp
        self.seen[str(event.id)] = stamp
        if stamp > self.ingested_at:
            self.ingested_at = stamp
        horizon = self.ingested_at - timedelta(seconds=settle)
        for key in [k for k, v in self.seen.items() if v < horizon]:
            del self.seen[key]

    def encode(self) -> str:
        data = {"t": self.ingested_at.isoformat(),
                "s": {k: v.isoformat() for k, v in self.seen.items()}}
        raw = json.dumps(data, separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @classmethod
    def decode(cls, text: str) -> EventCursor:
        try:
            raw = base64.urlsafe_b64decode(text.strip() + "=" * (-len(text.strip()) % 4))
            data = json.loads(raw)
            return cls(datetime.fromisoformat(data["t"]),
                       {k: datetime.fromisoformat(v) for k, v in data["s"].items()})
        except (ValueError, KeyError, TypeError):
            raise InvalidArgument(f"invalid event cursor {text[:40]!r}") from None

    @classmethod
    def starting_at(cls, since: datetime) -> EventCursor:
        return cls(since - timedelta(microseconds=1))


@dataclass(frozen=True)
class EventFilter:
    activity_id: Any = None
    event_types: tuple[str, ...] = ()
    activity_types: tuple[str, ...] = ()
    worker_id: str | None = None

    def query(self) -> dict[str, Any]:
        query: dict[str, Any] = {}
        if self.activity_id is not None:
            query["activity_id"] = self.activity_id
        if self.event_types:
            query["event_type"] = {"$in": list(self.event_types)}
        if self.activity_types:
            query["activity_type"] = {"$in": list(self.activity_types)}
        if self.worker_id:
            query["worker_id"] = self.worker_id
        return query


def change_streams_supported(collection: Collection) -> bool:
    """True on a replica set or sharded cluster whose server accepts `watch()`."""
    try:
        with collection.watch([{"$match": {"operationType": "insert"}}], max_await_time_ms=1):
            return True
    except (OperationFailure, PyMongoError):
        return False


class EventStream:
    """An iterator of events after `cursor`, following new ones while `follow`.

    `mode` is "auto", "change-stream" or "poll". The position is in
    `self.cursor` at any moment; `stop()` ends the iteration from another
    thread or a signal handler.
    """

    def __init__(self, events: Collection, *, cursor: EventCursor | None = None,
                 filters: EventFilter | None = None, mode: str = "auto", follow: bool = True,
                 poll_interval: float = 0.5, settle: float = DEFAULT_SETTLE_SECONDS,
                 batch_size: int = 500) -> None:
        if mode not in ("auto", "change-stream", "poll"):
            raise InvalidArgument(f"unknown mode {mode!r}: use auto, change-stream or poll")
        self._events = events
        self.cursor = cursor or EventCursor()
        self.filters = filters or EventFilter()
        self.requested_mode = mode
        self.mode = mode
        self.follow = follow
        self.poll_interval = poll_interval
        self.settle = settle
        self.batch_size = batch_size
        self._stopped = False

    def stop(self) -> None:
        self._stopped = True

    def __iter__(self) -> Iterator[Event]:
        if not self.follow:
            yield from self._catch_up()
            return
        if self.mode == "auto":
            self.mode = "change-stream" if change_streams_supported(self._events) else "poll"
        if self.mode == "change-stream":
            yield from self._follow_change_stream()
        else:
            yield from self._follow_polling()

    def _deliver(self, doc: dict[str, Any]) -> Event | None:
        event = Event.from_doc(doc)
        if str(event.id) in self.cursor.seen:
            return None
        stamp = event.ingested_at or event.timestamp
        if stamp is not None and stamp < self.cursor.ingested_at - timedelta(seconds=self.settle):
            return None  # behind the window: delivered before the cursor was saved
        self.cursor.advance(event, self.settle)
        return event

    def _catch_up(self) -> Iterator[Event]:
        """Every stored event after the cursor, in ingestion order, until none is left."""
        while not self._stopped:
            since = self.cursor.ingested_at - timedelta(seconds=self.settle)
            query = {**self.filters.query(), "ingested_at": {"$gte": since}}
            docs = list(self._events.find(query).sort([("ingested_at", 1), ("_id", 1)])
                        .limit(self.batch_size + len(self.cursor.seen)))
            fresh = 0
            for doc in docs:
                event = self._deliver(doc)
                if event is not None:
                    fresh += 1
                    yield event
            if len(docs) < self.batch_size + len(self.cursor.seen) or not fresh:
                return

    def _follow_polling(self) -> Iterator[Event]:
        while not self._stopped:
            delivered = False
            for event in self._catch_up():
                delivered = True
                yield event
            if not delivered:
                _sleep_unless(self, self.poll_interval)

    def _follow_change_stream(self) -> Iterator[Event]:
        # Open the stream first, then read history: an event inserted in
        # between is seen by both, and the cursor's ids drop the repeat.
        pipeline = [{"$match": {"operationType": "insert",
                                **{f"fullDocument.{k}": v
                                   for k, v in self.filters.query().items()}}}]
        with self._events.watch(pipeline, max_await_time_ms=500) as stream:
            yield from self._catch_up()
            while not self._stopped and stream.alive:
                change = stream.try_next()
                if change is None:
                    continue
                event = self._deliver(change["fullDocument"])
                if event is not None:
                    yield event


def _sleep_unless(stream: EventStream, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not stream._stopped and time.monotonic() < deadline:
        time.sleep(min(0.1, seconds))

