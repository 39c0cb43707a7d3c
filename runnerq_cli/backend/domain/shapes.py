"""The shape each reader needs of a stored document, in one table per kind of document.

Another program (docs/design.md is a contract others implement), a hand edit or
a look-alike collection can store a document whose fields have the wrong type.
Readers check the fields they use (documents.check_fields, raising
`MalformedDocument`) and lists skip such a document instead of crashing
(`readable`); `doctor` finds them with the same tables turned into `$type`
queries (`Shape.mismatch`, run by views/shape_scan.py: the domain reads no
server), bounded: live and dead-lettered activities and those of no known
status (at most SHAPE_SCAN_LIMIT looked at per status: a malformed activity is
dead-lettered by the claim or the reaper, docs/design.md "Malformed
documents"), the worker registry and the control document, never the rest of
the finished history.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from runnerq_cli.backend import LOGGER_NAME
from runnerq_cli.backend.domain.documents import Activity, Event, check_fields, neutral
from runnerq_cli.backend.domain.models import LIVE_STATUSES, MalformedDocument, Status

SHAPE_SCAN_LIMIT = 10_000  # live documents looked at per status by doctor
MALFORMED_LIMIT = 20  # malformed documents named per collection
# The statuses scanned for malformed documents: live work, and those set aside, which wait
# for an operator (dead_letter).
SCANNED_STATUSES = (*(s.value for s in LIVE_STATUSES), Status.DEAD_LETTER.value)
_NONE = type(None)
log = logging.getLogger(LOGGER_NAME)
T = TypeVar("T")


@dataclass(frozen=True)
class Shape:
    """What a reader needs of one kind of document."""

    what: str  # "activity", "worker", ...
    types: dict[str, tuple[type, ...]]
    required: tuple[str, ...] = ()
    items: dict[str, type] | None = None  # lists that must hold only this type
    lengths: dict[str, tuple[int, int]] | None = None  # text of so many characters

    def check(self, doc: dict[str, Any]) -> None:
        """Raise MalformedDocument if `doc` does not have this shape."""
        check_fields(doc, self.types, self.what, self.required, self.items, self.lengths)

    def problem(self, doc: dict[str, Any]) -> str | None:
        try:
            self.check(doc)
        except MalformedDocument as exc:
            return exc.problem
        return None

    def mismatch(self) -> dict[str, Any]:
        """A filter matching documents of another shape (the same rules as `check`)."""
        branches: list[dict[str, Any]] = [{name: {"$exists": False}}
                                          for name in self.required if name != "_id"]
        for name, kinds in self.types.items():
            aliases = [alias for kind in kinds for alias in _BSON[kind]]
            branches.append({name: {"$exists": True, "$not": {"$type": aliases}}})
            if list not in kinds:  # $type also matches an array holding that type
                branches.append({name: {"$type": "array"}})
            if float in kinds:  # a double that is no finite number (check_fields)
                branches.append({name: {"$in": [math.nan, math.inf, -math.inf]}})
        for name, kind in (self.items or {}).items():
            branches.append({name: {"$elemMatch": {"$not": {"$type": _BSON[kind]}}}})
        for name, (low, high) in (self.lengths or {}).items():
            # characters are code points, as MongoDB's regular expressions count them
            branches.append({name: {"$regex": f"^[\\s\\S]{{{high + 1}}}"}})
            if low == 1:
                branches.append({name: ""})
            elif low > 1:
                branches.append({name: {"$regex": f"^(?![\\s\\S]{{{low}}})"}})
        return {"$or": branches}


_BSON: dict[type, list[str]] = {
    str: ["string"], int: ["int", "long"], float: ["double", "decimal"], datetime: ["date"],
    dict: ["object"], list: ["array"], bool: ["bool"], _NONE: ["null"]}

# Every BSON type a stored value may have, by its $type alias (the deprecated ones left out).
_ALL_BSON = ("double", "string", "object", "array", "binData", "objectId", "bool", "date",
             "null", "regex", "javascript", "int", "timestamp", "long", "decimal", "minKey",
             "maxKey")
ACTIVITY = Shape("activity", Activity._TYPES, Activity._REQUIRED, lengths=Activity._LENGTHS)
EVENT = Shape("event", Event._TYPES, ("_id",))
WORKER = Shape("worker", {
    "types": (list, _NONE), "concurrency": (int,), "pid": (int,), "in_flight": (int,),
    "host": (str,), "queue": (str,), "last_heartbeat": (datetime, _NONE),
    "started_at": (datetime, _NONE), "counters": (dict, _NONE), "version": (str, _NONE)},
    items={"types": str})
PAUSE = Shape("pause", {
    "all": (bool, _NONE), "types": (list, _NONE), "reason": (str, _NONE),
    "actor": (str, _NONE), "at": (datetime, _NONE), "notes": (list, _NONE)},
    items={"types": str, "notes": dict})

SET_ASIDE_PREFIX = "malformed document: "  # aside.MALFORMED, as the error begins
# Fields of an activity too large to read along with every document a tail derives
# events from (derived.DERIVE_FIELDS reads the others): a query checks them instead.
LARGE_FIELDS = ("payload", "metadata", "last_error")
LARGE = Shape("activity", {name: Activity._TYPES[name] for name in LARGE_FIELDS})


def proves_no_step_filter(ids: list[Any]) -> dict[str, Any]:
    """Which of the activities `ids` prove no derived step (views.events.proves_no_step):
    their LARGE_FIELDS have another shape, or they were set aside as malformed (whose
    defect the set-aside may have written over: a `last_error` or a lease field).
    derived.derive checks the other fields itself. Each large field of another type is
    named positively (`$type` of the others: an array matches "array")."""
    aside = {"status": Status.DEAD_LETTER.value, "last_error": {"$regex": f"^{SET_ASIDE_PREFIX}"}}
    other = [{name: {"$type": [alias for alias in _ALL_BSON if alias not in {
        a for kind in kinds for a in _BSON[kind]}]}} for name, kinds in LARGE.types.items()]
    return {"_id": {"$in": ids}, "$or": [*other, aside]}


def proves_no_step_doc(doc: dict[str, Any]) -> bool:
    """`proves_no_step_filter` in code, for one document read with LARGE_FIELDS."""
    last_error = doc.get("last_error")
    return LARGE.problem(doc) is not None or (
        doc.get("status") == Status.DEAD_LETTER.value and isinstance(last_error, str)
        and last_error.startswith(SET_ASIDE_PREFIX))


# An activity's outbox as OutboxWriter.flush reads it (docs/design.md, "The outbox").
OUTBOX = Shape("outbox", {"seq": (int,), "since": (datetime,), "events": (list,),
                          "result": (dict, _NONE), "dead_letter": (dict, _NONE)},
               ("seq", "since"), items={"events": dict})


def outbox_problem(doc: dict[str, Any]) -> str | None:
    """What keeps `doc`'s outbox from being copied out, or None: its shape, an event
    without `_id`, a result whose `claim` is not a number, a dead-letter record without
    a `failed_at` date."""
    box = doc.get("outbox")
    if not isinstance(box, dict):
        return f"outbox is {neutral(box)}, not a document"
    problem = OUTBOX.problem(box)
    if problem is not None:
        return f"outbox: {problem}"
    if any("_id" not in event for event in box.get("events") or ()):
        return "outbox: an event has no _id"
    claim = (box.get("result") or {}).get("claim")
    if claim is not None and (not isinstance(claim, int) or isinstance(claim, bool)):
        return f"outbox: result claim is {neutral(claim)}, not an integer"
    if box.get("dead_letter") is not None \
            and not isinstance(box["dead_letter"].get("failed_at"), datetime):
        return "outbox: dead_letter has no failed_at date"
    return None


def readable(docs: Iterable[dict[str, Any]], build: Callable[[dict[str, Any]], T],
             where: str) -> tuple[list[T], int]:
    """`build(doc)` of each document, skipping (and counting) malformed ones."""
    out: list[T] = []
    skipped = 0
    for doc in docs:
        try:
            out.append(build(doc))
        except MalformedDocument as exc:
            skipped += 1
            log.warning("skipped a malformed document in %s: %s", where, exc)
    return out, skipped


def well_formed(docs: Iterable[dict[str, Any]], shape: Shape,
                where: str) -> Iterator[dict[str, Any]]:
    """The documents of `docs` that have `shape`; the others are skipped (logged)."""
    for doc in docs:
        problem = shape.problem(doc)
        if problem is None:
            yield doc
        else:
            log.warning("skipped a malformed document in %s: %s %s: %s", where, shape.what,
                        doc.get("_id"), problem)


@dataclass(frozen=True)
class Malformed:
    """A document a reader would skip: where it is and what is wrong with it."""

    collection: str
    id: str
    problem: str

    def to_json(self) -> dict[str, str]:
        return {"collection": self.collection, "id": self.id, "problem": self.problem}
