"""A second implementation of parts of the data contract, written from docs/design.md
alone, in raw pymongo (nothing imported from runnerq_cli): what another program writing
to the same database would write.

- `Firer`: fires due schedules ("Schedules", "Firing: exactly one activity per fire, no
  leader"): the indexed query, the missed-fire and overlap policies, the idempotent
  enqueue of each fire, the compare-and-set, the set-aside of a malformed schedule.
- `enqueue`: a stamped insert ("Operations", "Time"), keyed ("Idempotency keys",
  `return-existing`), into the partition the contract chooses ("Partitions"), with a W3C
  trace context ("Trace context").
- `claim` / `ack_success`: a claimer of one partition ("Claims and acknowledgements
  target one partition"), obeying the pause ("Control").

tests/test_contract_second_impl.py races and interoperates these with the project's
code. Where the text left a choice open, the comment says which one was made (and the
finding it became, when the project's code chose otherwise).
"""

from __future__ import annotations

import hashlib
import math
import re
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from bson.objectid import ObjectId
from bson.son import SON
from cronsim import CronSim, CronSimError
from pymongo import ReturnDocument
from pymongo.collection import Collection
from pymongo.database import Database
from pymongo.errors import DuplicateKeyError

EVER = datetime(1, 1, 1, tzinfo=UTC)
ORPHAN_KEY_GRACE = 60.0
UNFINISHED = ("pending", "scheduled", "processing")
TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")
NAME = re.compile(r"[A-Za-z0-9_\-.:]{1,200}")
MAX_MISSED = 10_000
PAGE = 100


def coll(db: Database[Any], queue: str, name: str) -> Collection[Any]:
    return db[f"runnerq_{queue}_{name}"]


# --- time -----------------------------------------------------------------------------


