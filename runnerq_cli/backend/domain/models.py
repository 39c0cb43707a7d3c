"""Typed views of the documents of docs/design.md, and the enums of its vocabulary."""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum, IntEnum, StrEnum
from typing import Any, ClassVar

from runnerq_cli.backend.domain.sizes import ACTIVITY_TYPE_MAX, METADATA_KEY_MAX
from runnerq_cli.errors import InvalidArgument, RunnerQError
from runnerq_cli.plural import counted


class MalformedDocument(RunnerQError, ValueError):
    """A stored document lacks a field its reader needs, or has it with the wrong type
    (another program's, or a hand edit). Lists skip such documents (shapes.py); a read
    of that one document fails with this."""

    @property
    def problem(self) -> str:
        """What is wrong, without the document's name: `priority is missing`."""
        return str(self).split(": ", 1)[-1]


_NONE = type(None)


def check_fields(doc: dict[str, Any], types: dict[str, tuple[type, ...]], what: str,
                 required: tuple[str, ...] = (), items: dict[str, type] | None = None,
                 lengths: dict[str, tuple[int, int]] | None = None) -> None:
    """Raise MalformedDocument unless each of `required` is present and every field of
    `types` that is present has one of its types (a bool is not a number, a float is
    finite: NaN and the infinities are not); a list named in `items` must hold only
    that type; a string named in `lengths` must have that many characters (code points).

    The problem is said in a form any language can produce (docs/design.md, "Malformed
    documents"): the value as JSON would write it (`"300"`, `true`, `NaN`) or, for a
    document, an array or another BSON type, its kind; the types wanted in words."""
    for name in required:
        if name not in doc:
            raise MalformedDocument(f"{what} {_named(doc.get('_id'))}: {name} is missing")
    for name, kinds in types.items():
        if name in doc:
            value = doc[name]
            if type(value) in kinds:  # the common case, fast (a worker reads every claim)
                if type(value) is not float or math.isfinite(value):
                    continue
                # NaN or an infinity: no count of seconds, yet every comparison a worker
                # makes with it passes or fails silently (a timeout that never expires)
                raise MalformedDocument(f"{what} {_named(doc.get('_id'))}: {name} is "
                                        f"{neutral(value)}, not a finite number")
            if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
                raise MalformedDocument(f"{what} {_named(doc.get('_id'))}: {name} is "
                                        f"{neutral(value)}, not {wanted(kinds)}")
    for name, kind in (items or {}).items():
        value = doc.get(name)
        if isinstance(value, list) and not all(isinstance(v, kind) for v in value):
            raise MalformedDocument(f"{what} {_named(doc.get('_id'))}: {name} holds "
                                    f"something other than {wanted((kind,))}")
    for name, (low, high) in (lengths or {}).items():
        value = doc.get(name)
        if isinstance(value, str) and not low <= len(value) <= high:
            raise MalformedDocument(f"{what} {_named(doc.get('_id'))}: {name} is "
                                    f"{neutral(value)}, not "
                                    f"{counted(high, 'character', number=f'{low}-{high}')}")


# The types a contract field may have, in words (docs/design.md, "Malformed documents").
_KIND_WORDS: dict[type, str] = {
    int: "an integer", float: "a double", str: "a string", datetime: "a date",
    dict: "a document", list: "an array", bool: "a boolean", _NONE: "null"}
TEXT_SHOWN = 50  # characters of a string value shown in a problem


def wanted(kinds: Iterable[type]) -> str:
    """`an integer`, `a number` (an integer or a double), `a date or null`."""
    words = [_KIND_WORDS.get(kind, kind.__name__) for kind in kinds]
    if "an integer" in words and "a double" in words:
        words[words.index("an integer")] = "a number"
        words.remove("a double")
    return " or ".join(words)


