"""One tail per server process, fanned out to every SSE client (docs/console.md, "The stream").

The tail is the backend's event stream (docs/design.md, "Following events"):
every event exactly once, in the order of positions, with a cursor after each.
One background thread reads it and hands each event, with the encoded cursor
just after it (the SSE `id:`), to every subscriber's bounded queue. So ten open
pages cost one tail, and a page that cannot keep up loses its queue (it is
dropped: its connection is closed, it reconnects with its last id) instead of
slowing the tail or the other pages.

Resuming (`Last-Event-ID`): a position the tail handed out recently is found
in its ring of recent deliveries and the client continues from the ring, then
live. Any other position (older than the ring, or from before a restart of the
console: positions are in the data, not in this process) is caught up by a
read of the client's own from that position to the present, after which the
client follows the shared tail, skipping what its own read already gave it and
keeping a cursor of its own, so every `id:` it receives is a position that
resumes with nothing lost and nothing repeated.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import queue
import threading
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from runnerq_cli.backend.domain.documents import Event
from runnerq_cli.backend.domain.event_cursor import EventCursor
from runnerq_cli.errors import InvalidArgument
from runnerq_cli.plural import counted

if TYPE_CHECKING:
    from runnerq_cli.backend.api import RunnerQ
    from runnerq_cli.backend.views.events import EventStream

LOG = logging.getLogger("runnerq.console")
CLIENT_QUEUE = 1000  # events a client may lag behind the tail before it is dropped
RING = 2000  # recent deliveries kept for clients that reconnect
MAX_CLIENTS = 32
CURSOR_MAX = 32 * 1024  # characters of a resume position (Last-Event-ID, ?cursor=)
CURSOR_IDS_MAX = 5000  # ids a resume position may hold (the settle window's)
CLOCK_SKEW = timedelta(minutes=5)  # how far past this clock a position's times may be
RESTART_DELAY = 1.0  # seconds before the tail is read again after an error


def resume_cursor(text: str, now: datetime | None = None) -> EventCursor:
    """A client's resume position, bounded: its text at most CURSOR_MAX characters, its
    mark not in the future, its ids pruned of times no event can have yet (a forged
    position of far-future ids would never be pruned and cost every event a walk over
    them), at most CURSOR_IDS_MAX of them. InvalidArgument (400) otherwise."""
    if len(text) > CURSOR_MAX:
        raise InvalidArgument(f"the resume position is longer than {CURSOR_MAX} characters")
    cursor = EventCursor.decode(text)
    limit = (now or datetime.now(UTC)) + CLOCK_SKEW
    if cursor.mark > limit:
        raise InvalidArgument("the resume position is in the future: start again without it")
    for key in [k for k, v in cursor.seen.items() if v > limit]:
        del cursor.seen[key]
    if len(cursor.seen) > CURSOR_IDS_MAX:
        raise InvalidArgument(f"the resume position holds more than {CURSOR_IDS_MAX} ids")
    return cursor


def _stamp(event: Event) -> datetime | None:
    return event.ingested_at or event.timestamp


@dataclass(frozen=True)
class Delivery:
    """One event as the tail delivered it: the position after it and the tail's mark."""

    event: Event
    position: str
    mark: datetime


class Subscriber:
    """One client's bounded queue; `dropped` once the tail found it full."""

    def __init__(self, capacity: int) -> None:
        self.queue: queue.Queue[Delivery | None] = queue.Queue(capacity)
        self.dropped = False
        self.closed = False

    def offer(self, item: Delivery) -> bool:
        try:
            self.queue.put_nowait(item)
        except queue.Full:
            self.dropped = True
            return False
        return True

    def close(self) -> None:
        """End the client's stream (the server stops): a sentinel, even on a full queue."""
        self.closed = True
        with contextlib.suppress(queue.Full):
            self.queue.put_nowait(None)


class TooManyClients(Exception):
    """The stream has MAX_CLIENTS subscribers already."""


