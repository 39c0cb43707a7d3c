"""The inspection side of docs/design.md ("Operations"): what operators and tools read.

`Inspection` is RunnerQ's inspection trait (traits.InspectionBackend), part of the
RunnerQ itself; `Inspector` (`rq.inspector`) adds the operator's views: the full
stats snapshot, keyset pages, the failed list, the tail's starting point, metrics.
The snapshot and the event stream load their modules on first use: a producer that
only enqueues never imports them.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from runnerq_cli.backend.domain import queries
from runnerq_cli.backend.domain.derived import DERIVE_FIELDS, derive, event_order, unique
from runnerq_cli.backend.domain.documents import Activity, DeadLetterRecord, Event
from runnerq_cli.backend.domain.models import MalformedDocument, Status, parse_activity_id
from runnerq_cli.backend.domain.shapes import readable
from runnerq_cli.backend.store.context import Part, QueueContext
from runnerq_cli.errors import InvalidArgument, NotFound

if TYPE_CHECKING:
    from runnerq_cli.backend.domain.event_cursor import EventCursor, EventFilter
    from runnerq_cli.backend.domain.pagination import ListFilter, Page
    from runnerq_cli.backend.domain.snapshots import MetricsSample, StatsSnapshot
    from runnerq_cli.backend.ops.control import Control
    from runnerq_cli.backend.views.events import EventStream
    from runnerq_cli.backend.views.failures import Failures

MAX_PAGE = 10_000


def _page(offset: int, limit: int) -> tuple[int, int]:
    if offset < 0 or limit < 1 or limit > MAX_PAGE:
        raise InvalidArgument(f"offset must be >= 0 and limit between 1 and {MAX_PAGE}")
    return offset, limit


def _well_formed_event(doc: dict[str, Any]) -> dict[str, Any]:
    Event.from_doc(doc)  # MalformedDocument: skipped
    return doc


class Inspection(Part):
    """RunnerQ's inspection trait: read-only views of one queue (nothing here changes
    anything)."""

    def stats(self) -> dict[str, Any]:
        """Counts by status and by priority, computed on the server (metrics.counts).

        Exact but for `completed` (and so `total`) past EXACT_COMPLETED_UP_TO, then an
        estimate listed in `estimated`; activities are never loaded into the client.
        """
        from runnerq_cli.backend.views.metrics import counts

        by_status, by_priority, estimated = counts(self._ctx)
        return {"queue": self._ctx.settings.queue, "by_status": by_status,
                "by_priority": by_priority, "total": sum(by_status.values()),
                "estimated": estimated}

    def _list(self, status: Status, offset: int, limit: int) -> list[Activity]:
        return self.list_counted(status, offset, limit)[0]

    def list_counted(self, status: Status, offset: int = 0,
                     limit: int = 50) -> tuple[list[Activity], int]:
        """An offset page of `status` (RunnerQ's lists), and how many of the page's
        documents were malformed and left out, so a reader can say its rows are fewer."""
        offset, limit = _page(offset, limit)
        listing = queries.list_page(status)
        cursor = self._ctx.activities.find(listing.filter, {"outbox": 0}).sort(
            listing.sort_list).skip(offset)
        return readable(cursor.limit(limit), Activity.from_doc, self._ctx.activities.name)

    def list_pending(self, offset: int = 0, limit: int = 50) -> list[Activity]:
        return self._list(Status.PENDING, offset, limit)

    def list_processing(self, offset: int = 0, limit: int = 50) -> list[Activity]:
        return self._list(Status.PROCESSING, offset, limit)

    def list_scheduled(self, offset: int = 0, limit: int = 50) -> list[Activity]:
        return self._list(Status.SCHEDULED, offset, limit)

    def list_completed(self, offset: int = 0, limit: int = 50) -> list[Activity]:
        return self._list(Status.COMPLETED, offset, limit)

    def list_dead_letter(self, offset: int = 0, limit: int = 50) -> list[DeadLetterRecord]:
        return self.list_dead_letter_counted(offset, limit)[0]

    def list_dead_letter_counted(self, offset: int = 0, limit: int = 50
                                 ) -> tuple[list[DeadLetterRecord], int]:
        """list_dead_letter, and how many of the page's records were malformed."""
        offset, limit = _page(offset, limit)
        listing = queries.dead_letter_list()
        cursor = self._ctx.dead_letter.find(listing.filter).sort(listing.sort_list).skip(
            offset).limit(limit)
        return readable(cursor, DeadLetterRecord.from_doc, self._ctx.dead_letter.name)

    def get_activity(self, activity_id: uuid.UUID | str) -> Activity:
        """The activity, or NotFound."""
        aid = parse_activity_id(activity_id)
        doc = self._ctx.activities.find_one({"_id": aid}, {"outbox": 0})
        if doc is None:
            raise NotFound(f"activity {aid} not found")
        return Activity.from_doc(doc)

    def get_activity_events(self, activity_id: uuid.UUID | str, limit: int = 100) -> list[Event]:
        """Events of one activity, newest first: stored ones, those still in its outbox,
        and those its fields prove (derived.py)."""
        aid = parse_activity_id(activity_id)
        _page(0, limit)
        # The activity first: an outbox is cleared only after its copy, so whatever a flush
        # moves between the two reads is in the second one.
        doc = self._ctx.activities.find_one({"_id": aid}, {**DERIVE_FIELDS, "outbox.events": 1})
        of_activity = queries.events_of(aid)
        stored = readable(self._ctx.events.find(of_activity.filter).sort(of_activity.sort_list),
                          _well_formed_event, self._ctx.events.name)[0]
        if doc is not None:
            known = {e["_id"] for e in stored}
            for event in (doc.get("outbox") or {}).get("events", []):
                if event["_id"] not in known:
                    stored.append({**event, "activity_id": aid})
            from runnerq_cli.backend.views.events import proves_no_step

            stored += derive(doc, stored, malformed=bool(proves_no_step(
                self._ctx.activities, [aid])))
        events = sorted(unique(stored), key=event_order, reverse=True)
        return readable(events[:limit], Event.from_doc, self._ctx.events.name)[0]

    def event_stream(self, *, cursor: EventCursor | None = None,
                     filters: EventFilter | None = None, mode: str = "auto",
                     follow: bool = True, poll_interval: float = 0.5) -> EventStream:
        """Lifecycle events after `cursor` (all stored ones by default), in ingestion order."""
        from runnerq_cli.backend.views.events import EventStream

        # The queue's collections translate every step of the stream (driver.py).
        return EventStream(self._ctx.events, activities=self._ctx.activities, cursor=cursor,
                           filters=filters, mode=mode, follow=follow,
                           poll_interval=poll_interval)


class Inspector(Inspection):
    """The operator's views of one queue (`rq.inspector`): the trait's, and more."""

    def __init__(self, ctx: QueueContext, control: Control) -> None:
        super().__init__(ctx)
        self._control = control

    def stats_snapshot(self, *, by_type: bool = False, throughput_minutes: int = 5,
                       latency_window_seconds: float = 900.0,
                       sample_cap: int = 10_000,
                       history_seconds: float | None = None) -> StatsSnapshot:
        """The full `stats` snapshot (metrics.py: schema, and what each query costs).

        With `history_seconds`, also the per-type history of that window (`--since`,
        `--watch`): outcomes per bucket and the run time's p50/p95 trend.
        """
        from runnerq_cli.backend.views.metrics import StatsOptions, snapshot

        options = StatsOptions(by_type=by_type, throughput_minutes=throughput_minutes,
                               latency_window_seconds=latency_window_seconds,
                               sample_cap=sample_cap, history_seconds=history_seconds)
        return snapshot(self._ctx, options)

    def failures_by_type_and_error(self, *, since: datetime | timedelta | None = None,
                                   limit: int | None = None) -> Failures:
        """What is failing: failed attempts since `since` (a time, or how long ago; None:
        every event kept) grouped by type and error, most first (failures.py).

        Kept through retries and redrives (read from the stored events, not from
        the activities, whose `last_error` a retry clears).
        """
        from runnerq_cli.backend.views.failures import DEFAULT_LIMIT, group_failures

        return group_failures(self._ctx, since, DEFAULT_LIMIT if limit is None else limit)

    def list_page(self, status: Status | str, *, filters: ListFilter | None = None,
                  limit: int = 50, after: str | None = None,
                  malformed: list[tuple[str, str]] | None = None) -> Page:
        """One page of activities in `status`, after the cursor `after` (keyset pagination).

        The order is the status's natural one (pagination.ORDERS); the page's
        `next_cursor` is None when nothing follows. The page leaves malformed documents
        out (`skipped`); given a list, `malformed` gets each one's id (as text) and its
        problem, in the page's order, so a view can show them as what they are.
        """
        from runnerq_cli.backend.domain.pagination import (
            MAX_LIMIT,
            ListFilter,
            Page,
            after_clause,
            decode_cursor,
            encode_cursor,
            sort_values,
        )

        status = Status.parse(status) if isinstance(status, str) else status
        if limit < 1 or limit > MAX_LIMIT:
            raise InvalidArgument(f"limit must be between 1 and {MAX_LIMIT}")
        order = queries.list_page(status).sort
        query = (filters or ListFilter()).query(status)
        if after:
            query = {"$and": [query, after_clause(order, decode_cursor(after, status))]}
        docs = list(self._ctx.activities.find(query, {"outbox": 0}).sort(list(order))
                    .limit(limit + 1))
        more = len(docs) > limit
        docs = docs[:limit]
        cursor = encode_cursor(status, sort_values(docs[-1], order)) if more and docs else None
        items, skipped = readable(docs, Activity.from_doc, self._ctx.activities.name)
        if skipped and malformed is not None:
            for doc in docs:
                try:
                    Activity.from_doc(doc)
                except MalformedDocument as exc:
                    malformed.append((str(doc.get("_id")), exc.problem))
        return Page(items, cursor, skipped)

    def event_cursor_at_end(self) -> EventCursor:
        """A cursor after the newest event: follow only what happens from now on."""

        from runnerq_cli.backend.views.events import cursor_at_end

        return cursor_at_end(self._ctx.events, self._ctx.activities)

    def resolve_id(self, text: str) -> uuid.UUID:
        """The activity a full id or a unique prefix names (idprefix.py): a full id is
        parsed without a query; NotFound, or InvalidArgument if malformed or ambiguous."""
        from runnerq_cli.backend.domain.idprefix import resolve

        return resolve(self._ctx.activities, text)

    def ids_starting_with(self, digits: str, *, limit: int = 10) -> list[uuid.UUID]:
        """The ids that start with the hex `digits` (at most `limit`, in order): one range
        read on `_id` (idprefix.py), for a search box that lists the candidates."""
        from runnerq_cli.backend.domain.idprefix import matching_ids

        return matching_ids(self._ctx.activities, digits, limit=limit)

    def metrics_sample(self, *, window_seconds: float = 300.0) -> MetricsSample:
        """What one Prometheus scrape exposes for this queue (metrics.metrics_sample)."""
        from runnerq_cli.backend.views.metrics import MetricsOptions, metrics_sample

        options = MetricsOptions(window_seconds=window_seconds)
        return metrics_sample(self._ctx, self._control.paused(), options)
