"""What writes cost the server, counted from pymongo's command monitoring.

A `WireCounter` (a pymongo `CommandListener`) keeps each command by its
request id and pairs it with its reply. `tally()` turns those pairs into:

- commands (hello/ping/endSessions left out),
- bytes on the wire: BSON size of each command and of each reply,
- documents written: insert `n`; update `nModified` + upserts; a findAndModify
  that changed, upserted or removed a document; delete `n`,
- index entries changed, from the collection's listed indexes and each
  write's fields (the rule is in benchmarks/README.md ("How the figures are counted")).

The listener only stores references (no encoding) so that it adds next to no
client CPU to what is measured; sizes and counts are worked out afterwards.
Nothing here knows runnerq: it reads commands as the server would.
"""

from __future__ import annotations

import collections
import datetime as dt
import re
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import bson
from bson import Binary, Decimal128, ObjectId
from bson.binary import UuidRepresentation
from bson.codec_options import CodecOptions
from pymongo import monitoring

IGNORED_COMMANDS = frozenset({"hello", "ismaster", "isMaster", "ping", "endSessions"})
# Sizes as the driver encodes them (UUIDs as subtype 4, the way runnerq stores them).
CODEC: CodecOptions[Any] = CodecOptions(uuid_representation=UuidRepresentation.STANDARD)
ROLES = ("activities", "events", "results", "dead_letter", "idempotency", "workers", "limits",
         "schedules", "checkpoints", "dependencies")


class _Marker:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


ABSENT = _Marker("ABSENT")  # the field is known not to exist
UNKNOWN = _Marker("UNKNOWN")  # nothing is known about the field
PRESENT = _Marker("PRESENT")  # the field exists, its value is not known

Maybe = bool | None  # three-valued logic: None is "cannot tell"


# ------------------------------------------------------------------ listener


@dataclass(frozen=True)
class Record:
    """One command and what the server answered (`ok` False: a command failure)."""

    database: str
    name: str
    command: Mapping[str, Any]
    reply: Mapping[str, Any]
    ok: bool = True


class WireCounter(monitoring.CommandListener):
    """Collects (command, reply) pairs; `take()` hands them over and starts afresh."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[int, tuple[str, str, Mapping[str, Any]]] = {}
        self._records: list[Record] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name in IGNORED_COMMANDS:
            return
        with self._lock:
            self._pending[event.request_id] = (event.database_name, event.command_name,
                                               event.command)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        self._finish(event.request_id, event.reply, True)

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        failure = event.failure if isinstance(event.failure, Mapping) else {}
        self._finish(event.request_id, failure, False)

    def _finish(self, request_id: int, reply: Mapping[str, Any], ok: bool) -> None:
        with self._lock:
            started = self._pending.pop(request_id, None)
            if started is not None:
                self._records.append(Record(*started, reply, ok))

    def take(self) -> list[Record]:
        """The records so far (commands still in flight stay for the next take)."""
        with self._lock:
            out, self._records = self._records, []
        return out


# ------------------------------------------------------------------- indexes


@dataclass(frozen=True)
class Index:
    name: str
    keys: tuple[str, ...]
    sparse: bool = False
    partial: Mapping[str, Any] | None = None

    @classmethod
    def from_listing(cls, spec: Mapping[str, Any]) -> Index:
        return cls(spec["name"], tuple(spec["key"]), bool(spec.get("sparse")),
                   spec.get("partialFilterExpression"))

    @property
    def is_id(self) -> bool:
        return self.keys == ("_id",)

    @property
    def fields(self) -> set[str]:
        """Key fields and partial-filter fields: what an update must touch to move an entry."""
        return set(self.keys) | filter_fields(self.partial or {})

    def member(self, view: View) -> Maybe:
        """Does the document seen through `view` have an entry in this index?"""
        result: Maybe = True
        if self.partial is not None:
            result = match(self.partial, view)
        if self.sparse:
            present = [view.lookup(k) for k in self.keys]
            if any(v not in (ABSENT, UNKNOWN) for v in present):
                has_key: Maybe = True
            elif all(v is ABSENT for v in present):
                has_key = False
            else:
                has_key = None
            result = _and3([result, has_key])
        return result


class IndexCatalog:
    """The indexes of each collection, listed once (and again for a collection not seen)."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._indexes: dict[tuple[str, str], list[Index]] = {}

    def prime(self, database: str) -> None:
        """List every collection's indexes now, before measuring."""
        db = self._client[database]
        for name in db.list_collection_names():
            self._indexes[(database, name)] = [Index.from_listing(ix)
                                               for ix in db[name].list_indexes()]

    def __call__(self, database: str, collection: str) -> list[Index]:
        key = (database, collection)
        if key not in self._indexes:
            self._indexes[key] = [Index.from_listing(ix) for ix in
                                  self._client[database][collection].list_indexes()]
        return self._indexes[key]

    def known(self, database: str, collection: str) -> bool:
        return (database, collection) in self._indexes


