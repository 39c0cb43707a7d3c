"""Following lifecycle events: change streams where offered, polling otherwise.

Both paths share one resumable position, `EventCursor`, so a consumer can
stop, switch mode or reconnect without losing or repeating an event.

Position. Every event is read by a *position* the server assigned when the
write that made it visible was applied (docs/design.md, "Following
events"): `created_at`, `started_at` and `completed_at` of the activity for
derived steps, `ingested_at` for stored events. The writers let the server
stamp them (`$currentDate`, stamps.py), so no client's clock or stall moves
them. What is left is the server's own time to apply one write: a write
stamped at server time p becomes visible a little after p (at most the
duration of its command). So every read re-reads from the cursor's *mark*,
`settle` seconds (default 5 s) behind the newest position delivered and
never ahead of the server's clock, and skips the ids already delivered
there: the cursor keeps those ids. An event visible within `settle` of its
position is delivered exactly once, late if other events with later
positions were delivered before it became visible.

`--since T` is exact on the event's own time: the cursor carries a floor,
and only events with `timestamp >= T` are delivered (scanning from
`T - SINCE_MARGIN` by position, so a stored event whose writer's clock ran
ahead of the server's is still found).

Change streams: the stream is a wake-up: when the watched collection
changes, the polling path reads, so both modes deliver the same events in
the same order. On a connection error either path waits and resumes from
the cursor.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from runnerq_cli.backend import LOGGER_NAME
from runnerq_cli.backend.domain import queries
from runnerq_cli.backend.domain.derived import (
    DERIVE_FIELDS,
    PREVIOUS_SCHEDULE_KEY,
    derive,
    event_order,
    unique,
)
from runnerq_cli.backend.domain.documents import Event
from runnerq_cli.backend.domain.event_cursor import (
    DEFAULT_SETTLE_SECONDS,
    EPOCH,
    EventCursor,
    EventFilter,
)
from runnerq_cli.backend.domain.event_cursor import position as _stamp
from runnerq_cli.backend.domain.models import MalformedDocument
from runnerq_cli.backend.domain.outage import RETRY_DELAYS, OutageWatch, is_away
from runnerq_cli.backend.domain.shapes import (
    LARGE_FIELDS,
    proves_no_step_doc,
    proves_no_step_filter,
)
from runnerq_cli.backend.store.changes import ChangeWake
from runnerq_cli.backend.store.driver import Collection
from runnerq_cli.backend.store.failures import server_away
from runnerq_cli.errors import CommandFailed, InvalidArgument, Unavailable

log = logging.getLogger(__name__)

# What the derived source reads of an activity (and its outbox's events, rarely present).
PROJECTION = {**DERIVE_FIELDS, "outbox.events": 1}
RECONNECT_DELAYS = RETRY_DELAYS  # seconds between attempts, the last one repeats
MODES = ("auto", "change-stream", "poll")
IDLE_READ_EVERY = 5.0  # change-stream mode: a read this often even when nothing changed


def proves_no_step(activities: Collection, ids: Iterable[Any]) -> set[Any]:
    """The ids among `ids` whose documents prove no derived step (shapes.proves_no_step_filter):
    one query by `_id`; on a server that refuses it (a wire-protocol server without `$type`
    lists), the large fields of those documents read and checked here instead."""
    wanted = list(ids)
    if not wanted:
        return set()
    try:
        return {doc["_id"] for doc in activities.find(proves_no_step_filter(wanted), {"_id": 1})}
    except CommandFailed:
        fields = {name: 1 for name in (*LARGE_FIELDS, "status")}
        return {doc["_id"] for doc in activities.find({"_id": {"$in": wanted}}, fields)
                if proves_no_step_doc(doc)}


class ChangeStreamsUnavailable(InvalidArgument):
    """`--mode change-stream` on a server that refuses `watch()` (standalone, mongoeco)."""


def server_time(collection: Collection) -> datetime | None:
    """The server's clock (`hello.localTime`), or None where a server does not say."""
    reply = collection.database.command("hello", codec_options=collection.codec_options)
    value = reply.get("localTime")
    if not isinstance(value, datetime):
        return None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def cursor_at_end(events: Collection, activities: Collection | None = None,
                  settle: float = DEFAULT_SETTLE_SECONDS) -> EventCursor:
    """After what is visible now (follow only what happens from now on): the window
    behind the server's clock is read and counted as delivered."""
    now = server_time(events) or datetime.now(UTC)
    window = EventStream(events, activities=activities, follow=False, settle=settle,
                         cursor=EventCursor(mark=now - timedelta(seconds=settle)))
    for _ in window._catch_up():
        pass
    cursor = window.cursor
    cursor.delivered = 0
    return cursor


