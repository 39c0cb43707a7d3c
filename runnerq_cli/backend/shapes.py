"""The shape each reader needs of a stored document, checked once, the same way everywhere.

Another program (docs/design.md is a contract others implement), a hand edit or
a look-alike collection can store a document whose fields have the wrong
type. Readers check the fields they use (`check`, raising `MalformedDocument`)
and skip such a document instead of crashing; `doctor` finds them with the
same table (`malformed`), bounded: live activities (at most SHAPE_SCAN_LIMIT
looked at per status), the worker registry and the control documents, never
the finished history.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from runnerq_cli.backend.models import Status

if TYPE_CHECKING:
    from runnerq_cli.backend.context import QueueContext

SHAPE_SCAN_LIMIT = 10_000  # live documents looked at per status by doctor
MALFORMED_LIMIT = 20  # malformed documents named per collection


class MalformedDocument(ValueError):
    """A stored document lacks a field a reader needs, or has it with the wrong type."""


# BSON type alias ($type) -> the Python check of a decoded value
_KINDS: dict[str, tuple[str, Any]] = {
    "string": ("a string", lambda v: isinstance(v, str)),
    "number": ("a number", lambda v: isinstance(v, int | float) and not isinstance(v, bool)),
    "int": ("a whole number", lambda v: isinstance(v, int) and not isinstance(v, bool)),
    "date": ("a date", lambda v: isinstance(v, dt.datetime)),
    "object": ("an object", lambda v: isinstance(v, Mapping)),
    "array": ("an array", lambda v: isinstance(v, list | tuple)),
    "bool": ("true or false", lambda v: isinstance(v, bool)),
}
_BSON_TYPES = {"int": ["int", "long"], "number": ["number"], "string": ["string"],
               "date": ["date"], "object": ["object"], "array": ["array"], "bool": ["bool"]}


@dataclass(frozen=True)
class Field:
    name: str
    kind: str  # a key of _KINDS
    required: bool = True
    nullable: bool = False
    items: str | None = None  # arrays: the kind of every item


# What the readers of each collection need (models.py, workers.py, control.py).
ACTIVITY = (
    Field("activity_type", "string"), Field("status", "string"), Field("priority", "int"),
    Field("created_at", "date"), Field("retry_count", "int", required=False),
    Field("max_retries", "int", required=False), Field("timeout_seconds", "number",
                                                       required=False),
    Field("payload", "object", required=False, nullable=True),
    Field("metadata", "object", required=False, nullable=True),
    Field("scheduled_at", "date", required=False, nullable=True),
    Field("lease_deadline", "date", required=False, nullable=True),
    Field("started_at", "date", required=False, nullable=True),
    Field("completed_at", "date", required=False, nullable=True),
    Field("last_error", "string", required=False, nullable=True),
)
WORKER = (
    Field("types", "array", required=False, nullable=True, items="string"),
    Field("concurrency", "int", required=False), Field("pid", "int", required=False),
    Field("in_flight", "int", required=False), Field("host", "string", required=False),
    Field("last_heartbeat", "date", required=False, nullable=True),
    Field("started_at", "date", required=False, nullable=True),
    Field("counters", "object", required=False, nullable=True),
)
PAUSE = (
    Field("all", "bool", required=False, nullable=True),
    Field("types", "array", required=False, nullable=True, items="string"),
    Field("reason", "string", required=False, nullable=True),
    Field("actor", "string", required=False, nullable=True),
    Field("at", "date", required=False, nullable=True),
)
DEAD_LETTER = (Field("activity", "object"), Field("error", "string", required=False,
                                                  nullable=True),
               Field("failed_at", "date", required=False, nullable=True))
EVENT = (Field("event_type", "string"), Field("timestamp", "date"),
         Field("activity_type", "string", required=False, nullable=True),
         Field("worker_id", "string", required=False, nullable=True),
         Field("detail", "object", required=False, nullable=True))


def problems(doc: Mapping[str, Any], shape: tuple[Field, ...]) -> list[str]:
    """What is wrong with `doc` for a reader that needs `shape` (empty: nothing)."""
    found = []
    for spec in shape:
        if spec.name not in doc:
            if spec.required:
                found.append(f"{spec.name} is missing")
            continue
        value = doc[spec.name]
        if value is None and (spec.nullable or not spec.required):
            continue
        label, ok = _KINDS[spec.kind]
        if not ok(value):
            found.append(f"{spec.name} is {_shown(value)}, not {label}")
        elif spec.items is not None:
            item_label, item_ok = _KINDS[spec.items]
            if not all(item_ok(item) for item in value):
                found.append(f"{spec.name} holds something other than {item_label}s")
    return found


def check(doc: Mapping[str, Any], shape: tuple[Field, ...], what: str) -> None:
    """Raise MalformedDocument naming the document and its first problems."""
    found = problems(doc, shape)
    if found:
        raise MalformedDocument(f"{what} {_shown(doc.get('_id'))}: {'; '.join(found[:3])}")


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _type_mismatch(shape: tuple[Field, ...]) -> dict[str, Any]:
    """A filter matching documents with any field of the wrong BSON type (or missing)."""
    branches: list[dict[str, Any]] = []
    for spec in shape:
        allowed = list(_BSON_TYPES[spec.kind])
        if spec.nullable or not spec.required:
            allowed.append("null")
        clause: dict[str, Any] = {"$not": {"$type": allowed}}
        if not spec.required:
            clause = {"$exists": True, **clause}
        branches.append({spec.name: clause})
        if spec.items is not None:  # an array holding an item of another type
            branches.append({spec.name: {"$elemMatch": {"$not": {"$type":
                                                                  _BSON_TYPES[spec.items]}}}})
    return {"$or": branches}


@dataclass(frozen=True)
class Malformed:
    """A document a reader would skip: where it is and what is wrong with it."""

    collection: str
    id: str
    problem: str

    def to_json(self) -> dict[str, str]:
        return {"collection": self.collection, "id": self.id, "problem": self.problem}


LIVE_STATUSES = (Status.PENDING.value, Status.SCHEDULED.value, Status.PROCESSING.value)


def malformed(ctx: QueueContext) -> list[Malformed]:
    """Malformed live activities, workers and control documents (bounded, see the module)."""
    found: list[Malformed] = []
    mismatch = _type_mismatch(ACTIVITY)
    for status in LIVE_STATUSES:
        pipeline = [{"$match": {"status": status}}, {"$limit": SHAPE_SCAN_LIMIT},
                    {"$match": mismatch}, {"$limit": MALFORMED_LIMIT}]
        for doc in ctx.activities.aggregate(pipeline):
            found += _named(ctx.activities.name, doc, ACTIVITY)
    for collection, shape, query in ((ctx.workers, WORKER, {}),
                                     (ctx.control, PAUSE, {"_id": "pause"})):
        docs = collection.find({**query, **_type_mismatch(shape)}).limit(MALFORMED_LIMIT)
        for doc in docs:
            found += _named(collection.name, doc, shape)
    return found


def _named(collection: str, doc: Mapping[str, Any], shape: tuple[Field, ...]) -> list[Malformed]:
    wrong = problems(doc, shape)
    return [Malformed(collection, str(doc.get("_id")), "; ".join(wrong))] if wrong else []