# ---------------------------------------------------------- document knowledge


class View:
    """What is known about one document: `lookup(path)` is a value, ABSENT, PRESENT or UNKNOWN."""

    def lookup(self, path: str) -> Any:
        raise NotImplementedError


class DocView(View):
    """A document as returned by the server; `projection` says which fields it holds."""

    def __init__(self, doc: Mapping[str, Any], projection: Mapping[str, Any] | None = None) -> None:
        self.doc = doc
        self.projection = projection or None

    def lookup(self, path: str) -> Any:
        if self.projection is not None and not projection_keeps(self.projection, path):
            return UNKNOWN
        return walk(self.doc, path)


class FactView(View):
    """Facts by path (from a query's equalities or an update's $set/$unset).

    `complete`: the facts are the whole document (an upsert's new document),
    so an unmentioned field is absent.
    """

    def __init__(self, facts: Mapping[str, Any], complete: bool = False) -> None:
        self.facts = dict(facts)
        self.complete = complete

    def lookup(self, path: str) -> Any:
        if path in self.facts:
            return self.facts[path]
        parts = path.split(".")
        for cut in range(len(parts) - 1, 0, -1):
            prefix = ".".join(parts[:cut])
            if prefix in self.facts:
                value = self.facts[prefix]
                if value is ABSENT:
                    return ABSENT
                if isinstance(value, Mapping):
                    return walk(value, ".".join(parts[cut:]))
                if value is PRESENT or isinstance(value, list):
                    return UNKNOWN
                return ABSENT  # a scalar has no sub-fields
        if any(f.startswith(path + ".") and self.facts[f] is not ABSENT for f in self.facts):
            return PRESENT  # a sub-field exists, so the field does
        return ABSENT if self.complete else UNKNOWN


class Unchanged(View):
    """The other side of an update: fields the update does not touch keep their value."""

    def __init__(self, other: View, touched: set[str] | None) -> None:
        self.other = other
        self.touched = touched

    def lookup(self, path: str) -> Any:
        if self.touched is None or any(related(path, t) for t in self.touched):
            return UNKNOWN
        return self.other.lookup(path)


class Layered(View):
    """The first view that knows something about the field wins."""

    def __init__(self, *views: View | None) -> None:
        self.views = [v for v in views if v is not None]

    def lookup(self, path: str) -> Any:
        for view in self.views:
            value = view.lookup(path)
            if value is not UNKNOWN:
                return value
        return UNKNOWN


def walk(doc: Any, path: str) -> Any:
    cur = doc
    for part in path.split("."):
        if isinstance(cur, Mapping):
            if part not in cur:
                return ABSENT
            cur = cur[part]
        elif isinstance(cur, list):
            if part.isdigit() and int(part) < len(cur):
                cur = cur[int(part)]
            else:
                return UNKNOWN  # traversal through an array: not modelled
        else:
            return ABSENT
    return cur


