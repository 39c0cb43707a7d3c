"""The benchmark's counting (benchmarks/wirecount.py) on short known sequences, real server.

Each sequence is run through a real pymongo client whose commands a
`WireCounter` sees; the counts are what benchmarks/README.md ("How the figures are counted")
says a write costs: documents written and index entries changed.
"""

from __future__ import annotations

import importlib.util
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import bson
import pytest
from pymongo import MongoClient, ReturnDocument, UpdateMany, UpdateOne

_PATH = Path(__file__).resolve().parent.parent / "benchmarks" / "wirecount.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("wirecount", _PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["wirecount"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


wc = _load()


class Session:
    """A client whose commands are counted; `step()` tallies what ran since the last step."""

    def __init__(self, uri: str, db_name: str) -> None:
        self.counter = wc.WireCounter()
        self.client: MongoClient[dict[str, Any]] = MongoClient(
            uri, uuidRepresentation="standard", tz_aware=True, event_listeners=[self.counter])
        self.db = self.client[db_name]
        self.catalog = wc.IndexCatalog(self.client)

    def ready(self) -> None:
        """Indexes are set up: list them, and forget the setup commands."""
        self.catalog.prime(self.db.name)
        self.counter.take()

    def step(self) -> Any:
        counted = wc.tally(self.counter.take(), self.catalog)
        self.counter.take()  # the catalog's listIndexes of a new collection is not the next step's
        return counted


@pytest.fixture
def session(server: Any, db_name: str) -> Iterator[Session]:
    s = Session(server.uri, db_name)
    yield s
    s.client.close()


def totals(t: Any) -> tuple[int, int]:
    return sum(t.documents.values()), sum(t.index_entries.values())


def test_insert_counts_every_index_of_every_document(session: Session) -> None:
    col = session.db.things
    col.create_index("a")
    session.ready()
    col.insert_many([{"_id": i, "a": i, "b": 0} for i in range(3)])
    t = session.step()
    assert totals(t) == (3, 6)
    assert t.commands == {"insert": 1}
    assert dict(t.documents) == {"things": 3}


def test_update_counts_only_indexes_whose_fields_it_touches(session: Session) -> None:
    col = session.db.things
    col.create_index("a")
    col.create_index([("nested.since", 1)], sparse=True)
    col.insert_one({"_id": 1, "a": 1, "b": 0, "nested": {"since": 1, "n": 0}})
    session.ready()

    col.update_one({"_id": 1}, {"$set": {"b": 1}})
    assert totals(session.step()) == (1, 0)
    col.update_one({"_id": 1}, {"$set": {"a": 2}})
    assert totals(session.step()) == (1, 1)
    # A dotted path inside an indexed field, and the unset of its parent, touch it.
    col.update_one({"_id": 1}, {"$inc": {"nested.n": 1}})
    assert totals(session.step()) == (1, 0)  # nested.n is not nested.since
    col.update_one({"_id": 1, "nested.since": 1}, {"$unset": {"nested": ""}})
    assert totals(session.step()) == (1, 1)
    # A pipeline update touches what its $set names; a replacement touches every index.
    col.update_one({"_id": 1}, [{"$set": {"b": 5}}])
    assert totals(session.step()) == (1, 0)
    col.replace_one({"_id": 1, "nested": {"$exists": False}}, {"a": 3, "b": 1})
    assert totals(session.step()) == (1, 1)  # a; not the sparse one: out before and after
    col.update_one({"_id": 1}, {"$rename": {"b": "a"}})
    assert totals(session.step()) == (1, 1)
    # Matched but not modified: nothing written.
    col.update_one({"_id": 1}, {"$set": {"a": 1}})
    assert totals(session.step()) == (0, 0)
    col.update_one({"_id": 99}, {"$set": {"a": 5}})
    assert totals(session.step()) == (0, 0)