def neutral(value: Any) -> str:
    """A stored value as a problem names it, in a form another language produces too:
    a string as a JSON string (its first TEXT_SHOWN characters, then `...` after the
    closing quote when cut), `true`/`false`/`null`, an integer in decimal, a double as
    `NaN`, `Infinity`, `-Infinity`, or its shortest round-trip decimal with `.0` when
    it is whole (`2.0`, `3.5`); any other value by its kind (`a document`, `an array`,
    `a date`, `a UUID`, `binary`, `an ObjectId`, else `a <BSON type>`)."""
    import json

    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, str):
        cut = value[:TEXT_SHOWN]
        return json.dumps(cut, ensure_ascii=False) + ("..." if len(value) > TEXT_SHOWN else "")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return repr(value)
    if isinstance(value, dict):
        return "a document"
    if isinstance(value, list | tuple):
        return "an array"
    if isinstance(value, datetime):
        return "a date"
    if isinstance(value, uuid.UUID):
        return "a UUID"
    if isinstance(value, bytes):
        return "binary"
    name = type(value).__name__
    return {"ObjectId": "an ObjectId", "Decimal128": "a decimal", "Int64": str(value),
            "Binary": "binary", "Timestamp": "a timestamp", "Regex": "a regular expression",
            "Code": "code", "MinKey": "a MinKey", "MaxKey": "a MaxKey"}.get(name, f"a {name}")


def _named(doc_id: Any) -> str:
    """A document's id as people write it: a UUID as text, anything else as stored."""
    return str(doc_id) if isinstance(doc_id, uuid.UUID) else _short(doc_id)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class Priority(IntEnum):
    LOW = 1
    NORMAL = 2
    HIGH = 3
    CRITICAL = 4

    @classmethod
    def parse(cls, value: str | int) -> Priority:
        """`low|normal|high|critical` (any case) or 1-4."""
        text = str(value).strip()
        if text in ("1", "2", "3", "4"):  # not isdigit(): '²' is a digit int() refuses
            return cls(int(text))
        try:
            return cls[text.upper()]
        except KeyError:
            raise InvalidArgument(
                f"unknown priority {value!r}: use low, normal, high, critical or 1-4"
            ) from None

    @classmethod
    def label(cls, value: Any) -> str:
        """The name users see (`high`), or an integer of no name as text (`7`). A stored
        value that is no integer (another program's text "high", a missing one) is
        `malformed`: counted under the name it imitates, it would pass for real work."""
        if not isinstance(value, int) or isinstance(value, bool):
            return "malformed"
        try:
            return cls(value).name.lower()
        except ValueError:
            return str(value)


class Status(StrEnum):
    PENDING = "pending"
    SCHEDULED = "scheduled"
    PROCESSING = "processing"
    WAITING = "waiting"  # a parked durable activity (docs/design.md, "Parking")
    COMPLETED = "completed"
    FAILED = "failed"
    DEAD_LETTER = "dead_letter"
    CANCELLED = "cancelled"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL_STATUSES

    @classmethod
    def parse(cls, value: str) -> Status:
        """Accepts the stored names, `dead-letter`, and `running` for processing."""
        text = value.strip().lower().replace("-", "_")
        if text == "running":
            return cls.PROCESSING
        try:
            return cls(text)
        except ValueError:
            names = ", ".join(s.value.replace("_", "-") for s in cls)
            raise InvalidArgument(f"unknown status {value!r}: use one of {names}") from None


# The statuses by what they mean, each set defined once, in the order of `Status` (typed:
# mypy reads them from modules in an import cycle with this one).
Statuses = tuple[Status, ...]
# Not started: operators may move them.
WAITING_STATUSES: Statuses = (Status.PENDING, Status.SCHEDULED)
# Work to do; never ages out (a parked durable activity too)
LIVE_STATUSES: Statuses = (*WAITING_STATUSES, Status.PROCESSING, Status.WAITING)
# Ended without success: retention's "failed" kind, what `retry` restarts.
UNSUCCESSFUL_STATUSES: Statuses = (Status.FAILED, Status.DEAD_LETTER, Status.CANCELLED)
TERMINAL_STATUSES: Statuses = (Status.COMPLETED, *UNSUCCESSFUL_STATUSES)


class OnDuplicate(StrEnum):
    """What `enqueue` does when the idempotency key is already held (docs/design.md,
    "Idempotency keys")."""

    ALLOW_REUSE = "allow-reuse"
    RETURN_EXISTING = "return-existing"
    ALLOW_REUSE_ON_FAILURE = "allow-reuse-on-failure"
    NO_REUSE = "no-reuse"

    @classmethod
    def parse(cls, value: str | OnDuplicate) -> OnDuplicate:
        if isinstance(value, OnDuplicate):
            return value
        if not isinstance(value, str):
            raise InvalidArgument(f"unknown on_duplicate {str(value)[:40]!r}: expected text",
                                  "on_duplicate")
        text = value.strip().lower().replace("_", "-")
        aliases = {"allowreuse": "allow-reuse", "returnexisting": "return-existing",
                   "allowreuseonfailure": "allow-reuse-on-failure", "noreuse": "no-reuse"}
        text = aliases.get(text.replace("-", ""), text)
        try:
            return cls(text)
        except ValueError:
            names = ", ".join(m.value for m in cls)
            raise InvalidArgument(f"unknown on_duplicate {value!r}: use one of {names}",
                                  "on_duplicate") from None