def projection_keeps(projection: Mapping[str, Any], path: str) -> bool:
    """Whether a find projection returns `path` (inclusion or exclusion style)."""
    fields = {k: v for k, v in projection.items() if k != "_id"}
    if path == "_id" or path.startswith("_id."):
        return bool(projection.get("_id", 1))
    inclusion = any(_truthy(v) for v in fields.values())
    if inclusion:
        return any(path == k or path.startswith(k + ".") for k, v in fields.items()
                   if _truthy(v))
    return not any(related(path, k) for k, v in fields.items() if not _truthy(v))


def _truthy(value: Any) -> bool:
    return bool(value) if isinstance(value, bool | int | float) else True


_POSITIONAL = re.compile(r"^(\$|\$\[[^\]]*\]|\d+)$")


def normalise(path: str) -> str:
    """`a.$.b`, `a.$[x].b`, `a.0.b` -> `a.b`: array positions do not change which index."""
    return ".".join(p for p in path.split(".") if not _POSITIONAL.match(p))


def related(a: str, b: str) -> bool:
    """Same field, or one is inside the other (dotted prefixes)."""
    a, b = normalise(a), normalise(b)
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


# ------------------------------------------------------------------- matcher


def filter_fields(expr: Mapping[str, Any]) -> set[str]:
    out: set[str] = set()
    for key, cond in expr.items():
        if key in ("$and", "$or", "$nor"):
            for sub in cond:
                out |= filter_fields(sub)
        elif not key.startswith("$"):
            out.add(key)
    return out


def match(expr: Mapping[str, Any], view: View) -> Maybe:
    """Three-valued match of a (partial filter) expression: True, False, or None (unknown)."""
    results: list[Maybe] = []
    for key, cond in expr.items():
        if key == "$and":
            results.append(_and3([match(sub, view) for sub in cond]))
        elif key == "$or":
            results.append(_or3([match(sub, view) for sub in cond]))
        elif key == "$nor":
            results.append(_not3(_or3([match(sub, view) for sub in cond])))
        elif key.startswith("$"):
            results.append(None)
        else:
            results.append(_match_cond(cond, view.lookup(key)))
    return _and3(results)


def _is_operator_doc(cond: Any) -> bool:
    return isinstance(cond, Mapping) and bool(cond) and all(
        isinstance(k, str) and k.startswith("$") for k in cond)


def _match_cond(cond: Any, value: Any) -> Maybe:
    if not _is_operator_doc(cond):
        return _eq(value, cond)
    results: list[Maybe] = []
    for op, arg in cond.items():
        if op == "$eq":
            results.append(_eq(value, arg))
        elif op == "$ne":
            results.append(_not3(_eq(value, arg)))
        elif op == "$exists":
            results.append(None if value is UNKNOWN else (value is not ABSENT) == bool(arg))
        elif op in ("$gt", "$gte", "$lt", "$lte"):
            results.append(_compare(op, value, arg))
        elif op == "$in":
            results.append(_or3([_eq(value, x) for x in arg]))
        elif op == "$nin":
            results.append(_not3(_or3([_eq(value, x) for x in arg])))
        elif op == "$type":
            results.append(_type(value, arg))
        elif op == "$not":
            results.append(_not3(_match_cond(arg, value)))
        else:
            results.append(None)
    return _and3(results)


def _eq(value: Any, arg: Any) -> Maybe:
    if value is UNKNOWN or value is PRESENT:
        return None
    if value is ABSENT:
        return arg is None  # null matches a missing field
    if isinstance(value, list) and not isinstance(arg, list):
        return any(_same(v, arg) for v in value)
    return _same(value, arg)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) != isinstance(b, bool):
        return False
    return bool(a == b)


def _bracket(value: Any) -> str | None:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float | Decimal | Decimal128):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dt.datetime):
        return "date"
    if isinstance(value, ObjectId):
        return "objectId"
    return None


