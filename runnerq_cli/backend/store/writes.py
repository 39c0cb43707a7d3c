"""Where stored events, Err results and dead-letter records are written: the outbox.

Events are *read* in events.py (stored and derived merged); they are *written*
here. Every state change of an activity is one atomic update of its own
document (the commit point). Whatever else that change must write (the
events a later write would otherwise overwrite, an Err result, a dead-letter
record; a success writes its result directly, see queue.ActivityQueue.ack_success)
is put into the same update as an `outbox` sub-document:

    outbox: {seq: int, since: date, events: [...], result: {...}, dead_letter: {...}}

and copied out afterwards by `OutboxWriter.flush`:

    1. insert the events (fixed `_id`s, so a replay inserts nothing twice),
    2. upsert the result and the dead-letter record (idempotent),
    3. unset the outbox, only if its `seq` and `since` are still the ones copied
       (`seq` restarts at 1 after a clear, so `since` tells a newer outbox with
       the same `seq` apart: a late flush of an old snapshot must not clear it).

Positions (docs/design.md, "Following events"): the times a tail reads by
are stamped by the server as it applies the write (`$currentDate`), never
by the client, so a stalled writer or a host whose clock is off cannot put
an event behind a tail's window. Events are therefore copied with guarded
upserts (stamps.py: `{_id, ingested_at: null}`, `$setOnInsert` and
`$currentDate: {ingested_at}`): a replay finds the event there, collides on
`_id` and changes nothing. Activities are inserted the same way
(`stamped_inserts`, `created_at` stamped by the server).

A crash between any two of these leaves the outbox in place; the chores'
`repair_outboxes` (queue/maintenance.py) flushes outboxes older than a grace period. So nothing is
lost and nothing is written twice, on any server, without a replica set.
Workers buffer flushes to batch them (fewer commands per activity); the
buffer only delays copies that are already safe in the activity document.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from contextlib import suppress
from datetime import datetime
from typing import Any

from bson import ObjectId
from pymongo import ReplaceOne, UpdateMany

from runnerq_cli.backend.domain.models import AWAITED
from runnerq_cli.backend.domain.waits import WAKE_UPDATE, waiting_on
from runnerq_cli.backend.store.driver import Collection
from runnerq_cli.backend.store.failures import refused
from runnerq_cli.backend.store.servertime import When
from runnerq_cli.backend.store.stamps import stamped_inserts
from runnerq_cli.errors import DuplicateKey


def new_event(activity_id: Any, activity_type: str | None, event_type: str, now: When,
              worker_id: str | None = None, **detail: Any) -> dict[str, Any]:
    """An event document, ready for the outbox (its `_id` is fixed here)."""
    return {
        "_id": ObjectId(),
        "activity_id": activity_id,
        "activity_type": activity_type,
        "timestamp": now,
        "event_type": event_type,
        "worker_id": worker_id,
        "detail": {k: v for k, v in detail.items() if v is not None},
    }


def outbox_update(now: When, events: Iterable[dict[str, Any]] = (),
                  result: dict[str, Any] | None = None,
                  dead_letter: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """Update operators that add to the outbox; merge them into a state update."""
    update: dict[str, dict[str, Any]] = {
        "$inc": {"outbox.seq": 1},
        "$min": {"outbox.since": now},
    }
    events = list(events)
    if events:
        update["$push"] = {"outbox.events": {"$each": events}}
    extra = {}
    if result is not None:
        extra["outbox.result"] = result
    if dead_letter is not None:
        extra["outbox.dead_letter"] = dead_letter
    if extra:
        update["$set"] = extra
    return update


def merge_updates(*updates: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    merged: dict[str, dict[str, Any]] = {}
    for update in updates:
        for op, fields in update.items():
            merged.setdefault(op, {}).update(fields)
    return merged


def _newer(box: dict[str, Any], held: dict[str, Any]) -> bool:
    """True when snapshot `box` should replace the buffered snapshot `held`."""
    if box.get("since") != held.get("since"):
        return True
    return bool(held.get("seq", 0) <= box.get("seq", 0))


class OutboxWriter:
    """Copies outboxes to their collections, at once or in buffered batches."""

    def __init__(self, activities: Collection, events: Collection, results: Collection,
                 dead_letter: Collection, clock: Callable[[], datetime]) -> None:
        self._activities = activities
        self._events = events
        self._results = results
        self._dead_letter = dead_letter
        self._clock = clock
        self._lock = threading.Lock()
        self._buffer: dict[Any, dict[str, Any]] = {}
        self.buffer_size = 0  # 0: flush each document as it is submitted

    def submit(self, doc: dict[str, Any] | None) -> None:
        """Flush `doc`'s outbox now, or buffer it when buffering is on."""
        if not doc or not doc.get("outbox"):
            return
        if self.buffer_size <= 0:
            self.flush([doc])
            return
        with self._lock:
            held = self._buffer.get(doc["_id"])
            # The later snapshot of one outbox holds every earlier event too; a
            # different `since` is a newer outbox (the held one was copied out).
            if held is None or _newer(doc["outbox"], held["outbox"]):
                self._buffer[doc["_id"]] = doc
            full = len(self._buffer) >= self.buffer_size
        if full:
            self.drain()

    def drain(self) -> int:
        """Flush everything buffered; returns how many documents were flushed."""
        with self._lock:
            docs = list(self._buffer.values())
            self._buffer.clear()
        if docs:
            try:
                self.flush(docs)
            except Exception:
                # Keep them for the next drain; the reaper repairs them otherwise.
                with self._lock:
                    for doc in docs:
                        self._buffer.setdefault(doc["_id"], doc)
                raise
        return len(docs)

    def flush(self, docs: list[dict[str, Any]], *, just_read: bool = False) -> None:
        """Copy the outboxes of `docs` out, then clear each one not changed meanwhile.

        Only outboxes that are still current are copied. One that changed since
        its snapshot was taken (an operator retried the activity, or another
        process added to it) is copied by whoever changed it, from the newer
        snapshot, which holds its events too; copying the stale one would
        bring back a result or dead-letter record the change had withdrawn.
        `just_read`: the caller read these snapshots from the database itself, the
        command before (a bulk batch's check of what it applied): reading them
        again would only narrow a window the copy leaves open anyway (the clear is
        fenced on the outbox's `seq` and `since`), at the cost of one more read of
        the whole batch.
        """
        if not just_read:
            docs = self._still_current(docs)
        if not docs:
            return
        now = self._clock()
        events: list[dict[str, Any]] = []
        results: list[ReplaceOne[dict[str, Any]]] = []
        dead_letters: list[ReplaceOne[dict[str, Any]]] = []
        clears: dict[tuple[Any, Any], list[Any]] = {}  # (outbox seq, since) -> activity ids
        for doc in docs:
            box = doc["outbox"]
            # (a malformed activity's type, not text, is left out: its events stay readable)
            kind = doc.get("activity_type") if isinstance(doc.get("activity_type"), str) else None
            for event in box.get("events", ()):
                # Every event in an outbox is about its own document: say so here,
                # which also covers events built before the claim knew the activity.
                # A step stored after the fact (derived.attempt_events) keeps its own time.
                events.append({**event, "activity_id": doc["_id"], "activity_type": kind})
            if box.get("result") is not None:
                result = {"_id": doc["_id"], "activity_id": doc["_id"], **box["result"]}
                # Never over a newer claim's result (a later attempt's success).
                newer = {"$gt": int(result.get("claim") or 0)}
                results.append(ReplaceOne({"_id": doc["_id"], "claim": {"$not": newer}}, result,
                                          upsert=True))
            if box.get("dead_letter") is not None:
                snapshot = {k: v for k, v in doc.items() if k != "outbox"}
                record = {"_id": doc["_id"], "activity": snapshot, **box["dead_letter"]}
                dead_letters.append(ReplaceOne({"_id": doc["_id"]}, record, upsert=True))
            clears.setdefault((box.get("seq"), box.get("since")), []).append(doc["_id"])
        # Order matters: copies first, the clear last (see the module docstring).
        if events:
            self._insert_events(events, now)
        if results:
            self._ignore_duplicates(self._results.bulk_write, results)
            # A published result wakes whatever waits on it (docs/design.md, "Waking"):
            # only for an activity something may wait on (a child, or `awaited`).
            awaited = [d["_id"] for d in docs if d["outbox"].get("result") is not None
                       and (d.get(AWAITED) or d.get("parent_activity_id") is not None)]
            if awaited:
                self._activities.update_many(waiting_on(awaited), WAKE_UPDATE)
        if dead_letters:
            self._dead_letter.bulk_write(dead_letters, ordered=False)
            self._withdraw_overtaken_records(
                [d for d in docs if d["outbox"].get("dead_letter") is not None])
        # Outboxes of a batch often share seq and since: one statement per pair.
        self._activities.bulk_write(
            [UpdateMany({"_id": {"$in": ids}, "outbox.seq": seq, "outbox.since": since},
                        {"$unset": {"outbox": ""}})
             for (seq, since), ids in clears.items()], ordered=False)

    def _withdraw_overtaken_records(self, docs: list[dict[str, Any]]) -> None:
        """Delete the dead-letter records just written whose outbox stopped being current
        meanwhile (an operator retried or deleted the activity between the check and the
        copy): the change that overtook this flush already removed or replaced its record."""
        current = {d["_id"] for d in self._still_current(docs)}
        for doc in docs:
            if doc["_id"] not in current:
                self._dead_letter.delete_one(
                    {"_id": doc["_id"], "failed_at": doc["outbox"]["dead_letter"]["failed_at"]})

    def _still_current(self, docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The documents whose outbox in the database is still the snapshot's."""
        stored = {
            doc["_id"]: doc.get("outbox") or {}
            for doc in self._activities.find({"_id": {"$in": [d["_id"] for d in docs]}},
                                             {"outbox.seq": 1, "outbox.since": 1})
        }
        return [doc for doc in docs if doc["_id"] in stored
                and stored[doc["_id"]].get("seq") == doc["outbox"].get("seq")
                and stored[doc["_id"]].get("since") == doc["outbox"].get("since")]

    def _insert_events(self, events: list[dict[str, Any]], now: datetime) -> None:
        """Insert with `ingested_at` stamped by the server (a materialized step keeps its
        own); events already copied by an earlier (interrupted) flush stay as they are."""
        errors = stamped_inserts(self._events, events, "ingested_at", self._clock, now)
        if errors:
            raise refused(list(errors.values()))

    @staticmethod
    def _ignore_duplicates(write: Callable[..., Any], operations: list[Any]) -> None:
        """Run an unordered bulk `write`; duplicate keys are copies already made (or, for
        a result, a newer claim's result that must stay): anything else is raised."""
        with suppress(DuplicateKey):  # each refusal a duplicate key (failures.refused)
            write(operations, ordered=False)