class SharedTail:
    """The process's one tail: started on the first subscriber, stopped with the server."""

    def __init__(self, rq: RunnerQ, *, poll_interval: float = 0.5,
                 client_queue: int = CLIENT_QUEUE, ring: int = RING,
                 max_clients: int = MAX_CLIENTS) -> None:
        self._rq = rq
        self._poll_interval = poll_interval
        self._client_queue = client_queue
        self._max_clients = max_clients
        self._lock = threading.Lock()
        self._subscribers: list[Subscriber] = []
        self._ring: collections.deque[tuple[int, Delivery]] = collections.deque(maxlen=ring)
        self._index: dict[str, int] = {}
        self._seq = 0
        self._cursor: EventCursor | None = None
        self._position: str | None = None
        self._thread: threading.Thread | None = None
        self._stream: EventStream | None = None
        self._stopping = threading.Event()

    # ------------------------------------------------------------ the tail

    def _ensure_started(self) -> None:
        """Start the tail at the present. Its cursor is made here, before the caller goes
        on, so a client that catches up afterwards reads past the tail's start."""
        if self._thread is not None:
            return
        cursor = self._rq.inspector.event_cursor_at_end()
        self._cursor = cursor
        self._position = cursor.encode()
        self._index[self._position] = self._seq  # where a client that saw no event resumes
        self._thread = threading.Thread(target=self._run, name=f"console-tail {self._rq.queue}",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopping.is_set():
            assert self._cursor is not None
            stream = self._rq.event_stream(cursor=self._cursor,
                                           poll_interval=self._poll_interval)
            self._stream = stream
            try:
                for event in stream:
                    self._publish(event, stream.cursor)
                    if self._stopping.is_set():
                        return
            except Exception as exc:  # the database failed beyond reconnecting: read again
                LOG.warning("event tail: %s: reading again from its position",
                            type(exc).__name__)
                self._cursor = stream.cursor.copy()
                self._stopping.wait(RESTART_DELAY)
                continue
            return

    def _publish(self, event: Event, cursor: EventCursor) -> None:
        after = cursor.copy()
        delivery = Delivery(event, after.encode(), after.mark)
        with self._lock:
            self._cursor = after
            self._position = delivery.position
            self._seq += 1
            if len(self._ring) == self._ring.maxlen:
                _, oldest = self._ring[0]
                self._index.pop(oldest.position, None)
            self._ring.append((self._seq, delivery))
            self._index[delivery.position] = self._seq
            keep = []
            for sub in self._subscribers:
                if sub.offer(delivery):
                    keep.append(sub)
                else:
                    LOG.info("event stream: a client fell %s behind: dropped",
                             counted(self._client_queue, "event"))
            self._subscribers = keep

    def stop(self) -> None:
        self._stopping.set()
        if self._stream is not None:
            self._stream.stop()
        with self._lock:
            for sub in self._subscribers:
                sub.close()
            self._subscribers = []
        if self._thread is not None:
            self._thread.join(timeout=5)

    @property
    def clients(self) -> int:
        with self._lock:
            return len(self._subscribers)

    # ------------------------------------------------------------ clients

    def subscribe(self, last_id: str | None) -> Generator[tuple[Event | None, str], None, None]:
        """The client's stream: (event, position after it) pairs, forever.

        The first pair may be (None, position): no event, only the position to
        resume from (sent as an `id:` alone). An invalid `last_id` raises
        InvalidArgument before anything is subscribed; a full house TooManyClients.
        """
        private: EventCursor | None = None
        if last_id:
            private = resume_cursor(last_id)  # InvalidArgument: the caller says 400
        sub = Subscriber(self._client_queue)
        with self._lock:
            if len(self._subscribers) >= self._max_clients:
                raise TooManyClients()
            if self._thread is None:
                self._ensure_started()
            backlog: list[Delivery] = []
            seq = self._index.get(last_id) if last_id else None
            if seq is not None and (not self._ring or seq >= self._ring[0][0] - 1):
                # the ring holds every delivery after that position
                backlog = [d for s, d in self._ring if s > seq]
                private = None  # the shared positions are this client's
            start = self._position
            self._subscribers.append(sub)
        return self._deliveries(sub, backlog, private, start, last_id)

    def _deliveries(self, sub: Subscriber, backlog: list[Delivery],
                    private: EventCursor | None, start: str | None,
                    last_id: str | None) -> Generator[tuple[Event | None, str], None, None]:
        try:
            if private is None:
                if not last_id and start is not None:
                    yield None, start
                for delivery in backlog:
                    yield delivery.event, delivery.position
                yield from self._live(sub)
            else:
                yield from self._caught_up(sub, private)
        finally:
            self.unsubscribe(sub)

    def _live(self, sub: Subscriber) -> Iterator[tuple[Event | None, str]]:
        while True:
            item = self._next(sub)
            if item is None:
                return
            yield item.event, item.position

    def _next(self, sub: Subscriber) -> Delivery | None:
        """The next delivery; None when the client was dropped or the server stops
        (waits at most a second at a time so a drop is noticed)."""
        while True:
            if sub.closed or sub.dropped or self._stopping.is_set():
                return None  # a dropped client's queue is left: it resumes from its last id
            try:
                item = sub.queue.get(timeout=1.0)
            except queue.Empty:
                return _IDLE
            if item is None:
                return None
            return item

    def _caught_up(self, sub: Subscriber,
                   cursor: EventCursor) -> Iterator[tuple[Event | None, str]]:
        """A read of the client's own from `cursor` to the present, then the shared tail
        with what that read delivered skipped; positions from the client's own cursor."""
        catch_up = self._rq.event_stream(cursor=cursor, follow=False)
        for event in catch_up:
            if self._stopping.is_set():
                return
            yield event, catch_up.cursor.encode()
        own = catch_up.cursor.copy()
        while True:
            item = self._next(sub)
            if item is None:
                return
            if item is _IDLE:
                yield item.event, item.position
                continue
            event = item.event
            stamp = _stamp(event)
            fresh = str(event.id) not in own.seen and (stamp is None or stamp >= own.mark)
            if fresh:
                own.advance(event)
            # Everything before the tail's mark has reached this client (by its read or
            # the tail): its mark may follow, which keeps its cursor small.
            own.move_mark(item.mark)
            if fresh:
                yield event, own.encode()

    def unsubscribe(self, sub: Subscriber) -> None:
        with self._lock:
            if sub in self._subscribers:
                self._subscribers.remove(sub)


# Returned by `_next` when nothing came for a second: lets the writer send keep-alives.
_IDLE = Delivery(Event(id="", activity_id=None, timestamp=None, event_type="", worker_id=None,
                       detail={}), "", datetime.min)


def is_idle(event: Event | None, position: str) -> bool:
    """True for the pause marker `subscribe` yields when nothing happened for a second."""
    return event is _IDLE.event and position == ""


__all__ = ["Delivery", "InvalidArgument", "SharedTail", "Subscriber", "TooManyClients",
           "is_idle"]
