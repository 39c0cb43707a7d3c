"""RunnerQ's golden vectors (runnerq/runnerq-spec 0.8.0: `vectors/checkpoint_id.json`,
`step_key.json`, `business_key.json`, `application_key.json` at commit 2caf00d, and
`serialization/vectors/plain_json.json`), restated as our own data: what every SDK must
compute the same, so that a checkpoint, a spawned step's key or an idempotency key one
SDK wrote is found by another.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from runnerq_cli.backend.domain.checkpoints import checkpoint_id, step_key
from runnerq_cli.backend.domain.interop import (
    application_key,
    business_key,
    plain_json,
    split_business_key,
)

A = "6ba7b810-9dad-11d1-80b4-00c04fd430c8"
B = "0192f3a4-5b6c-7d8e-9f01-23456789abcd"
C = "3f2b8c1e-7a4d-4e9b-8c6f-1d2e3f4a5b6c"

# (activity id, kind, name) -> checkpoint id: UUIDv5 in the activity's namespace of
# "kind:name"; the activity id may come in either case.
CHECKPOINT_IDS = [
    (A, "run", "charge", "020e4a37-85b6-5ee4-a6c6-ce49b8c3fad7"),
    (A, "sleep", "cool-off", "ce237805-0333-5a9c-a595-2327739f1f3e"),
    (B, "signal", "approve", "fe34f2c1-1ffc-5206-a431-a5834d712b9e"),
    (B, "run", "café ☕", "602d2915-e184-5e7e-b8c3-77118252055d"),
    (C, "run", "step 1: fetch", "76f57bdf-db0b-5898-bbff-037ae57b1a58"),
    (A.upper(), "run", "charge", "020e4a37-85b6-5ee4-a6c6-ce49b8c3fad7"),
]


@pytest.mark.parametrize(("activity", "kind", "name", "expected"), CHECKPOINT_IDS)
def test_checkpoint_id(activity: str, kind: str, name: str, expected: str) -> None:
    assert str(checkpoint_id(uuid.UUID(activity), kind, name)) == expected


# (root, parent, step) -> the idempotency key of the child a step spawns.
STEP_KEYS = [
    (A, A, "charge", f"rq:step:{A}:{A}:charge"),
    (A, B, "notify", f"rq:step:{A}:{B}:notify"),
    (C, B, "send: café", f"rq:step:{C}:{B}:send: café"),
]


@pytest.mark.parametrize(("root", "parent", "step", "expected"), STEP_KEYS)
def test_step_key(root: str, parent: str, step: str, expected: str) -> None:
    assert step_key(uuid.UUID(root), uuid.UUID(parent), step) == expected
    # Ids are written lowercase whatever case they came in.
    assert step_key(uuid.UUID(root.upper()), uuid.UUID(parent.upper()), step) == expected


# (key, activity type) -> the encoded business key: the length prefix counts UTF-8
# bytes, base64 is standard and never padded.
BUSINESS_KEYS = [
    ("order-42", "Charge", "rq:key:v2:ODpvcmRlci00MkNoYXJnZQ"),
    ("é", "Charge", "rq:key:v2:MjrDqUNoYXJnZQ"),
    ("a-b", "c", "rq:key:v2:MzphLWJj"),
    ("a", "b-c", "rq:key:v2:MTphYi1j"),
    ("12:34", "T", "rq:key:v2:NToxMjozNFQ"),
    ("🙂", "Emoji", "rq:key:v2:NDrwn5mCRW1vamk"),
    ("  padded  ", "SendEmail_v2", "rq:key:v2:MTA6ICBwYWRkZWQgIFNlbmRFbWFpbF92Mg"),
    ("x", "Ab", "rq:key:v2:MTp4QWI"),
]


@pytest.mark.parametrize(("key", "activity_type", "expected"), BUSINESS_KEYS)
def test_business_key_and_back(key: str, activity_type: str, expected: str) -> None:
    assert business_key(key, activity_type) == expected
    assert split_business_key(expected) == (key, activity_type)


@pytest.mark.parametrize("stored", ["rq:key:v2:MjrDqUNoYXJnZQ==", "rq:key:v2:!!!",
                                    "rq:key:v2:OTk6YWJj", "order-42", "rq:key:v2:"])
def test_what_is_no_business_key(stored: str) -> None:
    """Padded, not base64, a length past the end, no prefix, nothing encoded."""
    assert split_business_key(stored) is None


# (stored key, activity type) -> the key the application set.
APPLICATION_KEYS = [
    ("rq:key:v2:ODpvcmRlci00MkNoYXJnZQ", "Charge", "order-42"),
    ("rq:key:v2:ODpvcmRlci00MkNoYXJnZQ", "Refund", "rq:key:v2:ODpvcmRlci00MkNoYXJnZQ"),
    ("rq:key:v2:MjrDqUNoYXJnZQ", "Charge", "é"),
    ("rq:key:v2:MjrDqUNoYXJnZQ==", "Charge", "rq:key:v2:MjrDqUNoYXJnZQ=="),
    ("rq:key:v2:!!!", "Charge", "rq:key:v2:!!!"),
    ("rq:key:v2:OTk6YWJj", "", "rq:key:v2:OTk6YWJj"),
    ("order-42-Charge", "Charge", "order-42"),
    ("a-b-c-Charge", "Charge", "a-b-c"),
    ("-Charge", "Charge", "-Charge"),
    ("order42Charge", "Charge", "order42Charge"),
    ("external-key", "Charge", "external-key"),
    (f"rq:step:{A}:{B}:charge", "Charge", ""),
    ("", "Charge", ""),
]


@pytest.mark.parametrize(("stored", "activity_type", "expected"), APPLICATION_KEYS)
def test_application_key(stored: str, activity_type: str, expected: str) -> None:
    assert application_key(stored, activity_type) == expected


# (serialization, stored data) -> the plain JSON it shows outside its SDK.
PLAIN_JSON: list[tuple[str, Any, Any]] = [
    ("json-v1", {"a": 1, "json": 2}, {"a": 1, "json": 2}),
    ("", [1, "two", None], [1, "two", None]),
    ("superjson-v1", {"json": {"a": 1}}, {"a": 1}),
    ("superjson-v1", {"json": {"at": "2026-10-02T00:00:00.000Z"},
                      "meta": {"values": {"at": ["Date"]}}}, {"at": "2026-10-02T00:00:00.000Z"}),
    ("superjson-v1", {"json": {"n": "9007199254740993"}, "meta": {"values": {"n": ["bigint"]}}},
     {"n": "9007199254740993"}),
    ("superjson-v1", {"json": [1, 2], "meta": {"values": ["set"]}}, [1, 2]),
    ("superjson-v1", {"json": [["a", 1]], "meta": {"values": ["map"]}}, [["a", 1]]),
    ("superjson-v1", {"json": "text"}, "text"),
    ("superjson-v1", {"json": None}, None),
    ("superjson-v1", [1, 2], [1, 2]),
    ("superjson-v1", {"a": 1}, {"a": 1}),
]


@pytest.mark.parametrize(("serialization", "data", "expected"), PLAIN_JSON)
def test_plain_json(serialization: str, data: Any, expected: Any) -> None:
    assert plain_json(serialization, data) == expected