def change_streams_supported(collection: Collection) -> bool:
    """True on a replica set or sharded cluster whose server accepts `watch()`."""
    try:
        with collection.watch([{"$match": {"operationType": "insert"}}], max_await_time_ms=1):
            return True
    except Unavailable:
        raise
    except CommandFailed:
        return False


def _normalise(doc: dict[str, Any]) -> dict[str, Any]:
    """Some servers hand UUIDs back as 16 raw bytes: show them as UUIDs all the same."""
    aid = doc.get("activity_id")
    if isinstance(aid, bytes | bytearray) and len(aid) == 16:
        return {**doc, "activity_id": uuid.UUID(bytes=bytes(aid))}
    return doc


class EventStream:
    """An iterator of events after `cursor`, following new ones while `follow`.

    Events come from two places (docs/design.md, "Events"): the events
    collection (steps that are stored) and the activities collection (steps
    its fields prove, see derived.py). Each source is read in the order of
    the events' positions, stamped by the server (`ingested_at` for stored
    events, the step's own time for derived ones) with a bounded batch; the sources are
    merged up to the earliest point where a batch was cut off, so the merged
    order holds across batches.

    `mode` is "auto", "change-stream" or "poll"; after iteration starts,
    `self.mode` says which path runs. The position is in `self.cursor` at any
    moment (save it after each event to resume exactly); `stop()` ends the
    iteration from another thread or a signal handler.
    """

    def __init__(self, events: Collection, *, activities: Collection | None = None,
                 cursor: EventCursor | None = None,
                 filters: EventFilter | None = None, mode: str = "auto", follow: bool = True,
                 poll_interval: float = 0.5, settle: float = DEFAULT_SETTLE_SECONDS,
                 batch_size: int = 500,
                 on_reconnect: Callable[[Exception], None] | None = None,
                 on_idle: Callable[[], None] | None = None) -> None:
        if mode not in MODES:
            raise InvalidArgument(f"unknown mode {mode!r}: use auto, change-stream or poll")
        self._events = events
        self._activities = activities
        self.cursor = cursor or EventCursor()
        self.filters = filters or EventFilter()
        self.mode = mode
        self.follow = follow
        self.poll_interval = poll_interval
        self.settle = settle
        self.batch_size = batch_size
        self.on_reconnect = on_reconnect
        self.on_idle = on_idle
        # The server away mid-tail (domain/outage.py): each reconnect a failed try of
        # this watch, the next read that answers its end; None: on_reconnect alone.
        self.outage: OutageWatch | None = None
        self._stopped = False
        self.reads = 0  # catch-ups started on a change stream's wake-up (benchmarks)

    def stop(self) -> None:
        self._stopped = True

    @property
    def stopped(self) -> bool:
        return self._stopped

    def __iter__(self) -> Iterator[Event]:
        # Errors that end the iteration (not the ones it reconnects after) reach the caller
        # translated by the queue's collections (driver.py), like every other operation.
        yield from self._events_in_order()

    def _events_in_order(self) -> Iterator[Event]:
        if not self.follow:
            yield from self._catch_up()
            return
        attempt = 0
        while not self._stopped:
            try:
                if self.mode == "auto":
                    supported = change_streams_supported(self._watched())
                    self.mode = "change-stream" if supported else "poll"
                if self.mode == "change-stream":
                    for event in self._follow_change_stream():
                        attempt = 0
                        self._answered()
                        yield event
                else:
                    for event in self._follow_polling():
                        attempt = 0
                        self._answered()
                        yield event
                return
            except Unavailable as exc:
                if not is_away(exc):
                    raise  # refused credentials: reconnecting is no help
                # The position is in self.cursor: resume from it, nothing lost or repeated.
                if self.outage is not None and is_away(exc):
                    self.outage.answered = True  # the tail has read: an outage, not a start
                    self.outage.failed(exc)
                if self.on_reconnect is not None:
                    self.on_reconnect(exc)
                _sleep_unless(self, RECONNECT_DELAYS[min(attempt, len(RECONNECT_DELAYS) - 1)])
                attempt += 1

    def _answered(self) -> None:
        """A read answered: an outage the tail was riding out is over."""
        if self.outage is not None and self.outage.away:
            self.outage.succeeded()

    def _idle(self) -> None:
        self._answered()
        if self.on_idle is not None:
            self.on_idle()

    def _watched(self) -> Collection:
        """Every lifecycle step changes the activity document: watch that collection."""
        return self._activities if self._activities is not None else self._events

    # ------------------------------------------------------------- reading

    def _deliver(self, doc: dict[str, Any]) -> Event | None:
        try:
            event = Event.from_doc(_normalise(doc))
        except MalformedDocument as exc:  # another program's event of the wrong shape
            logging.getLogger(LOGGER_NAME).warning("skipped a malformed event: %s", exc)
            return None
        if str(event.id) in self.cursor.seen:
            return None
        if _stamp(event) < self.cursor.mark:
            return None  # behind the mark: delivered before (see the module docstring)
        floor = self.cursor.floor
        if floor is not None and event.timestamp is not None and event.timestamp < floor:
            return None
        if not self._wanted(event):
            return None
        self.cursor.advance(event, self.settle)
        return event

    def _wanted(self, event: Event) -> bool:
        """The filters, for derived events (stored ones were filtered by the query)."""
        f = self.filters
        if f.event_types and event.event_type not in f.event_types:
            return False
        return not (f.worker_id and event.worker_id != f.worker_id)

    def _stored_source(self, start: datetime, limit: int) -> tuple[list[dict[str, Any]], Any]:
        query = queries.stored_events_since(start, self.filters.query(), self.cursor.floor)
        docs = list(self._events.find(query.filter).sort(query.sort_list).limit(limit))
        for doc in docs:
            doc["_stamp"] = doc.get("ingested_at") or doc.get("timestamp") or EPOCH
        cut = docs[-1]["_stamp"] if len(docs) == limit else None
        return docs, cut

    def _derived_source(self, start: datetime, limit: int) -> tuple[list[dict[str, Any]], Any]:
        """Events derived from activity documents whose steps fall at or after `start`."""
        if self._activities is None:
            return [], None
        f = self.filters
        wanted = set(f.event_types)
        base: dict[str, Any] = {}
        if f.activity_id is not None:
            base["_id"] = f.activity_id
        if f.activity_types:
            base["activity_type"] = {"$in": [str(t) for t in f.activity_types]}
        docs: dict[Any, dict[str, Any]] = {}
        cuts = []
        for label, name, extra, kinds, purpose in queries.TAIL_STEPS:
            if wanted and not wanted & kinds:
                continue
            query = queries.tail_step(label, name, extra, purpose, start, base)
            found = list(self._activities.find(query.filter, PROJECTION)
                         .sort(query.sort_list).limit(limit))
            if len(found) == limit and isinstance(found[-1].get(name), datetime):
                cuts.append(found[-1][name])  # (a malformed document's text is no time)
            for doc in found:
                docs[doc["_id"]] = doc
        # Steps waiting in outboxes are an ended attempt's Dequeued/Started only.
        out = [] if wanted and not wanted & {"Dequeued", "Started"} else \
            self._uncopied_steps(base, start)
        if not docs:
            return out, min(cuts) if cuts else None
        stored: dict[Any, list[dict[str, Any]]] = {}
        for event in self._events.find(queries.stored_events_of(docs).filter,
                                       {"activity_id": 1, "event_type": 1, "timestamp": 1,
                                        "detail": 1, PREVIOUS_SCHEDULE_KEY: 1}):
            stored.setdefault(event.get("activity_id"), []).append(event)
        malformed = proves_no_step(self._activities, docs)  # a malformed one proves no step
        for aid, doc in docs.items():
            # Events still in the outbox count too: they record what later writes changed.
            pending = [{**e, "activity_id": aid} for e in (doc.get("outbox") or {}).get(
                "events", ())]
            for event in derive(doc, [*stored.get(aid, ()), *pending], aid in malformed):
                if event["timestamp"] >= start:
                    event["_stamp"] = event["timestamp"]
                    out.append(event)
        return out, min(cuts) if cuts else None

    def _uncopied_steps(self, base: dict[str, Any], start: datetime) -> list[dict[str, Any]]:
        """Steps an ended attempt stored in its outbox (derived.attempt_events) that are not
        copied out yet: they keep their own time, so a tail must see them where they are
        (a lagging or crashed copier would otherwise put them behind its window)."""
        out: list[dict[str, Any]] = []
        if self._activities is None:
            return out
        for doc in self._activities.find(queries.uncopied_steps(base).filter,
                                         {"outbox.events": 1, "activity_type": 1}):
            for event in (doc.get("outbox") or {}).get("events", ()):
                stamp = event.get("ingested_at")
                if event.get("materialized") and isinstance(stamp, datetime) and stamp >= start:
                    out.append({**event, "activity_id": doc["_id"],
                                "activity_type": doc.get("activity_type"), "_stamp": stamp})
        return out

    def _now(self) -> datetime | None:
        """The server's clock, which caps the mark (a position from a clock running ahead
        must not push the mark past what the server stamps now)."""
        try:
            return server_time(self._events)
        except Unavailable:
            raise
        except CommandFailed as exc:  # a server without `hello`: the positions alone
            log.debug("no server time: %s", exc)
            return None

    def _move_mark(self, now: datetime | None, horizon: datetime | None) -> None:
        """After a read: what is positioned more than `settle` behind the newest delivered
        position (and behind the server's clock, and before a cut-off batch's horizon)
        was all visible to this read, so it is delivered."""
        newest = self.cursor.ingested_at
        if now is not None:
            newest = min(newest, now)
        mark = newest - timedelta(seconds=self.settle)
        if horizon is not None:
            mark = min(mark, horizon)
        self.cursor.move_mark(mark)

    def _catch_up(self) -> Iterator[Event]:
        """Every event after the cursor, in the order of their positions, until none is left."""
        while not self._stopped:
            now = self._now()  # before reading: all the read sees was stamped before it
            start = self.cursor.mark
            limit = self.batch_size + len(self.cursor.seen)
            stored, stored_cut = self._stored_source(start, limit)
            derived, derived_cut = self._derived_source(start, limit)
            cuts = [c for c in (stored_cut, derived_cut) if c is not None]
            docs = unique(stored + derived)
            docs.sort(key=lambda d: (d["_stamp"], *event_order(d)))
            if cuts:
                # A source was cut off at `horizon`: what lies at or past it may be
                # incomplete. Leave it for the next read (keeps the order), unless
                # nothing new would be left.
                horizon = min(cuts)
                before = [d for d in docs if d["_stamp"] < horizon]
                if any(str(d["_id"]) not in self.cursor.seen for d in before):
                    docs = before
                else:  # one time shared by more than a batch: that time, and nothing after
                    # it (the next read asks for more: `limit` grows with `seen`)
                    docs = [d for d in docs if d["_stamp"] <= horizon]
            fresh = 0
            for doc in docs:
                doc.pop("_stamp", None)
                doc.pop("derived", None)
                event = self._deliver(doc)
                if event is not None:
                    fresh += 1
                    yield event
            self._move_mark(now, min(cuts) if cuts else None)
            if not cuts or not fresh:
                return

    def _follow_polling(self) -> Iterator[Event]:
        while not self._stopped:
            delivered = False
            for event in self._catch_up():
                delivered = True
                yield event
            if not delivered:
                self._idle()
                _sleep_unless(self, self.poll_interval)

    def _follow_change_stream(self) -> Iterator[Event]:
        """Change streams tell when to read; the reading is the polling path's, so both
        modes deliver the same events in the same order.

        The stream is a wake-up (store/changes.py): its events are projected down to
        their resume token, and a burst of them wakes one read (the flag is cleared
        before each read; what changes during it costs one more). With no change the
        tail reads once per IDLE_READ_EVERY. The queue's own records (pauses, operator
        actions) change no activity: a second stream on the events collection wakes the
        tail for them, where it opens (else they wait for that idle read)."""
        wake = threading.Event()
        changes = ChangeWake(self._watched(), queries.tail_changes(), wake.set,
                             max_await=max(self.poll_interval, 0.05), name="runnerq-tail")
        records = None
        if self._activities is not None:  # the events collection is not watched already
            records = ChangeWake(self._events, queries.tail_record_changes(), wake.set,
                                 max_await=max(self.poll_interval, 0.05),
                                 name="runnerq-tail-records")
        if not changes.open():
            error = changes.error
            if error is not None and not changes.refused:
                raise error  # the server is away: reconnect and resume from the cursor
            raise ChangeStreamsUnavailable(
                "this server does not offer change streams (they need a replica set or a "
                f"sharded cluster): use mode poll or auto ({str(error)[:120]})", "mode")
        if records is not None:
            records.open()  # best effort: without it, records wait for the idle read
        try:
            while not self._stopped:
                wake.clear()
                self.reads += 1
                yield from self._catch_up()
                self._idle()
                if not changes.live:  # the stream ended: what ended it decides
                    if changes.error is not None and server_away(changes.error):
                        raise changes.error
                    return
                deadline = time.monotonic() + max(IDLE_READ_EVERY, self.poll_interval)
                while not self._stopped and not wake.is_set() and time.monotonic() < deadline:
                    wake.wait(min(0.25, self.poll_interval))  # stop() is seen within this
                if records is not None:
                    records.ensure()  # reopened (at most every 30 s) if it broke
        finally:
            changes.close()
            if records is not None:
                records.close()


def _sleep_unless(stream: EventStream, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not stream._stopped and time.monotonic() < deadline:
        time.sleep(min(0.05, seconds))
