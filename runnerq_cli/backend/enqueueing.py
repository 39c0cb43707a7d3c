"""Enqueueing (docs/design.md, "Enqueue" and "Idempotency"): what a producer asks for
(`ActivitySpec`), the new activity document, and idempotency keys.

A keyed enqueue takes the key first and inserts the activity second; a crash in
between leaves a key pointing at no activity, which the next enqueue with that key
takes over once ORPHAN_KEY_GRACE has passed.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from pymongo.errors import DuplicateKeyError

from runnerq_cli import values
from runnerq_cli.backend.context import Part
from runnerq_cli.backend.models import (
    EnqueueResult,
    OnDuplicate,
    Priority,
    Status,
    check_metadata_key,
)
from runnerq_cli.backend.servertime import When, write_time
from runnerq_cli.backend.writes import insert_stamped, stamped_inserts
from runnerq_cli.errors import DuplicateActivity, IdempotencyConflict, InvalidArgument

DEFAULT_MAX_RETRIES = 3
DEFAULT_TIMEOUT_SECONDS = 300
DEFAULT_RETRY_DELAY_SECONDS = 1
ACTIVITY_TYPE_MAX = 200
# A key whose activity is not (yet) visible is only taken over after this long:
# younger, its enqueue may still be inserting the activity.
ORPHAN_KEY_GRACE = timedelta(seconds=60)


@dataclass(frozen=True)
class ActivitySpec:
    """What a producer asks for; validated on construction."""

    activity_type: str
    payload: Mapping[str, Any] = field(default_factory=dict)
    priority: Priority | int | str = Priority.NORMAL
    delay_seconds: float | None = None
    scheduled_at: datetime | None = None
    max_retries: int = DEFAULT_MAX_RETRIES
    timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS
    retry_delay_seconds: int = DEFAULT_RETRY_DELAY_SECONDS
    metadata: Mapping[str, str] = field(default_factory=dict)
    idempotency_key: str | None = None
    on_duplicate: OnDuplicate | str = OnDuplicate.RETURN_EXISTING

    def __post_init__(self) -> None:
        object.__setattr__(self, "priority", Priority.parse(self.priority))
        object.__setattr__(self, "on_duplicate", OnDuplicate.parse(self.on_duplicate))
        if not isinstance(self.activity_type, str) or not self.activity_type.strip():
            raise InvalidArgument("activity type must be a non-empty string")
        if len(self.activity_type) > ACTIVITY_TYPE_MAX:
            raise InvalidArgument(f"activity type is longer than {ACTIVITY_TYPE_MAX} characters")
        if not isinstance(self.payload, Mapping):
            raise InvalidArgument("payload must be a JSON object")
        for name, low in (("max_retries", 0), ("timeout_seconds", 1), ("retry_delay_seconds", 0)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise InvalidArgument(f"{name} must be a whole number of at least {low}")
        if self.delay_seconds is not None and (
            not math.isfinite(self.delay_seconds) or self.delay_seconds < 0
        ):
            raise InvalidArgument("delay must not be negative")
        if self.delay_seconds is not None and self.scheduled_at is not None:
            raise InvalidArgument("give a delay or a time to run at, not both")
        if self.scheduled_at is not None and self.scheduled_at.tzinfo is None:
            raise InvalidArgument("scheduled_at must be timezone-aware")
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in self.metadata.items()):
            raise InvalidArgument("metadata must map strings to strings")
        for key in self.metadata:
            check_metadata_key(key)
        if self.idempotency_key is not None and (
            not isinstance(self.idempotency_key, str) or not self.idempotency_key
        ):
            raise InvalidArgument("idempotency key must be a non-empty string")
        values.activity_limits(self)  # storable payload, bounded numbers and times

    def due_at(self, now: datetime | Callable[[], datetime],
               at: When | None = None) -> When | None:
        """When a delayed activity becomes due, or None to run as soon as possible.

        A time to run at is compared with `now` (or a clock, asked only then); a delay
        counts from `at` (the time the write sets: the server's `$$NOW`), else `now`."""
        if self.scheduled_at is not None:
            current = now if isinstance(now, datetime) else now()
            return self.scheduled_at if self.scheduled_at > current else None
        if self.delay_seconds:
            start = at if at is not None else now if isinstance(now, datetime) else now()
            return start + timedelta(seconds=self.delay_seconds)
        return None



class Enqueuer(Part):
    """New activities on one queue: plain inserts in few commands, keyed ones through the
    idempotency collection."""

    def enqueue(self, activity_type: str | ActivitySpec, payload: Mapping[str, Any] | None = None,
                **options: Any) -> EnqueueResult:
        """Put one activity on the queue (see `ActivitySpec` for the options)."""
        spec = activity_type if isinstance(activity_type, ActivitySpec) else ActivitySpec(
            activity_type, payload if payload is not None else {}, **options)
        if spec.idempotency_key is None:
            return self._insert(spec, uuid.uuid4())
        return self._enqueue_idempotent(spec)

    def _insert(self, spec: ActivitySpec, activity_id: uuid.UUID) -> EnqueueResult:
        """One activity, `created_at` stamped by the server (writes.stamped_inserts)."""
        now = write_time(self._ctx.clock)
        doc = self.new_document(spec, activity_id, now)
        insert_stamped(self._ctx.activities, doc, "created_at", self._ctx.clock, now)
        return EnqueueResult(activity_id, True, doc["status"])

    def enqueue_many(self, specs: Sequence[ActivitySpec]) -> list[EnqueueResult | Exception]:
        """Enqueue many in few round trips; one entry per spec, an exception where it failed.

        Specs without an idempotency key go in few commands (writes.stamped_inserts);
        keyed ones take the idempotent path one by one (they need the key's answer).
        """
        out: list[EnqueueResult | Exception | None] = [None] * len(specs)
        now = write_time(self._ctx.clock)
        plain: list[tuple[int, dict[str, Any]]] = []
        for index, spec in enumerate(specs):
            if spec.idempotency_key is None:
                plain.append((index, self.new_document(spec, uuid.uuid4(), now)))
            else:
                try:
                    out[index] = self._enqueue_idempotent(spec)
                except (DuplicateActivity, IdempotencyConflict) as exc:
                    out[index] = exc
        if plain:
            docs = [doc for _, doc in plain]
            # Any length: stamped_inserts writes INSERT_CHUNK at a time, so a long list
            # never becomes one command a slow server times out on.
            failed: dict[int, Exception] = {
                position: InvalidArgument(error.get("errmsg", "rejected"))
                for position, error in stamped_inserts(self._ctx.activities, docs, "created_at",
                                                       self._ctx.clock, now).items()}
            for position, (index, doc) in enumerate(plain):
                out[index] = failed.get(position) or EnqueueResult(doc["_id"], True, doc["status"])
        return [r for r in out if r is not None]

    def new_document(self, spec: ActivitySpec, activity_id: uuid.UUID,
                     now: When) -> dict[str, Any]:
        """The activity document an enqueue inserts (dlq import inserts the same)."""
        # No event is stored: Enqueued/Scheduled are derived from created_at (derived.py),
        # which the insert stamps (writes.stamped_inserts): it is not in the document here.
        # A delay counts from the time the write sets: the server's $$NOW (servertime.py).
        due = spec.due_at(now if isinstance(now, datetime) else self._ctx.clock, now)
        status = Status.SCHEDULED if due else Status.PENDING
        doc: dict[str, Any] = {
            "_id": activity_id,
            "activity_type": spec.activity_type,
            "payload": dict(spec.payload),
            "priority": int(spec.priority),
            "status": status.value,
            "retry_count": 0,
            "max_retries": spec.max_retries,
            "timeout_seconds": spec.timeout_seconds,
            "retry_delay_seconds": spec.retry_delay_seconds,
            "metadata": dict(spec.metadata),
        }
        if due:
            doc["scheduled_at"] = due
        if spec.idempotency_key is not None:
            doc["idempotency_key"] = spec.idempotency_key
        return doc

    # ------------------------------------------------------------ idempotency

    def _key_id(self, activity_type: str, key: str) -> dict[str, str]:
        return {"activity_type": activity_type, "key": key}

    def check_idempotency(self, activity_type: str, key: str,
                          activity_id: uuid.UUID) -> tuple[bool, uuid.UUID]:
        """Atomically take `key` for `activity_id`: (True, activity_id) if taken,
        else (False, holder). Keys past the TTL count as free (the TTL monitor
        is late, never early, so the time is checked here).
        """
        key_id = self._key_id(activity_type, key)
        ttl = timedelta(seconds=self._ctx.settings.idempotency_ttl)
        for _ in range(10):
            now = self._ctx.clock()
            try:
                taken = self._ctx.idempotency.update_one(
                    {"_id": key_id},
                    {"$setOnInsert": {"activity_id": activity_id, "created_at": now, **key_id}},
                    upsert=True,
                )
            except DuplicateKeyError:  # two upserts raced on a real server: ask again
                continue
            if taken.upserted_id is not None:
                return True, activity_id
            held = self._ctx.idempotency.find_one({"_id": key_id})
            if held is None:  # expired and deleted in between
                continue
            if held["created_at"] + ttl <= now:
                if self._move_key(key_id, held, activity_id, now):
                    return True, activity_id
                continue
            return False, held["activity_id"]
        raise IdempotencyConflict(f"idempotency key {key!r} is contended; try again")

    def _move_key(self, key_id: dict[str, str], held: dict[str, Any], activity_id: uuid.UUID,
                  now: datetime) -> bool:
        """Compare-and-set the key's holder: exactly one of racing movers wins."""
        moved = self._ctx.idempotency.update_one(
            {"_id": key_id, "activity_id": held["activity_id"], "created_at": held["created_at"]},
            {"$set": {"activity_id": activity_id, "created_at": now}},
        )
        return moved.modified_count == 1

    def _enqueue_idempotent(self, spec: ActivitySpec) -> EnqueueResult:
        # Ordering: the key is taken first, the activity inserted second. A
        # crash in between leaves a key pointing at no activity; the next
        # enqueue with that key takes it over once ORPHAN_KEY_GRACE has passed.
        assert spec.idempotency_key is not None
        key_id = self._key_id(spec.activity_type, spec.idempotency_key)
        new_id = uuid.uuid4()
        for _ in range(10):
            taken, holder_id = self.check_idempotency(spec.activity_type, spec.idempotency_key,
                                                      new_id)
            if taken:
                return self._insert_keyed(spec, new_id)
            holder = self._ctx.activities.find_one({"_id": holder_id}, {"status": 1})
            held = self._ctx.idempotency.find_one({"_id": key_id})
            if held is None or held["activity_id"] != holder_id:
                continue  # the key moved meanwhile: look again
            now = self._ctx.clock()
            if holder is None and held["created_at"] + ORPHAN_KEY_GRACE <= now:
                if self._move_key(key_id, held, new_id, now):
                    return self._insert_keyed(spec, new_id)
                continue
            # (a holder without a text status, another program's malformed one: "?")
            status: str = Status.PENDING.value
            if holder is not None:
                status = holder["status"] if isinstance(holder.get("status"), str) else "?"
            behaviour = spec.on_duplicate
            if behaviour is OnDuplicate.RETURN_EXISTING:
                return EnqueueResult(holder_id, False, status)
            if behaviour is OnDuplicate.NO_REUSE:
                raise DuplicateActivity(
                    f"duplicate activity: idempotency key {spec.idempotency_key!r} is held by "
                    f"{holder_id}", existing_id=holder_id)
            if behaviour is OnDuplicate.ALLOW_REUSE_ON_FAILURE and status not in (
                Status.FAILED.value, Status.DEAD_LETTER.value
            ):
                raise IdempotencyConflict(
                    f"idempotency conflict: key {spec.idempotency_key!r} is held by {holder_id}, "
                    f"which is {status}, not failed", existing_id=holder_id)
            if self._move_key(key_id, held, new_id, now):
                return self._insert_keyed(spec, new_id)
        raise IdempotencyConflict(f"idempotency key {spec.idempotency_key!r} is contended; "
                                  "try again")

    def _insert_keyed(self, spec: ActivitySpec, activity_id: uuid.UUID) -> EnqueueResult:
        return self._insert(spec, activity_id)
