"""Following the events collection: change streams where offered, polling otherwise.

Both paths share one resumable position, `EventCursor`, so a consumer can
stop, switch mode or reconnect without losing or repeating an event.

Position. Events are read in the order they became visible: by
`ingested_at` (when the outbox flush wrote them), not by the event's own
`timestamp`, so events copied late (a buffered flush, a crash repair) are
still seen after the cursor. Two writers may stamp `ingested_at` out of
order by a little (clock skew, a slow insert), so every read re-reads the
last `settle` seconds before the high-water mark and skips the ids already
delivered there: the cursor keeps those ids. An event made visible more than
`settle` seconds behind the high-water mark is the one case not delivered;
`settle` bounds the clock skew and flush latency tolerated (default 2 s).

`--since T` is exact on the event's own time: the cursor carries a floor,
and only events with `timestamp >= T` are delivered (scanning from
`T - settle` by `ingested_at`, so skewed stamps are still found).

Change streams: the stream is opened first, then the history is read by
polling; an event inserted in between arrives twice and the cursor's ids
drop the repeat. After that each insert arrives once, in insertion order.
On a connection error either path waits and resumes from the cursor.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from pymongo.collection import Collection
from pymongo.errors import ConnectionFailure, OperationFailure, PyMongoError

from runnerq_cli.backend.models import Event
from runnerq_cli.errors import InvalidArgument

DEFAULT_SETTLE_SECONDS = 2.0
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
CURSOR_VERSION = 2
RECONNECT_DELAYS = (0.5, 1, 2, 5)  # seconds between attempts, the last one repeats
MODES = ("auto", "change-stream", "poll")


class ChangeStreamsUnavailable(InvalidArgument):
    """`--mode change-stream` on a server that refuses `watch()` (standalone, mongoeco)."""


def _stamp(event: Event) -> datetime:
    return event.ingested_at or event.timestamp or EPOCH


@dataclass
class EventCursor:
    """Where a consumer is: the high-water mark of delivered events (`ingested_at`),
    the ids delivered within the settle window behind it, and an optional floor
    on the event time (`--since`)."""

    ingested_at: datetime = EPOCH
    seen: dict[str, datetime] = field(default_factory=dict)
    floor: datetime | None = None

    def advance(self, event: Event, settle: float) -> None:
        stamp = _stamp(event)
        self.seen[str(event.id)] = stamp
        if stamp > self.ingested_at:
            self.ingested_at = stamp
        horizon = self.ingested_at - timedelta(seconds=settle)
        for key in [k for k, v in self.seen.items() if v < horizon]:
            del self.seen[key]

    def window_start(self, settle: float) -> datetime:
        return self.ingested_at - timedelta(seconds=settle)

    def encode(self) -> str:
        """An opaque, URL-safe text (compressed: the ids share prefixes)."""
        base = self.ingested_at
        data = {"v": CURSOR_VERSION, "t": base.isoformat(),
                "f": self.floor.isoformat() if self.floor else None,
                "s": [[k, round((v - base).total_seconds() * 1000)] for k, v in self.seen.items()]}
        raw = zlib.compress(json.dumps(data, separators=(",", ":")).encode(), 9)
        return "ec" + base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @classmethod
    def decode(cls, text: str) -> EventCursor:
        value = (text or "").strip()
        try:
            if not value.startswith("ec"):
                raise ValueError("no prefix")
            body = value[2:]
            raw = zlib.decompress(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
            data = json.loads(raw)
            if data.get("v") != CURSOR_VERSION:
                raise ValueError("version")
            base = datetime.fromisoformat(data["t"])
            floor = datetime.fromisoformat(data["f"]) if data.get("f") else None
            seen = {str(k): base + timedelta(milliseconds=int(ms)) for k, ms in data["s"]}
            if base.tzinfo is None:
                raise ValueError("naive time")
            return cls(base, seen, floor)
        except (ValueError, KeyError, TypeError, zlib.error):
            raise InvalidArgument(f"invalid event cursor {value[:40]!r}") from None

    @classmethod
    def starting_at(cls, since: datetime) -> EventCursor:
        """Every event whose own `timestamp` is at or after `since`, then all new ones."""
        if since.tzinfo is None:
            since = since.replace(tzinfo=UTC)
        return cls(ingested_at=since, floor=since)

    @classmethod
    def at_end(cls, events: Collection) -> EventCursor:
        """After the newest stored event (follow only what happens from now on)."""
        newest = events.find_one({"ingested_at": {"$exists": True}},
                                 sort=[("ingested_at", -1), ("_id", -1)])
        cursor = cls()
        if newest is not None:
            newer_than = newest["ingested_at"] - timedelta(seconds=DEFAULT_SETTLE_SECONDS)
            for doc in events.find({"ingested_at": {"$gte": newer_than}}, {"ingested_at": 1}):
                cursor.seen[str(doc["_id"])] = doc["ingested_at"]
            cursor.ingested_at = newest["ingested_at"]
        return cursor


@dataclass(frozen=True)
class EventFilter:
    activity_id: Any = None
    event_types: tuple[str, ...] = ()
    activity_types: tuple[str, ...] = ()
    worker_id: str | None = None

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


def change_streams_supported(collection: Collection) -> bool:
    """True on a replica set or sharded cluster whose server accepts `watch()`."""
    try:
        with collection.watch([{"$match": {"operationType": "insert"}}], max_await_time_ms=1):
            return True
    except ConnectionFailure:
        raise
    except (OperationFailure, PyMongoError):
        return False


def _normalise(doc: dict[str, Any]) -> dict[str, Any]:
    """Some servers hand UUIDs back as 16 raw bytes: show them as UUIDs all the same."""
    aid = doc.get("activity_id")
    if isinstance(aid, bytes | bytearray) and len(aid) == 16:
        return {**doc, "activity_id": uuid.UUID(bytes=bytes(aid))}
    return doc


def _date(value: Any) -> Any:
    if isinstance(value, dict) and isinstance(value.get("$date"), str):
        parsed = datetime.fromisoformat(value["$date"].replace("Z", "+00:00"))
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    return value


def _from_change(change: dict[str, Any]) -> dict[str, Any] | None:
    """The inserted event from a change, trusting `documentKey` for its `_id`.

    A real MongoDB sends `fullDocument` as stored; some wire-compatible servers
    send it in extended JSON (dates as {"$date": ...}, ids wrapped): repaired here.
    """
    doc = change.get("fullDocument")
    if doc is None:
        return None
    key = (change.get("documentKey") or {}).get("_id", doc.get("_id"))
    return {**doc, "_id": key, "timestamp": _date(doc.get("timestamp")),
            "ingested_at": _date(doc.get("ingested_at"))}


class EventStream:
    """An iterator of events after `cursor`, following new ones while `follow`.

    `mode` is "auto", "change-stream" or "poll"; after iteration starts,
    `self.mode` says which path runs. The position is in `self.cursor` at any
    moment (save it after each event to resume exactly); `stop()` ends the
    iteration from another thread or a signal handler.
    """

    def __init__(self, events: Collection, *, cursor: EventCursor | None = None,
                 filters: EventFilter | None = None, mode: str = "auto", follow: bool = True,
                 poll_interval: float = 0.5, settle: float = DEFAULT_SETTLE_SECONDS,
                 batch_size: int = 500,
                 on_reconnect: Callable[[Exception], None] | None = None) -> None:
        if mode not in MODES:
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
        self.on_reconnect = on_reconnect
        self._stopped = False

    def stop(self) -> None:
        self._stopped = True

    @property
    def stopped(self) -> bool:
        return self._stopped

    def __iter__(self) -> Iterator[Event]:
        if not self.follow:
            yield from self._catch_up()
            return
        attempt = 0
        while not self._stopped:
            try:
                if self.mode == "auto":
                    supported = change_streams_supported(self._events)
                    self.mode = "change-stream" if supported else "poll"
                if self.mode == "change-stream":
                    for event in self._follow_change_stream():
                        attempt = 0
                        yield event
                else:
                    for event in self._follow_polling():
                        attempt = 0
                        yield event
                return
            except ConnectionFailure as exc:
                # The position is in self.cursor: resume from it, nothing lost or repeated.
                if self.on_reconnect is not None:
                    self.on_reconnect(exc)
                _sleep_unless(self, RECONNECT_DELAYS[min(attempt, len(RECONNECT_DELAYS) - 1)])
                attempt += 1

    def _query(self) -> dict[str, Any]:
        query: dict[str, Any] = {**self.filters.query(),
                                 "ingested_at": {"$gte": self.cursor.window_start(self.settle)}}
        if self.cursor.floor is not None:
            query["timestamp"] = {"$gte": self.cursor.floor}
        return query

    def _deliver(self, doc: dict[str, Any]) -> Event | None:
        event = Event.from_doc(_normalise(doc))
        if str(event.id) in self.cursor.seen:
            return None
        if _stamp(event) < self.cursor.window_start(self.settle):
            return None  # behind the window: delivered before (see the module docstring)
        floor = self.cursor.floor
        if floor is not None and event.timestamp is not None and event.timestamp < floor:
            return None
        self.cursor.advance(event, self.settle)
        return event

    def _catch_up(self) -> Iterator[Event]:
        """Every stored event after the cursor, in ingestion order, until none is left."""
        while not self._stopped:
            limit = self.batch_size + len(self.cursor.seen)
            docs = list(self._events.find(self._query())
                        .sort([("ingested_at", 1), ("_id", 1)]).limit(limit))
            # One flush stamps many events with one `ingested_at`: within it, event time
            # (then id) is the order they happened in, across processes too.
            docs.sort(key=lambda d: (d.get("ingested_at") or EPOCH, d.get("timestamp") or EPOCH,
                                     str(d["_id"])))
            full = len(docs) == limit
            if full:
                # The last stamp may continue past the limit: leave that group for the next
                # read (keeps a flush's events in order), unless nothing new would be left.
                last = docs[-1].get("ingested_at")
                trimmed = [d for d in docs if d.get("ingested_at") != last]
                if any(str(d["_id"]) not in self.cursor.seen for d in trimmed):
                    docs = trimmed
            fresh = 0
            for doc in docs:
                event = self._deliver(doc)
                if event is not None:
                    fresh += 1
                    yield event
            if not full or not fresh:
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
        match: dict[str, Any] = {"operationType": "insert",
                                 **{f"fullDocument.{k}": v
                                    for k, v in self.filters.query().items()}}
        try:
            stream = self._events.watch([{"$match": match}], max_await_time_ms=500)
        except ConnectionFailure:
            raise
        except (OperationFailure, PyMongoError) as exc:
            raise ChangeStreamsUnavailable(
                "this server does not offer change streams (they need a replica set or a "
                f"sharded cluster): use --mode poll or auto ({str(exc)[:120]})") from None
        with stream:
            yield from self._catch_up()
            while not self._stopped and stream.alive:
                change = stream.try_next()
                if change is None:
                    continue
                doc = _from_change(change)
                if doc is None:
                    continue
                event = self._deliver(doc)
                if event is not None:
                    yield event


def _sleep_unless(stream: EventStream, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not stream._stopped and time.monotonic() < deadline:
        time.sleep(min(0.05, seconds))
