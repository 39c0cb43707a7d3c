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