def _compare(op: str, value: Any, arg: Any) -> Maybe:
    if value is UNKNOWN or value is PRESENT:
        return None
    if value is ABSENT:
        return False
    values = value if isinstance(value, list) else [value]
    out: list[Maybe] = []
    for v in values:
        kind = _bracket(v)
        if kind is None or kind != _bracket(arg):
            out.append(None if kind is None else False)
            continue
        a = v.to_decimal() if isinstance(v, Decimal128) else v
        b = arg.to_decimal() if isinstance(arg, Decimal128) else arg
        try:
            out.append({"$gt": a > b, "$gte": a >= b, "$lt": a < b, "$lte": a <= b}[op])
        except TypeError:  # naive vs aware datetimes and the like
            out.append(None)
    return _or3(out)


_TYPE_ALIASES: dict[Any, str] = {
    1: "double", 2: "string", 3: "object", 4: "array", 5: "binData", 7: "objectId",
    8: "bool", 9: "date", 10: "null", 16: "int", 18: "long", 19: "decimal",
}


def _type_of(value: Any) -> set[str]:
    if value is None:
        return {"null"}
    if isinstance(value, bool):
        return {"bool"}
    if isinstance(value, int):
        return {"int", "long", "number"}
    if isinstance(value, float):
        return {"double", "number"}
    if isinstance(value, Decimal128 | Decimal):
        return {"decimal", "number"}
    if isinstance(value, str):
        return {"string"}
    if isinstance(value, Mapping):
        return {"object"}
    if isinstance(value, list):
        return {"array"}
    if isinstance(value, ObjectId):
        return {"objectId"}
    if isinstance(value, dt.datetime):
        return {"date"}
    if isinstance(value, bytes | Binary | uuid.UUID):
        return {"binData"}
    return set()


def _type(value: Any, arg: Any) -> Maybe:
    if value is UNKNOWN or value is PRESENT:
        return None
    if value is ABSENT:
        return False
    wanted = {_TYPE_ALIASES.get(a, a) for a in (arg if isinstance(arg, list) else [arg])}
    kinds = _type_of(value)
    if isinstance(value, list):  # an array field matches by its elements too
        for element in value:
            kinds |= _type_of(element)
    return bool(kinds & wanted)


def _and3(values: Iterable[Maybe]) -> Maybe:
    values = list(values)
    if any(v is False for v in values):
        return False
    return True if all(v is True for v in values) else None


def _or3(values: Iterable[Maybe]) -> Maybe:
    values = list(values)
    if any(v is True for v in values):
        return True
    return False if all(v is False for v in values) else None


def _not3(value: Maybe) -> Maybe:
    return None if value is None else not value


# ----------------------------------------------------------- query & update facts


def query_facts(query: Mapping[str, Any]) -> dict[str, Any]:
    """What a matched document must hold: equalities, $eq, single-value $in, $exists."""
    facts: dict[str, Any] = {}
    for key, cond in query.items():
        if key == "$and":
            for sub in cond:
                facts.update(query_facts(sub))
            continue
        if key.startswith("$"):
            continue
        if _is_operator_doc(cond):
            if "$eq" in cond and cond["$eq"] is not None and not isinstance(cond["$eq"], list):
                facts[key] = cond["$eq"]
            elif "$in" in cond and len(cond["$in"]) == 1 and cond["$in"][0] is not None \
                    and not isinstance(cond["$in"][0], list):
                facts[key] = cond["$in"][0]
            elif "$exists" in cond:
                if not cond["$exists"]:
                    facts[key] = ABSENT
                elif key not in facts:
                    facts[key] = PRESENT
            elif any(op in cond for op in ("$gt", "$gte", "$lt", "$lte")):
                facts.setdefault(key, PRESENT)  # a range never matches a missing field
        elif cond is not None and not isinstance(cond, list):
            facts[key] = cond
    return facts


_PRESENT_AFTER = ("$inc", "$min", "$max", "$mul", "$push", "$addToSet", "$currentDate", "$bit")


def is_replacement(update: Any) -> bool:
    return isinstance(update, Mapping) and not any(str(k).startswith("$") for k in update)