class AckOutcome(StrEnum):
    """What acknowledging an attempt did to the activity."""

    COMPLETED = "completed"
    RETRYING = "retrying"
    FAILED = "failed"
    DEAD_LETTERED = "dead_lettered"


class EventType(StrEnum):
    ENQUEUED = "Enqueued"
    SCHEDULED = "Scheduled"
    DEQUEUED = "Dequeued"
    STARTED = "Started"
    COMPLETED = "Completed"
    FAILED = "Failed"
    RETRYING = "Retrying"
    DEAD_LETTER = "DeadLetter"
    REQUEUED = "Requeued"
    LEASE_EXTENDED = "LeaseExtended"
    RESULT_STORED = "ResultStored"
    CANCELLED = "Cancelled"
    RETRIED = "Retried"
    REDRIVEN = "Redriven"
    RUN_NOW = "RunNow"
    RESCHEDULED = "Rescheduled"
    PRIORITY_CHANGED = "PriorityChanged"
    PROGRESS = "Progress"  # a running handler's progress (docs/design.md, "Progress")
    # Durable activities (docs/design.md, "Events of durable activities")
    YIELDED = "Yielded"
    SIGNALED = "Signaled"
    SPAWN_LINKED = "SpawnLinked"
    # Queue-level records (activity_id null): the audit trail (audit.py), pause and resume.
    OPERATOR_ACTION = "OperatorAction"
    PAUSED = "Paused"
    RESUMED = "Resumed"


# Fields of a `dlq export` line that say where it came from; `enqueue --from` ignores them
# (they are not typos) and `dlq import` reads only `original_id` of them.
EXPORT_INFO_FIELDS = ("original_id", "queue", "status", "error", "attempts", "retry_count",
                      "created_at", "dead_lettered_at", "last_error_at",
                      "original_idempotency_key")


# Metadata a fired activity carries (design.md, "What a fired activity carries"), and the
# names its enqueue step shows them under (derived.derive: `events`, `show`, the tail).
META_SCHEDULE, META_FIRE_AT, META_FIRE = "runnerq_schedule", "runnerq_fire_at", "runnerq_fire"
FIRE_DETAIL = {META_SCHEDULE: "schedule", META_FIRE: "fire", META_FIRE_AT: "fire_at"}


def fired_by(metadata: Any) -> dict[str, str]:
    """The schedule fire an activity's metadata names, as its enqueue step's detail
    (`schedule`, `fire`, `fire_at`): {} for an activity no schedule fired. Only text is
    taken (another program's metadata may hold anything under these keys)."""
    if not isinstance(metadata, dict) or not isinstance(metadata.get(META_SCHEDULE), str):
        return {}
    return {shown: metadata[key] for key, shown in FIRE_DETAIL.items()
            if isinstance(metadata.get(key), str)}


def check_metadata_key(key: str) -> str:
    """A metadata key that can be stored and filtered on as `metadata.KEY`.

    No leading `$` and no `.`: either would turn a tag into a query operator
    or a nested path when an operator filters on it.
    """
    from runnerq_cli.values import shown

    if not isinstance(key, str) or not key or len(key) > METADATA_KEY_MAX \
            or key.startswith("$") or "." in key or "\x00" in key or not _utf8(key):
        raise InvalidArgument(f"invalid metadata key {shown(key)}: 1-{METADATA_KEY_MAX} "
                              "characters of UTF-8, no '.', not starting with '$'")
    return key


def _utf8(text: str) -> bool:
    """False for text with an unpaired surrogate (from a JSON escape): BSON cannot store it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def parse_metadata_pairs(items: Iterable[str], option: str = "metadata") -> dict[str, str]:
    """`KEY=VALUE` strings (a repeatable option) into a dict; a later key wins."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise InvalidArgument(f"{option}: expected KEY=VALUE, got {item!r}")
        out[check_metadata_key(key.strip())] = value
    return out