class ServerClock:
    """The server's clock as this process knows it: `hello.localTime` at the midpoint of
    its round trip, carried forward by the monotonic clock ("Time: the server's clock")."""

    def __init__(self, db: Database[Any]) -> None:
        self._db = db
        self._base: tuple[float, datetime] | None = None

    def __call__(self) -> datetime:
        if self._base is None or time.monotonic() - self._base[0] > 60:
            before = time.monotonic()
            local = self._db.command("hello")["localTime"]
            after = time.monotonic()
            self._base = ((before + after) / 2, local.replace(tzinfo=UTC))
        mono, at = self._base
        now = at + timedelta(seconds=time.monotonic() - mono)
        return now.replace(microsecond=now.microsecond // 1000 * 1000)


def millis(seconds: float) -> int:
    """A delay in whole ms, rounded twice, halves to even ("Retry delay")."""
    return round(timedelta(seconds=seconds) / timedelta(milliseconds=1))


def utc_text(instant: datetime) -> str:
    """`YYYY-MM-DDTHH:MM:SS.mmmZ` ("Firing", step 2)."""
    t = instant.astimezone(UTC)
    return (f"{t.year:04d}-{t.month:02d}-{t.day:02d}T{t.hour:02d}:{t.minute:02d}:"
            f"{t.second:02d}.{t.microsecond // 1000:03d}Z")


def literal(value: Any) -> Any:
    """A value in an update pipeline: `{$literal: V}` for anything that could be read as
    an expression (here simply every document, list and `$` string)."""
    if isinstance(value, (dict, list)) or (isinstance(value, str) and value.startswith("$")):
        return {"$literal": value}
    return value


# --- partitions -----------------------------------------------------------------------


class MalformedCount(Exception):
    pass


def partition_count(db: Database[Any], queue: str) -> int:
    doc = coll(db, queue, "control").find_one({"_id": "partitions"})
    if doc is None:
        return 1
    count = doc.get("count")
    if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= 256:
        raise MalformedCount(f"partitions count is {count!r}")
    return int(count)


def partition_of_key(activity_type: str, key: str, count: int) -> int:
    digest = hashlib.sha256(activity_type.encode() + b"\x00" + key.encode()).digest()
    return int.from_bytes(digest[:8], "big") % count


@dataclass
class RoundRobin:
    next: int | None = None

    def take(self, count: int) -> int:
        import random

        if self.next is None:
            self.next = random.randrange(count)
        chosen = self.next % count
        self.next = chosen + 1
        return chosen


# --- trace context --------------------------------------------------------------------


def checked_trace_context(traceparent: str | None, tracestate: str | None) -> dict[str, str] | None:
    """The stored `trace_context`, or None: a bad traceparent drops the field, a bad
    tracestate only itself ("Trace context")."""
    if traceparent is None or len(traceparent) > 256:
        return None
    match = TRACEPARENT.fullmatch(traceparent)
    if match is None:  # Python's `.` is any character but "\n", as design.md says
        return None
    version, trace_id, parent_id, _flags, rest = match.groups()
    if version == "ff" or trace_id == "0" * 32 or parent_id == "0" * 16:
        return None
    if version == "00" and rest is not None:
        return None
    stored = {"traceparent": traceparent}
    if (tracestate is not None and 0 < len(tracestate) <= 512 and tracestate.strip(" ")
            and all(0x20 <= ord(c) <= 0x7E for c in tracestate)):
        stored["tracestate"] = tracestate
    return stored


# --- enqueue --------------------------------------------------------------------------


@dataclass(frozen=True)
class Enqueued:
    id: uuid.UUID
    created: bool
    status: str


@dataclass
class Enqueuer:
    db: Database[Any]
    queue: str
    now: Callable[[], datetime]
    idempotency_ttl: float = 86400.0
    rotation: RoundRobin = field(default_factory=RoundRobin)

    def enqueue(self, activity_type: str, payload: Mapping[str, Any] | None = None, *,
                priority: int = 2, metadata: Mapping[str, str] | None = None,
                max_retries: int = 3, timeout_seconds: int = 300,
                delay_seconds: float = 0.0, idempotency_key: str | None = None,
                trace_context: dict[str, str] | None = None) -> Enqueued:
        activity_id = uuid.uuid4()
        if idempotency_key is not None:
            held = self._take_key(activity_type, idempotency_key, activity_id)
            if held is not None:
                return held
        count = partition_count(self.db, self.queue)
        doc: dict[str, Any] = {
            "activity_type": activity_type, "payload": dict(payload or {}),
            "priority": priority, "status": "scheduled" if delay_seconds > 0 else "pending",
            "retry_count": 0, "max_retries": max_retries, "timeout_seconds": timeout_seconds,
            "retry_delay_seconds": 1, "metadata": dict(metadata or {})}
        if idempotency_key is not None:
            doc["idempotency_key"] = idempotency_key
        if trace_context is not None:
            doc["trace_context"] = trace_context
        query: dict[str, Any] = {"_id": activity_id}
        if count > 1:
            query["partition"] = (partition_of_key(activity_type, idempotency_key, count)
                                  if idempotency_key is not None
                                  else self.rotation.take(count))
        query["created_at"] = None
        activities = coll(self.db, self.queue, "activities")
        if delay_seconds > 0:
            stage = {key: literal(value) for key, value in doc.items()}
            stage["scheduled_at"] = {"$add": ["$$NOW", millis(delay_seconds)]}
            stage["created_at"] = "$$NOW"
            activities.update_one(query, [{"$set": stage}], upsert=True)
        else:
            activities.update_one(query, {"$setOnInsert": doc,
                                          "$currentDate": {"created_at": True}}, upsert=True)
        return Enqueued(activity_id, True, doc["status"])

    def _take_key(self, activity_type: str, key: str,
                  activity_id: uuid.UUID) -> Enqueued | None:
        """None: the key is ours now; else the holder (`return-existing`)."""
        keys = coll(self.db, self.queue, "idempotency")
        key_id = SON([("activity_type", activity_type), ("key", key)])
        activities = coll(self.db, self.queue, "activities")
        for _ in range(10):
            now = self.now()
            done = keys.update_one({"_id": key_id}, {"$setOnInsert": {
                "activity_id": activity_id, "created_at": now,
                "activity_type": activity_type, "key": key}}, upsert=True)
            if done.upserted_id is not None:
                return None
            held = keys.find_one({"_id": key_id})
            if held is None:
                continue
            holder = activities.find_one({"_id": held["activity_id"]}, {"status": 1})
            again = keys.find_one({"_id": key_id})
            if again is None or again["activity_id"] != held["activity_id"]:
                continue
            held_at = held["created_at"].replace(tzinfo=UTC)
            expired = held_at + timedelta(seconds=self.idempotency_ttl) <= now
            orphan = holder is None and held_at + timedelta(seconds=ORPHAN_KEY_GRACE) <= now
            if not expired and not orphan:
                status = "pending" if holder is None else holder["status"]
                return Enqueued(held["activity_id"], False, status)
            moved = keys.update_one(
                {"_id": key_id, "activity_id": held["activity_id"],
                 "created_at": held["created_at"]},
                {"$set": {"activity_id": activity_id, "created_at": now}})
            if moved.modified_count == 1:
                return None
        raise RuntimeError("idempotency key contended")


# --- claim and acknowledge one partition ----------------------------------------------


def paused(db: Database[Any], queue: str) -> tuple[bool, list[str]]:
    doc = coll(db, queue, "control").find_one({"_id": "pause"})
    if doc is None:
        return False, []
    return bool(doc.get("all")), list(doc.get("types") or [])


def claim(db: Database[Any], queue: str, partition: int, worker_id: str, *,
          types: Sequence[str] | None = None, lease_ms: int = 60_000) -> dict[str, Any] | None:
    """One claim of partition P, pause obeyed (a worker's own type list less the paused
    types; a claim of every type with types paused names the pending types)."""
    whole, paused_types = paused(db, queue)
    if whole:
        return None
    query: dict[str, Any] = {"status": "pending", "partition": partition}
    if types is not None:
        wanted = [t for t in types if t not in paused_types]
        if not wanted:
            return None
        query["activity_type"] = {"$in": wanted}
    elif paused_types:
        wanted = pending_types(db, queue, None, paused_types)  # queue-wide, as design.md
        if not wanted:
            return None
        query["activity_type"] = {"$in": wanted}
    return coll(db, queue, "activities").find_one_and_update(
        query,
        [{"$set": {"status": "processing", "worker_id": literal(worker_id),
                   "lease_id": uuid.uuid4().hex,
                   "lease_deadline": {"$add": ["$$NOW", lease_ms]},
                   "claims": {"$add": [{"$ifNull": ["$claims", 0]}, 1]},
                   "started_at": "$$NOW"}}],
        sort=[("priority", -1), ("created_at", 1)],
        return_document=ReturnDocument.AFTER)


def pending_types(db: Database[Any], queue: str, partition: int | None,
                  paused_types: Sequence[str]) -> list[str]:
    """The pending types not paused, one covered look at a time ("Claims around paused
    types"), queue-wide (`partition` None) in a partitioned queue too, as ours."""
    known: list[Any] = list(paused_types)
    found: list[str] = []
    for _ in range(1000):
        query: dict[str, Any] = {"status": "pending", "activity_type": {"$nin": known}}
        if partition is not None:
            query["partition"] = partition
        doc = coll(db, queue, "activities").find_one(
            query, {"activity_type": 1, "_id": 0}, sort=[("activity_type", 1)])
        if doc is None:
            break
        value = doc.get("activity_type")
        known.append(value)
        if isinstance(value, str):
            found.append(value)
    return found


def ack_success(db: Database[Any], queue: str, claimed: Mapping[str, Any],
                result: Any, worker_id: str) -> bool:
    """The result fenced on the claim number, then the activity fenced on the lease and
    the partition."""
    activity_id, lease = claimed["_id"], claimed["lease_id"]
    number = claimed["claims"]
    try:
        coll(db, queue, "results").update_one(
            {"_id": activity_id, "claim": {"$not": {"$gte": number}}},
            {"$set": {"activity_id": activity_id, "state": "Ok", "data": result,
                      "created_at": datetime.now(UTC), "claim": number, "lease_id": lease}},
            upsert=True)
    except DuplicateKeyError:
        return False
    fence: dict[str, Any] = {"_id": activity_id}
    if "partition" in claimed:
        fence["partition"] = claimed["partition"]
    fence.update(lease_id=lease, status="processing")
    done = coll(db, queue, "activities").update_one(fence, {
        "$set": {"status": "completed", "last_lease_id": lease, "last_worker_id": worker_id,
                 "last_outcome": "completed"},
        "$currentDate": {"completed_at": True},
        "$unset": {"worker_id": "", "lease_id": "", "lease_deadline": ""}})
    return done.modified_count == 1


def fail_for_good(db: Database[Any], queue: str, claimed: Mapping[str, Any], error: str,
                  worker_id: str, *, claim_number: Any = None) -> bool:
    """A non-retryable failure ("Failure"): one pipeline update fenced on the lease and
    the partition, its `Failed` event and Err result put in the outbox (a program
    written in a language whose integers are 64-bit stores the claim number as one:
    `claim_number`)."""
    lease = claimed["lease_id"]
    fence: dict[str, Any] = {"_id": claimed["_id"]}
    if "partition" in claimed:
        fence["partition"] = claimed["partition"]
    fence.update(lease_id=lease, status="processing")
    number = claimed["claims"] if claim_number is None else claim_number
    event = {"_id": ObjectId(), "activity_id": claimed["_id"],
             "activity_type": claimed["activity_type"], "event_type": "Failed",
             "timestamp": "$$NOW", "worker_id": literal(worker_id),
             "detail": {"error": literal(error), "attempt": claimed.get("retry_count", 0) + 1,
                        "started_at": "$started_at", "retryable": False}}
    done = coll(db, queue, "activities").update_one(fence, [{"$set": {
        "status": "failed", "completed_at": "$$NOW", "last_error": literal(error),
        "last_error_at": "$$NOW", "last_lease_id": lease, "last_worker_id": literal(worker_id),
        "last_outcome": "failed",
        "outbox.seq": {"$add": [{"$ifNull": ["$outbox.seq", 0]}, 1]},
        "outbox.since": {"$min": ["$outbox.since", "$$NOW"]},
        "outbox.events": {"$concatArrays": [{"$ifNull": ["$outbox.events", []]}, [event]]},
        "outbox.result": {"$mergeObjects": [{
            "state": "Err", "data": {"$literal": {"error": error, "type": "non_retryable"}},
            "created_at": "$$NOW", "claim": number}]}}},
        {"$unset": ["worker_id", "lease_id", "lease_deadline"]}])
    return done.modified_count == 1


# --- schedules ------------------------------------------------------------------------


class Malformed(Exception):
    pass


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value)


