"""The dev server matches `$in` of ids by a hashed look-up (cli/devserver.py, _hashed_in),
and matches exactly what it matched before: the same documents for every kind of
candidate (UUIDs, ObjectIds, arrays of them, other kinds, a missing field), in finds,
counts, updates and `$nin`. Its speed is the benchmark's (benchmarks/README.md)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from bson import ObjectId
from pymongo import MongoClient

pytest.importorskip("mongoeco")

from runnerq_cli.cli.devserver import start_in_thread


@pytest.fixture(scope="module")
def collection() -> Iterator[Any]:
    server = start_in_thread()
    client: MongoClient[dict[str, Any]] = MongoClient(
        server.uri, uuidRepresentation="standard", connectTimeoutMS=60000,
        socketTimeoutMS=60000)
    try:
        yield client["in_test"]["docs"]
    finally:
        client.close()
        server.stop()


IDS = [uuid.uuid4() for _ in range(40)]
OIDS = [ObjectId() for _ in range(40)]


def test_in_matches_the_documents_it_should(collection: Any) -> None:
    from mongoeco.core import compiled_query

    assert getattr(compiled_query.CompiledQuery._node_to_code, "hashed_in", False)
    docs = [{"_id": aid, "n": n, "o": OIDS[n], "pair": [IDS[(n + 1) % 40], "x"]}
            for n, aid in enumerate(IDS)]
    docs += [{"_id": "text", "n": 40, "o": "not an id"}, {"_id": 7, "n": 41}]
    collection.insert_many(docs)

    def found(query: dict[str, Any]) -> list[int]:
        return sorted(d["n"] for d in collection.find(query, {"n": 1}))

    assert found({"_id": {"$in": IDS[:10]}}) == list(range(10))
    assert found({"_id": {"$in": [*IDS[30:], uuid.uuid4()]}}) == list(range(30, 40))
    assert found({"o": {"$in": OIDS[5:8]}}) == [5, 6, 7]
    assert found({"pair": {"$in": IDS[1:3]}}) == [0, 1]  # an array's elements
    assert found({"missing": {"$in": IDS}}) == []
    assert found({"_id": {"$in": [IDS[3], "text", 7]}}) == [3, 40, 41]  # kinds mixed
    assert found({"_id": {"$nin": IDS[2:]}}) == [0, 1, 40, 41]
    assert collection.count_documents({"_id": {"$in": IDS[:25]}, "n": {"$gte": 20}}) == 5
    updated = collection.update_many({"_id": {"$in": IDS[10:20]}}, {"$set": {"seen": True}})
    assert updated.modified_count == 10
    assert found({"seen": True}) == list(range(10, 20))


def test_ids_are_looked_up_by_key_with_the_same_answers(collection: Any) -> None:
    """_ids_by_key: a filter naming an `_id` the collection lacks finds nothing at once,
    and an insert's duplicate check by key still refuses every repeated id of the kinds
    it settles (a number is still checked by value: 1 and 1.0 are one `_id`)."""
    from mongoeco.engines.memory import MemoryEngine
    from pymongo.errors import BulkWriteError, DuplicateKeyError

    assert getattr(MemoryEngine._candidate_items_for_plan_locked, "ids_by_key", False)
    kept = collection.database["by_key"]
    oid, uid = ObjectId(), uuid.uuid4()
    kept.insert_many([{"_id": oid, "n": 1}, {"_id": uid, "n": 2}, {"_id": "t", "n": 3},
                      {"_id": 1, "n": 4}])
    for existing in (oid, uid, "t", 1.0):  # 1.0 is the stored 1
        with pytest.raises(DuplicateKeyError):
            kept.insert_one({"_id": existing})
    with pytest.raises(BulkWriteError):
        kept.insert_many([{"_id": ObjectId()}, {"_id": uid}])
    assert kept.find_one({"_id": ObjectId()}) is None
    assert kept.find_one({"_id": "T"}) is None  # texts compare exactly
    assert kept.find_one({"_id": "t", "n": 3})["n"] == 3
    assert kept.find_one({"_id": 1.0})["n"] == 4
    # A stamped insert: an upsert naming a new `_id` inserts once, its repeat matches.
    fresh = ObjectId()
    first = kept.update_one({"_id": fresh, "at": None}, {"$setOnInsert": {"n": 5}},
                            upsert=True)
    assert first.upserted_id == fresh
    again = kept.update_one({"_id": fresh, "n": 5}, {"$set": {"seen": True}}, upsert=True)
    assert again.matched_count == 1 and again.upserted_id is None
    assert kept.count_documents({}) == 6  # 4 + one of the bulk insert's + the upsert