def parse_activity_id(value: str | uuid.UUID) -> uuid.UUID:
    """A UUID from its text form; InvalidArgument otherwise."""
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value).strip())
    except ValueError:
        raise InvalidArgument(f"invalid activity id {value!r}: expected a UUID") from None


def display_status(status: str, retry_count: int = 0) -> str:
    """Canonical reporting name: processing is *running*; a scheduled retry is *retrying*."""
    if status == Status.PROCESSING.value:
        return "running"
    if status == Status.SCHEDULED.value and retry_count > 0:
        return "retrying"
    return status


@dataclass(frozen=True)
class Activity:
    """An activity document. Unknown fields written by other programs are kept in `extra`."""

    id: uuid.UUID
    activity_type: str
    payload: dict[str, Any]
    priority: int
    status: str
    created_at: datetime
    retry_count: int = 0
    max_retries: int = 3
    timeout_seconds: int = 300
    retry_delay_seconds: int = 1
    metadata: dict[str, str] = field(default_factory=dict)
    scheduled_at: datetime | None = None
    started_at: datetime | None = None
    completed_at: datetime | None = None
    worker_id: str | None = None
    lease_id: str | None = None
    lease_deadline: datetime | None = None
    last_error: str | None = None
    last_error_at: datetime | None = None
    idempotency_key: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    _FIELDS = (
        "activity_type", "payload", "priority", "status", "created_at", "retry_count",
        "max_retries", "timeout_seconds", "retry_delay_seconds", "metadata", "scheduled_at",
        "started_at", "completed_at", "worker_id", "lease_id", "lease_deadline", "last_error",
        "last_error_at", "idempotency_key",
    )

    # The fields a reader relies on, by type (MalformedDocument otherwise): the contract's
    # "Required fields and defaults" (docs/design.md). Absent ones take the defaults above.
    _TYPES: ClassVar[dict[str, tuple[type, ...]]] = {
        "activity_type": (str,), "priority": (int,), "status": (str,),
        "created_at": (datetime,), "payload": (dict, _NONE), "retry_count": (int,),
        "max_retries": (int,),
        "timeout_seconds": (int, float), "retry_delay_seconds": (int, float),
        "metadata": (dict, _NONE), "scheduled_at": (datetime, _NONE),
        "started_at": (datetime, _NONE), "completed_at": (datetime, _NONE),
        "lease_deadline": (datetime, _NONE), "last_error_at": (datetime, _NONE),
        "worker_id": (str, _NONE), "lease_id": (str, _NONE), "last_error": (str, _NONE),
        "claims": (int,), "partition": (int,),
    }
    # Text fields whose length is part of the shape (an empty type names no handler).
    _LENGTHS: ClassVar[dict[str, tuple[int, int]]] = {"activity_type": (1, ACTIVITY_TYPE_MAX)}
    _REQUIRED: ClassVar[tuple[str, ...]] = (
        "_id", "activity_type", "priority", "status", "created_at")

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> Activity:
        """The activity of a stored document; MalformedDocument if its fields are not
        what the contract says (docs/design.md)."""
        check_fields(doc, cls._TYPES, "activity", cls._REQUIRED, lengths=cls._LENGTHS)
        known = {name: doc[name] for name in cls._FIELDS if name in doc}
        for name in ("payload", "metadata"):  # absent or null: empty
            if known.get(name) is None:
                known[name] = {}
        extra = {k: v for k, v in doc.items() if k != "_id" and k not in cls._FIELDS}
        return cls(id=doc["_id"], extra=extra, **known)

    @property
    def display_status(self) -> str:
        return display_status(self.status, self.retry_count)

    @property
    def partition(self) -> int | None:
        """The partition of a partitioned queue's activity (docs/design.md, "Partitions");
        None in a one-partition queue."""
        value = self.extra.get("partition")
        # int32 or int64 (Int64 is a subclass of int), never a boolean: a fence must carry
        # another program's 64-bit partition too.
        return int(value) if isinstance(value, int) and not isinstance(value, bool) else None

    @property
    def attempts(self) -> int:
        """Attempts made so far, the one running included: `retry_count` counts the ended
        attempts that did not end it, and `started_at` is kept only by the current or
        last one (a retry, the reaper's requeue and a release remove it). Compared with
        `max_retries`, which counts attempts allowed, not retries: 3/3 is spent."""
        return self.retry_count + (1 if self.started_at is not None else 0)

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict with stable field names (ids and dates as strings)."""
        out: dict[str, Any] = {"id": str(self.id)}
        for name in self._FIELDS:
            out[name] = to_jsonable(getattr(self, name))
        out["display_status"] = self.display_status
        if self.partition is not None:  # a partitioned queue's only (one partition: as before)
            out["partition"] = self.partition
        return out


@dataclass(frozen=True)
class Claim:
    """A held lease on one activity: pass it back to ack or extend."""

    activity: Activity
    lease_id: str
    worker_id: str
    lease_deadline: datetime

    @property
    def activity_id(self) -> uuid.UUID:
        return self.activity.id

    @property
    def number(self) -> int:
        """How many times the activity had been claimed, this claim included (`claims`):
        a result written under an older claim never replaces a newer one's."""
        return int(self.activity.extra.get("claims") or 0)


