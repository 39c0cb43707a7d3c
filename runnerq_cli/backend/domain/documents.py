"""Typed views of the documents of docs/design.md (`Activity`, `Claim`, `Result`,
`Event`, `DeadLetterRecord`), and the check of a stored document's fields that each
reader makes (`check_fields`, "Malformed documents").

Apart from the vocabulary (models.py: the enums, `EnqueueResult`) because what reads
documents back (the worker, the views, the console) is not what enqueues: one enqueue
loads none of this (tests/test_import_cost.py)."""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar

from runnerq_cli.backend.domain.models import (
    TERMINAL_STATUSES,
    MalformedDocument,
    display_status,
    to_jsonable,
)
from runnerq_cli.backend.domain.sizes import ACTIVITY_TYPE_MAX
from runnerq_cli.plural import counted

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
    def flow_key(self) -> str | None:
        """The flow key of a keyed activity (docs/design.md, "Keys": `enqueue --key`);
        None for a plain one (or a stored key that is not text)."""
        value = self.extra.get("flow_key")
        return value if isinstance(value, str) else None

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
        if self.flow_key is not None:  # a keyed activity's only (plain ones: as before)
            out["flow_key"] = self.flow_key
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