def touched_paths(update: Any, *, inserting: bool = False) -> set[str] | None:
    """The fields an update writes; None when it may write any (replacement, pipeline)."""
    if isinstance(update, list):  # an aggregation pipeline update
        out: set[str] = set()
        for stage in update:
            for name, spec in stage.items():
                if name in ("$set", "$addFields"):
                    out |= set(spec)
                elif name == "$unset":
                    out |= {spec} if isinstance(spec, str) else set(spec)
                else:
                    return None
        return out
    if not isinstance(update, Mapping) or is_replacement(update):
        return None
    out = set()
    for op, fields in update.items():
        if op == "$setOnInsert" and not inserting:
            continue
        if op == "$rename":
            out |= set(fields) | set(fields.values())
        else:
            out |= set(fields)
    return out


def update_facts(update: Any) -> dict[str, Any]:
    """What the updated document holds for certain: $set values, $unset absences."""
    facts: dict[str, Any] = {}
    if isinstance(update, list):
        return pipeline_facts(update)
    if not isinstance(update, Mapping) or is_replacement(update):
        return facts
    for path, value in (update.get("$set") or {}).items():
        facts[path] = value
    for path in update.get("$unset") or {}:
        facts[path] = ABSENT
    for op in _PRESENT_AFTER:
        for path in update.get(op) or {}:
            facts[path] = PRESENT
    for source, target in (update.get("$rename") or {}).items():
        facts[source] = ABSENT
        facts[target] = PRESENT
    return facts


def pipeline_facts(stages: list[Any]) -> dict[str, Any]:
    """What an update pipeline leaves for certain: the values its `$set`/`$addFields`
    stages write as constants (bare, or in `$literal`), present for `$$NOW` and other
    expressions, absent for `$unset`; nothing for any other stage (it may do anything)."""
    facts: dict[str, Any] = {}
    for stage in stages:
        if not isinstance(stage, Mapping) or len(stage) != 1:
            return {}
        [(name, spec)] = stage.items()
        if name == "$unset":
            for path in [spec] if isinstance(spec, str) else spec:
                facts[path] = ABSENT
        elif name in ("$set", "$addFields") and isinstance(spec, Mapping):
            for path, value in spec.items():
                if isinstance(value, Mapping) and list(value) == ["$literal"]:
                    facts[path] = value["$literal"]
                elif isinstance(value, str) and value.startswith("$$"):
                    facts[path] = PRESENT  # a variable: "$$NOW"
                elif isinstance(value, str) and value.startswith("$"):
                    facts.pop(path, None)  # a field path: maybe missing, not known
                elif isinstance(value, Mapping | list):
                    facts[path] = PRESENT  # an expression: its value is not worked out
                else:
                    facts[path] = value
        else:
            return {}
    return facts


def upserted_document(query: Mapping[str, Any], update: Any, new_id: Any) -> View:
    """The document an upsert inserts: the query's equalities plus the update."""
    if is_replacement(update):
        return DocView({**update, "_id": new_id if new_id is not None else update.get("_id")})
    facts = {k: v for k, v in query_facts(query).items() if v is not PRESENT}
    if isinstance(update, Mapping):
        facts.update(update_facts(update))
        facts.update(update.get("$setOnInsert") or {})
    if new_id is not None:
        facts["_id"] = new_id
    facts = {k: v for k, v in facts.items() if v is not ABSENT}
    return FactView(facts, complete=True)


# ------------------------------------------------------------------- tally