@dataclass(frozen=True)
class EnqueueResult:
    """The activity an enqueue refers to, and whether this call created it."""

    activity_id: uuid.UUID
    created: bool
    status: str


@dataclass(frozen=True)
class Result:
    activity_id: uuid.UUID
    state: str  # "Ok" | "Err"
    data: Any
    created_at: datetime | None = None

    def to_json(self) -> dict[str, Any]:
        return {"activity_id": str(self.activity_id), "state": self.state,
                "data": to_jsonable(self.data), "created_at": to_jsonable(self.created_at)}


@dataclass(frozen=True)
class Event:
    id: Any
    activity_id: uuid.UUID | None  # None: a queue's event (Paused, an operator action)
    timestamp: datetime | None
    event_type: str
    worker_id: str | None
    detail: dict[str, Any]
    ingested_at: datetime | None = None
    activity_type: str | None = None

    _TYPES: ClassVar[dict[str, tuple[type, ...]]] = {
        "event_type": (str,), "timestamp": (datetime, _NONE), "detail": (dict, _NONE),
        "activity_type": (str, _NONE), "worker_id": (str, _NONE),
        "ingested_at": (datetime, _NONE)}

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> Event:
        """The event of a stored document; MalformedDocument if its fields are wrong."""
        check_fields(doc, cls._TYPES, "event", ("_id",))
        return cls(id=doc["_id"], activity_id=doc.get("activity_id"),
                   timestamp=doc.get("timestamp"), event_type=str(doc.get("event_type")),
                   worker_id=doc.get("worker_id"), detail=doc.get("detail") or {},
                   ingested_at=doc.get("ingested_at"), activity_type=doc.get("activity_type"))

    def to_json(self) -> dict[str, Any]:
        return {"id": str(self.id),
                "activity_id": str(self.activity_id) if self.activity_id is not None else None,
                "timestamp": to_jsonable(self.timestamp), "event_type": self.event_type,
                "worker_id": self.worker_id, "detail": to_jsonable(self.detail)}


@dataclass(frozen=True)
class DeadLetterRecord:
    activity: Activity
    error: str
    failed_at: datetime | None

    _TYPES: ClassVar[dict[str, tuple[type, ...]]] = {
        "activity": (dict,), "error": (str, _NONE), "failed_at": (datetime, _NONE)}

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> DeadLetterRecord:
        """The record of a stored document; MalformedDocument if its fields are wrong."""
        check_fields(doc, cls._TYPES, "dead-letter record", ("activity",))
        return cls(Activity.from_doc(doc["activity"]), doc.get("error") or "",
                   doc.get("failed_at"))

    def to_json(self) -> dict[str, Any]:
        return {"activity": self.activity.to_json(), "error": self.error,
                "failed_at": to_jsonable(self.failed_at)}


def display_time(value: datetime | None) -> str:
    """A time in sentences for people: the CLI's one text format (UTC to the millisecond,
    docs/cli.md "Output conventions"), "?" when unknown."""
    if value is None:
        return "?"
    return value.strftime("%Y-%m-%d %H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"


def to_jsonable(value: Any) -> Any:
    """Dates to ISO-8601 (UTC), UUIDs and ObjectIds to strings, recursively; NaN and
    the infinities (stored by another program: JSON has no such numbers) to the
    strings "NaN", "Infinity" and "-Infinity", so the output stays valid JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, datetime):
        return value.isoformat().replace("+00:00", "Z")
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    if isinstance(value, Enum):
        return value.value
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)