def _in(value: Any, low: float, high: float) -> bool:
    return _number(value) and low <= value <= high


def _aware(value: datetime | None) -> datetime | None:
    return None if value is None else value.replace(tzinfo=UTC)


@dataclass(frozen=True)
class Schedule:
    """The schedule document as the text says to read it (null as absent, defaults)."""

    name: str
    template: dict[str, Any]
    cron: str | None
    every_ms: int | None
    zone: ZoneInfo
    start_at: datetime | None
    end_at: datetime | None
    jitter: float
    missed: str
    max_catchup: int
    grace: float
    overlap: str
    created_at: datetime

    @classmethod
    def read(cls, doc: Mapping[str, Any]) -> Schedule:
        name = doc.get("_id")
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise Malformed("_id is not a schedule name")
        activity = doc.get("activity")
        if not isinstance(activity, dict):
            raise Malformed("activity is not a document")
        kind = activity.get("activity_type")
        if not isinstance(kind, str) or not 1 <= len(kind) <= 200 or not kind.strip():
            raise Malformed("activity.activity_type is missing or not a type")
        priority = activity.get("priority")
        if priority is not None and (not isinstance(priority, int) or isinstance(priority, bool)
                                     or not 1 <= priority <= 4):
            raise Malformed("activity.priority is out of range")
        for key, low in (("max_retries", 0), ("timeout_seconds", 1)):
            value = activity.get(key)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                                      or value < low):
                raise Malformed(f"activity.{key} is out of range")
        delay = activity.get("delay_seconds")
        if delay is not None and not (_number(delay) and delay >= 0):
            raise Malformed("activity.delay_seconds is out of range")
        for key in ("payload", "metadata"):
            if activity.get(key) is not None and not isinstance(activity[key], dict):
                raise Malformed(f"activity.{key} is not a document")
        for key, value in (activity.get("metadata") or {}).items():
            if (not 1 <= len(key) <= 100 or "." in key or key.startswith("$")
                    or not isinstance(value, str) or len(value.encode()) > 4096):
                raise Malformed(f"activity.metadata.{key} is not a metadata entry")
        cron, every = doc.get("cron"), doc.get("every_seconds")
        if (cron is None) == (every is None):
            raise Malformed("exactly one of cron and every_seconds")
        zone_name = "UTC" if doc.get("timezone") is None else doc["timezone"]
        if not isinstance(zone_name, str) or zone_name.startswith("/") or len(zone_name) > 100:
            raise Malformed("timezone")
        try:
            zone = ZoneInfo(zone_name)
        except Exception as exc:
            raise Malformed("timezone is no IANA zone") from exc
        every_ms = None
        if cron is not None:
            if not isinstance(cron, str) or len(cron) > 200:
                raise Malformed("cron is not text")
            cron = " ".join(cron.split())
            if cron.startswith("@"):  # names in any case, as Debian cron reads them
                names = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *",
                         "@monthly": "0 0 1 * *", "@weekly": "0 0 * * 0",
                         "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
                         "@hourly": "0 * * * *"}
                if cron.lower() not in names:
                    raise Malformed(f"cron {cron} is no name")
                cron = names[cron.lower()]
            try:
                CronSim(cron, datetime(2000, 1, 1, tzinfo=zone))
            except CronSimError as exc:
                raise Malformed(f"cron does not parse: {exc}") from exc
        else:
            if not _number(every) or every < 0.001:
                raise Malformed("every_seconds is out of range")
            every_ms = max(1, round(every * 1000))
        dates = {}
        for key in ("start_at", "end_at", "created_at", "updated_at", "next_fire_at"):
            value = doc.get(key)
            if value is not None and not isinstance(value, datetime):
                raise Malformed(f"{key} is not a date")
            dates[key] = _aware(value)
        if dates["created_at"] is None:
            raise Malformed("created_at is missing")
        if dates["start_at"] and dates["end_at"] and not dates["start_at"] < dates["end_at"]:
            raise Malformed("start_at is not before end_at")
        values: dict[str, Any] = {}
        for key, default, low, high in (("jitter_seconds", 0, 0, 31_622_400),
                                        ("grace_seconds", 60, 1, 31_622_400)):
            value = doc.get(key)
            value = default if value is None else value
            if not _in(value, low, high):
                raise Malformed(f"{key} is out of range")
            values[key] = value
        catchup = doc.get("max_catchup")
        catchup = 10 if catchup is None else catchup
        if not isinstance(catchup, int) or isinstance(catchup, bool) or not 1 <= catchup <= 1000:
            raise Malformed("max_catchup is out of range")
        missed = "skip" if doc.get("missed") is None else doc["missed"]
        overlap = "allow" if doc.get("overlap") is None else doc["overlap"]
        if missed not in ("skip", "latest", "all") or overlap not in ("allow", "skip",
                                                                       "buffer_one"):
            raise Malformed("a policy is none of its names")
        if type(doc.get("paused")) is not bool:
            raise Malformed("paused is not a boolean")
        for key in ("revision", "fires", "missed_fires", "skipped_fires"):
            value = doc.get(key)
            if (value is not None or key == "revision") and (
                    not isinstance(value, int) or isinstance(value, bool)):
                raise Malformed(f"{key} is not an int")
        last = doc.get("last_fire")
        if last is not None and not (isinstance(last, dict)
                                     and isinstance(last.get("at"), datetime)):
            raise Malformed("last_fire")
        held = doc.get("buffered")
        if held is not None and not (isinstance(held, dict)
                                     and isinstance(held.get("at"), datetime)):
            raise Malformed("buffered")
        return cls(name, activity, cron, every_ms, zone, dates["start_at"], dates["end_at"],
                   float(values["jitter_seconds"]), missed, catchup,
                   float(values["grace_seconds"]), overlap, dates["created_at"])

    # The instants.

    def after(self, moment: datetime) -> datetime | None:
        """The first instant strictly after `moment` (None: none left)."""
        if self.every_ms is not None:
            anchor = self.start_at or self.created_at
            step = timedelta(milliseconds=self.every_ms)
            past = 0 if moment < anchor else (moment - anchor) // step + 1
            found = anchor + past * step
        else:
            assert self.cron is not None
            start = moment.astimezone(self.zone)
            if self.start_at is not None and self.start_at > moment:
                start = (self.start_at - timedelta(microseconds=1)).astimezone(self.zone)
            try:
                found = next(iter(CronSim(self.cron, start))).astimezone(UTC)
            except (StopIteration, CronSimError):
                return None
            if found - moment > timedelta(days=401 * 366):
                return None
        if self.end_at is not None and found > self.end_at:
            return None
        return found

    def due_instants(self, first: datetime, now: datetime) -> tuple[list[datetime], int]:
        """The instants from `first` up to `now`, both included: the newest ones kept
        (enough for any policy) and how many there were in all."""
        keep = max(self.max_catchup, 1) + 1
        found: list[datetime] = []
        count = 0
        # The timeline's instants from `first` on (design.md: `first` itself only when
        # the timeline has none up to now, a `next_fire_at` another writer put off it).
        moment: datetime | None = self.after(first - timedelta(milliseconds=1))
        if moment is None or moment > now:
            return [first], 1
        while moment is not None and moment <= now and count <= 100_000:
            found.append(moment)
            count += 1
            if len(found) > keep:
                found.pop(0)
            moment = self.after(moment)
        return found, count