@dataclass
class Tally:
    """Totals over a set of records; divide with `per(n)`."""

    commands: collections.Counter[str] = field(default_factory=collections.Counter)
    documents: collections.Counter[str] = field(default_factory=collections.Counter)
    index_entries: collections.Counter[str] = field(default_factory=collections.Counter)
    bytes_sent: int = 0
    bytes_received: int = 0
    approximations: int = 0  # bulk updates whose split over statements was estimated
    uncounted: int = 0  # writes of a kind not counted (the client-level bulkWrite command)

    def add(self, other: Tally) -> None:
        self.commands.update(other.commands)
        self.documents.update(other.documents)
        self.index_entries.update(other.index_entries)
        self.bytes_sent += other.bytes_sent
        self.bytes_received += other.bytes_received
        self.approximations += other.approximations
        self.uncounted += other.uncounted

    def per(self, n: int) -> dict[str, Any]:
        n = max(n, 1)

        def by(counter: collections.Counter[str]) -> dict[str, float]:
            return {k: round(v / n, 3) for k, v in sorted(counter.items()) if v}

        return {
            "commands": round(sum(self.commands.values()) / n, 3),
            "commands_by_name": by(self.commands),
            "documents_written": round(sum(self.documents.values()) / n, 3),
            "documents_by_collection": by(self.documents),
            "index_entries_changed": round(sum(self.index_entries.values()) / n, 3),
            "index_entries_by_collection": by(self.index_entries),
            "bytes_sent": round(self.bytes_sent / n, 1),
            "bytes_received": round(self.bytes_received / n, 1),
            "bytes_total": round((self.bytes_sent + self.bytes_received) / n, 1),
            "estimated_bulk_splits": self.approximations,
            "uncounted_writes": self.uncounted,
        }


def role_of(collection: str) -> str:
    """`runnerq_<queue>_<role>` -> role; any other collection keeps its name."""
    for role in ROLES:
        if collection == role or collection.endswith("_" + role):
            return role
    return collection


IndexSource = Callable[[str, str], list[Index]]


def tally(records: Iterable[Record], indexes: IndexSource) -> Tally:
    out = Tally()
    for record in records:
        out.commands[record.name] += 1
        out.bytes_sent += len(bson.encode(record.command, codec_options=CODEC))
        out.bytes_received += len(bson.encode(record.reply, codec_options=CODEC))
        if record.name == "bulkWrite":  # MongoDB 8's client bulk write: not modelled
            out.uncounted += 1
        if not record.ok or record.name not in ("insert", "update", "delete", "findAndModify"):
            continue
        collection = record.command[record.name]
        role = role_of(collection)
        docs, entries, estimated = _count_write(record, indexes(record.database, collection))
        out.documents[role] += docs
        out.index_entries[role] += entries
        out.approximations += estimated
    return out


def _count(indexes: list[Index], view: View) -> int:
    """Index entries of one inserted or deleted document: the indexes it belongs to."""
    return sum(1 for ix in indexes if ix.member(view) is not False)


def _changed(indexes: list[Index], touched: set[str] | None, before: View, after: View) -> int:
    """Index entries one updated document changes: touched indexes it is or was in."""
    total = 0
    for ix in indexes:
        if ix.is_id:
            continue
        if touched is not None and not any(related(t, f) for t in touched for f in ix.fields):
            continue
        if ix.member(before) is False and ix.member(after) is False:
            continue
        total += 1
    return total


def _update_sides(query: Mapping[str, Any], update: Any, before_doc: View | None,
                  after_doc: View | None) -> tuple[set[str] | None, View, View]:
    touched = touched_paths(update)
    before = Layered(FactView(query_facts(query)), before_doc,
                     Unchanged(after_doc, touched) if after_doc is not None else None)
    replacement = DocView(update) if is_replacement(update) else None
    after = Layered(after_doc, replacement,
                    FactView(update_facts(update)) if replacement is None else None,
                    Unchanged(Layered(FactView(query_facts(query)), before_doc), touched))
    return touched, before, after