def test_partial_index_entered_and_left(session: Session) -> None:
    col = session.db.jobs
    col.create_index([("prio", -1)], partialFilterExpression={"state": "open"})
    col.create_index("lease", sparse=True)
    session.ready()

    col.insert_one({"_id": 1, "state": "open", "prio": 1})
    assert totals(session.step()) == (1, 2)  # _id + the partial index; no lease: not sparse
    col.insert_one({"_id": 2, "state": "done", "prio": 1})
    assert totals(session.step()) == (1, 1)  # _id only

    # Leaves the partial index (known from the query) and enters the sparse one.
    doc = col.find_one_and_update({"_id": 1, "state": "open"},
                                  {"$set": {"state": "running", "lease": "x"}},
                                  return_document=ReturnDocument.AFTER)
    assert doc is not None and doc["lease"] == "x"
    assert totals(session.step()) == (1, 2)
    # running -> done: in the partial index neither before nor after; leaves the sparse one.
    col.update_one({"_id": 1, "state": "running", "lease": "x"},
                   {"$set": {"state": "done"}, "$unset": {"lease": ""}})
    assert totals(session.step()) == (1, 1)
    # Enters the partial index.
    col.update_one({"_id": 2, "state": "done"}, {"$set": {"state": "open"}})
    assert totals(session.step()) == (1, 1)
    # The query proves it was out, the projected after-document that it stays out.
    col.find_one_and_update({"_id": 1, "state": "done"}, {"$set": {"state": "failed"}},
                            projection={"state": 1, "lease": 1},
                            return_document=ReturnDocument.AFTER)
    assert totals(session.step()) == (1, 0)
    # Not known before (the query says nothing of state): counted, as a touched field.
    col.update_one({"_id": 1}, {"$set": {"state": "paused"}})
    assert totals(session.step()) == (1, 1)
    # A pipeline's constants (bare or in $literal) are known after it, as $set's are:
    # paused -> held stays out of the partial index; the lease's $$NOW enters the sparse one.
    col.find_one_and_update({"_id": 1, "state": "paused"},
                            [{"$set": {"state": "held", "lease": "$$NOW"}}],
                            projection={"_id": 1}, return_document=ReturnDocument.AFTER)
    assert totals(session.step()) == (1, 1)
    col.update_one({"_id": 1, "state": "held"},
                   [{"$set": {"state": {"$literal": "done"}}}, {"$unset": "lease"}])
    assert totals(session.step()) == (1, 1)  # leaves the sparse one only

    col.delete_one({"_id": 2, "state": "open", "lease": {"$exists": False}})
    assert totals(session.step()) == (1, 2)  # _id + partial
    col.find_one_and_delete({"_id": 1})
    assert totals(session.step()) == (1, 1)  # the removed document is known: _id only
    col.delete_many({"state": "none"})
    assert totals(session.step()) == (0, 0)


def test_upserts_and_find_and_modify_outcomes(session: Session) -> None:
    col = session.db.keys
    col.create_index("created_at", expireAfterSeconds=600)
    session.ready()
    now = datetime.now(UTC)

    col.update_one({"_id": "k"}, {"$setOnInsert": {"created_at": now}}, upsert=True)
    assert totals(session.step()) == (1, 2)
    col.update_one({"_id": "k"}, {"$setOnInsert": {"created_at": now}}, upsert=True)
    assert totals(session.step()) == (0, 0)  # already there: nothing written
    col.replace_one({"_id": "r"}, {"x": 1}, upsert=True)
    assert totals(session.step()) == (1, 2)  # no created_at: still an entry (null) there
    assert col.find_one_and_update({"_id": "none"}, {"$set": {"x": 1}}) is None
    assert totals(session.step()) == (0, 0)
    col.find_one_and_update({"_id": "new"}, {"$set": {"created_at": now}}, upsert=True)
    assert totals(session.step()) == (1, 2)