def jitter_of(name: str, instant: datetime, jitter_seconds: float) -> float:
    digest = hashlib.sha256((name + "\x00" + utc_text(instant)).encode()).digest()
    return round(int.from_bytes(digest[:6], "big") / 2**48 * jitter_seconds, 3)


@dataclass
class Firer:
    """Fires the due schedules of one queue, as design.md's firing protocol says."""

    db: Database[Any]
    queue: str
    now: Callable[[], datetime]
    enqueuer: Enqueuer = field(init=False)
    # Test hooks: called between the steps, to crash or race a firer on purpose.
    after_enqueue: Callable[[str], None] | None = None

    def __post_init__(self) -> None:
        self.enqueuer = Enqueuer(self.db, self.queue, self.now)

    @property
    def schedules(self) -> Collection[Any]:
        return coll(self.db, self.queue, "schedules")

    def fire_due(self) -> dict[str, int]:
        counts = {"fired": 0, "missed": 0, "skipped": 0, "buffered": 0, "malformed": 0,
                  "lost": 0}
        now = self.now()
        seen: list[Any] = []
        for _ in range(10):
            query: dict[str, Any] = {"$or": [
                {"next_fire_at": {"$gte": EVER, "$lte": now}, "paused": False},
                {"buffered.at": {"$gte": EVER}, "paused": False}]}
            if seen:
                query["_id"] = {"$nin": seen}
            page = list(self.schedules.find(query).sort("next_fire_at", 1).limit(PAGE))
            for doc in page:
                seen.append(doc["_id"])
                self._fire_one(doc, now, counts)
            if len(page) < PAGE:
                break
        return counts

    def _fire_one(self, doc: dict[str, Any], now: datetime, counts: dict[str, int]) -> None:
        first = _aware(doc.get("next_fire_at")) if isinstance(doc.get("next_fire_at"),
                                                              datetime) else None
        fence = {"_id": doc["_id"], "next_fire_at": doc.get("next_fire_at"),
                 "revision": doc.get("revision"), "buffered": doc.get("buffered")}
        try:
            schedule = Schedule.read(doc)
        except Malformed as exc:
            done = self.schedules.update_one(fence, {
                "$set": {"problem": str(exc)},
                "$unset": {"next_fire_at": "", "buffered": ""}})
            counts["malformed"] += done.modified_count
            return
        grace = timedelta(seconds=schedule.grace)

        def kind_of(instant: datetime) -> str:
            return "on_time" if now - instant <= grace else "catchup"

        # The missed-fire policy over the instants from T to now, when T is due.
        chosen: list[datetime] = []
        missed = 0
        next_at = first
        if first is not None and first <= now:
            instants, total = schedule.due_instants(first, now)
            newest = instants[-1]
            if schedule.missed == "skip":
                chosen = [newest] if kind_of(newest) == "on_time" else []
            elif schedule.missed == "latest":
                chosen = [newest]
            else:
                chosen = instants[-schedule.max_catchup:]
            missed = min(total - len(chosen), MAX_MISSED)
            next_at = schedule.after(now)
        # The overlap policy.
        last = doc.get("last_fire") if isinstance(doc.get("last_fire"), dict) else None
        previous = last.get("activity_id") if last else None
        held = doc.get("buffered")
        buffered_after: dict[str, Any] | None = held
        fire: list[tuple[datetime, str]] = []
        skipped: list[datetime] = []
        if schedule.overlap != "allow":
            unfinished = self._unfinished(previous)
            if schedule.overlap == "skip":
                if unfinished:
                    skipped, chosen = chosen, []
                fire = [(i, kind_of(i)) for i in chosen]
            else:
                if held is not None and not unfinished:
                    at = _aware(held["at"])
                    assert at is not None
                    fire.append((at, held.get("kind") if held.get("kind") in (
                        "on_time", "catchup") else "on_time"))
                    buffered_after = None
                    unfinished = True
                if chosen:
                    if unfinished:
                        if buffered_after is None:
                            buffered_after = {"at": chosen[0], "kind": kind_of(chosen[0])}
                            skipped = chosen[1:]
                        else:
                            skipped = chosen
                    else:
                        fire.append((chosen[0], kind_of(chosen[0])))
                        if len(chosen) > 1:
                            buffered_after = {"at": chosen[1], "kind": kind_of(chosen[1])}
                        skipped = chosen[2:]
        else:
            fire = [(i, kind_of(i)) for i in chosen]
        if not fire and (first is None or first > now):
            return  # found for a buffered fire whose previous activity runs: no write
        # Enqueue, each fire with its key.
        ids: list[Any] = []
        answered_existing: list[Any] = []
        template = schedule.template
        for instant, kind in fire:
            metadata = {**(template.get("metadata") or {}), "runnerq_schedule": schedule.name,
                        "runnerq_fire_at": utc_text(instant), "runnerq_fire": kind}
            delay = float(template.get("delay_seconds") or 0) + jitter_of(
                schedule.name, instant, schedule.jitter)
            answer = self.enqueuer.enqueue(
                template["activity_type"], template.get("payload") or {},
                priority=template.get("priority") or 2, metadata=metadata,
                max_retries=3 if template.get("max_retries") is None
                else template["max_retries"],
                timeout_seconds=template.get("timeout_seconds") or 300,
                delay_seconds=delay,
                idempotency_key=f"schedule:{schedule.name}:{utc_text(instant)}")
            ids.append(answer.id)
            if not answer.created:
                answered_existing.append(answer.id)
        if self.after_enqueue is not None:
            self.after_enqueue(schedule.name)
        if answered_existing:
            there = {d["_id"] for d in coll(self.db, self.queue, "activities").find(
                {"_id": {"$in": answered_existing}}, {"_id": 1})}
            if len(there) < len(answered_existing):
                return  # a key without its activity yet: the fire stays due
        # Compare-and-set.
        update: dict[str, Any] = {"$set": {"next_fire_at": next_at},
                                  "$inc": {"fires": len(fire), "missed_fires": missed,
                                           "skipped_fires": len(skipped)}}
        if fire:
            newest_at, newest_kind = max(fire)
            update["$set"]["last_fire"] = {
                "at": newest_at, "fired_at": now, "kind": newest_kind,
                "activity_id": ids[fire.index((newest_at, newest_kind))],
                "activity_type": template["activity_type"], "count": len(fire)}
        elif skipped:
            update["$set"]["last_fire"] = {
                "at": max(skipped), "fired_at": now, "kind": "skipped",
                "activity_id": previous, "activity_type": template["activity_type"],
                "count": 0}
        if buffered_after is None:
            update["$unset"] = {"buffered": ""}
        else:
            update["$set"]["buffered"] = buffered_after
        done = self.schedules.update_one(fence, update)
        if done.modified_count == 1:
            counts["fired"] += len(fire)
            counts["missed"] += missed
            counts["skipped"] += len(skipped)
            counts["buffered"] += int(buffered_after is not None and buffered_after != held)
        else:
            counts["lost"] += 1

    def _unfinished(self, activity_id: Any) -> bool:
        if activity_id is None:
            return False
        doc = coll(self.db, self.queue, "activities").find_one({"_id": activity_id},
                                                                {"status": 1})
        return doc is not None and doc.get("status") in UNFINISHED


def insert_schedule(db: Database[Any], queue: str, name: str, activity_type: str, *,
                    now: datetime, cron: str | None = None,
                    every_seconds: float | None = None, **fields: Any) -> dict[str, Any]:
    """A schedule document as another program would add one (every field of the table,
    the ones not in use null), its first instant strictly after `now`."""
    doc: dict[str, Any] = {
        "_id": name, "activity": {"activity_type": activity_type},
        "cron": cron, "every_seconds": every_seconds, "timezone": "UTC",
        "start_at": None, "end_at": None, "jitter_seconds": 0, "missed": "skip",
        "max_catchup": 10, "grace_seconds": 60, "overlap": "allow", "paused": False,
        "pause_reason": None, "created_at": now, "updated_at": now, "revision": 1,
        "fires": 0, "missed_fires": 0, "skipped_fires": 0}
    doc.update(fields)
    doc["next_fire_at"] = Schedule.read(doc).after(now)
    coll(db, queue, "schedules").insert_one(doc)
    return doc