def _count_write(record: Record, indexes: list[Index]) -> tuple[int, int, int]:
    """(documents written, index entries changed, 1 if the split was estimated)."""
    cmd, reply = record.command, record.reply
    if record.name == "insert":
        failed = {e.get("index") for e in reply.get("writeErrors") or ()}
        docs = [d for i, d in enumerate(cmd.get("documents") or ()) if i not in failed]
        docs = docs[:int(reply.get("n", len(docs)))]
        return len(docs), sum(_count(indexes, DocView(d)) for d in docs), 0
    if record.name == "findAndModify":
        return _count_find_and_modify(cmd, reply, indexes)
    if record.name == "delete":
        return _count_statements(
            [(s.get("q") or {}, None, 1 if s.get("limit") else None) for s in cmd["deletes"]],
            int(reply.get("n", 0)), indexes, deleting=True)
    statements = cmd.get("updates") or []
    upserted = {u["index"]: u.get("_id") for u in reply.get("upserted") or ()}
    entries = sum(_count(indexes, upserted_document(statements[i].get("q") or {},
                                                    statements[i].get("u"), new_id))
                  for i, new_id in upserted.items() if i < len(statements))
    modified = int(reply.get("nModified", 0))
    rest = [(s.get("q") or {}, s.get("u"), None if s.get("multi") else 1)
            for i, s in enumerate(statements) if i not in upserted]
    docs, changed, estimated = _count_statements(rest, modified, indexes, deleting=False)
    return docs + len(upserted), entries + changed, estimated


def _capacity(query: Mapping[str, Any], limit: int | None) -> int | None:
    """How many documents a statement can change at most, when the query says."""
    ident = query.get("_id")
    if _is_operator_doc(ident) and isinstance(ident.get("$in"), list):
        bound = len(ident["$in"])
        return min(bound, limit) if limit is not None else bound
    if ident is not None and not _is_operator_doc(ident):
        return 1
    return limit


def _count_statements(statements: list[tuple[Mapping[str, Any], Any, int | None]],
                      total: int, indexes: list[Index], *,
                      deleting: bool) -> tuple[int, int, int]:
    """Spread `total` changed documents over the statements of one bulk command.

    The reply gives only the command's total. When every statement costs the
    same per document (the common case: one shape of update), the split does
    not matter and the count is exact. Otherwise documents are given to the
    statements in order, each up to what its query allows (`_id` equality: 1,
    `_id` $in: the list's length, a limit of 1: 1), and the result is marked
    as estimated.
    """
    if total <= 0 or not statements:
        return max(total, 0), 0, 0
    costs = []
    for query, update, _ in statements:
        if deleting:
            costs.append(_count(indexes, FactView(query_facts(query))))
        else:
            touched, before, after = _update_sides(query, update, None, None)
            costs.append(_changed(indexes, touched, before, after))
    if len(set(costs)) == 1:
        return total, total * costs[0], 0
    left, entries = total, 0
    for (query, _, limit), cost in zip(statements, costs, strict=True):
        cap = _capacity(query, limit)
        take = left if cap is None else min(cap, left)
        entries += take * cost
        left -= take
        if not left:
            break
    entries += left * max(costs)  # more changed than the bounds allow: assume the dearest
    return total, entries, 1


def _count_find_and_modify(cmd: Mapping[str, Any], reply: Mapping[str, Any],
                           indexes: list[Index]) -> tuple[int, int, int]:
    status = reply.get("lastErrorObject") or {}
    value = reply.get("value")
    query = cmd.get("query") or {}
    projection = cmd.get("fields") or None
    if cmd.get("remove"):
        if value is None:
            return 0, 0, 0
        before = Layered(FactView(query_facts(query)), DocView(value, projection))
        return 1, _count(indexes, before), 0
    update = cmd.get("update")
    new = bool(cmd.get("new"))
    if "upserted" in status and not status.get("updatedExisting"):
        if new and value is not None and projection is None:
            return 1, _count(indexes, DocView(value)), 0
        return 1, _count(indexes, upserted_document(query, update, status.get("upserted"))), 0
    if not status.get("updatedExisting"):
        return 0, 0, 0
    # Matched. (A findAndModify that matched but changed nothing still reports
    # updatedExisting; MongoDB writes nothing then, but the reply cannot tell.)
    doc = DocView(value, projection) if value is not None else None
    touched, before, after = _update_sides(query, update, None if new else doc,
                                           doc if new else None)
    return 1, _changed(indexes, touched, before, after), 0