def test_bulk_update_multiplies_by_the_modified_count(session: Session) -> None:
    col = session.db.acts
    col.create_index([("outbox.since", 1)], sparse=True)
    col.create_index("status")
    now = datetime.now(UTC)
    col.insert_many([{"_id": i, "status": "pending", "outbox": {"seq": 1, "since": now}}
                     for i in range(5)])
    session.ready()

    # Same shape of statement: exact, whatever the split.
    col.bulk_write([UpdateMany({"_id": {"$in": [0, 1, 2]}, "outbox.since": now},
                               {"$unset": {"outbox": ""}}),
                    UpdateMany({"_id": {"$in": [3, 4]}, "outbox.since": now},
                               {"$unset": {"outbox": ""}})], ordered=False)
    t = session.step()
    assert totals(t) == (5, 5) and t.approximations == 0
    # Different shapes: split by what each query allows (one estimate, here right).
    col.bulk_write([UpdateOne({"_id": 0}, {"$set": {"status": "done"}}),
                    UpdateMany({"_id": {"$in": [1, 2]}}, {"$set": {"note": "x"}})])
    t = session.step()
    assert totals(t) == (3, 1) and t.approximations == 1
    col.update_many({}, {"$set": {"status": "gone"}})
    assert totals(session.step()) == (5, 5)


def test_bytes_are_the_bson_sizes_of_commands_and_replies(session: Session) -> None:
    col = session.db.things
    session.ready()
    payload = "x" * 1000
    col.insert_one({"_id": uuid.uuid4(), "p": payload})
    t = session.step()
    assert t.commands == {"insert": 1}
    assert 1000 < t.bytes_sent < 1300
    assert 0 < t.bytes_received < 100
    assert col.find_one({}, {"p": 1}) is not None
    t = session.step()
    assert t.bytes_received > 1000 and t.bytes_sent < 200
    assert len(bson.encode({"p": payload})) < t.bytes_received


def test_collection_roles_and_commands_left_out(session: Session) -> None:
    col = session.db["runnerq_q1_dead_letter"]
    session.ready()
    session.client.admin.command("ping")
    col.insert_one({"_id": 1})  # a collection created by the write: its indexes are listed
    t = session.step()
    assert t.commands == {"insert": 1}
    assert dict(t.documents) == {"dead_letter": 1}
    assert dict(t.index_entries) == {"dead_letter": 1}
    assert wc.role_of("runnerq_my_queue_activities") == "activities"
    assert wc.role_of("other") == "other"


@pytest.mark.parametrize(("expr", "doc", "expected"), [
    ({"s": "a"}, {"s": "a"}, True),
    ({"s": "a"}, {"s": "b"}, False),
    ({"s": {"$exists": True}}, {}, False),
    ({"s": {"$exists": False}}, {}, True),
    ({"n": {"$gt": 1}}, {"n": 2}, True),
    ({"n": {"$gte": 2, "$lt": 3}}, {"n": 3}, False),
    ({"n": {"$lte": 1}}, {"n": "1"}, False),  # other type bracket
    ({"n": {"$lt": 5}}, {}, False),
    ({"s": {"$type": "string"}}, {"s": "a"}, True),
    ({"s": {"$type": ["int", "double"]}}, {"s": "a"}, False),
    ({"s": {"$in": ["a", "b"]}}, {"s": "b"}, True),
    ({"s": {"$in": ["a", None]}}, {}, True),  # null matches a missing field
    ({"$and": [{"s": "a"}, {"n": {"$gt": 0}}]}, {"s": "a", "n": 0}, False),
    ({"$or": [{"s": "a"}, {"n": {"$gt": 0}}]}, {"s": "z", "n": 1}, True),
    ({"o.since": {"$exists": True}}, {"o": {"since": 1}}, True),
])
def test_partial_filter_matcher(expr: dict[str, Any], doc: dict[str, Any],
                                expected: bool) -> None:
    assert wc.match(expr, wc.DocView(doc)) is expected


def test_matcher_says_unknown_when_it_cannot_tell() -> None:
    assert wc.match({"s": "a"}, wc.FactView({})) is None
    assert wc.match({"s": "a"}, wc.FactView({"s": wc.PRESENT})) is None
    assert wc.match({"$or": [{"s": "a"}, {"t": 1}]}, wc.FactView({"t": 1})) is True
    assert wc.match({"s": "a", "t": 1}, wc.FactView({"t": 2})) is False
