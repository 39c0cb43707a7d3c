"""Partitions (docs/design.md, "Partitions"): the pure rules, no server.

A partitioned queue stores a `partition` (0..N-1) in every activity, part of the
shard key `{partition: 1, _id: 1}`, so a claim or an acknowledgement that names its
partition goes to one shard. This module holds what every writer must compute the
same way (a client in another language too): the partition of a keyed activity,
the term a targeted filter carries, the stored count's shape, and the rotation a
claimer follows so that no partition is starved.

A queue of one partition is today's queue: every function here then answers
"no partition" (None, an empty term), and nothing about it reaches the wire.
"""

from __future__ import annotations

import hashlib
import random
import threading
from typing import Any, TypeGuard

from runnerq_cli.backend.domain.models import MalformedDocument

PARTITIONS_ID = "partitions"  # the control document holding the count
FIELD = "partition"
MAX_PARTITIONS = 256
PARTITIONS_REFRESH = 30.0  # seconds a reader keeps the count it read
SHARD_KEY: tuple[tuple[str, int], ...] = ((FIELD, 1), ("_id", 1))


def of_key(activity_type: str, key: str, count: int) -> int:
    """The partition of an activity enqueued with idempotency key `key`: every activity
    of one key lands in one partition while the count stays (docs/design.md)."""
    digest = hashlib.sha256(activity_type.encode("utf-8", "surrogatepass") + b"\x00"
                            + key.encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") % count


def term(partition: Any) -> dict[str, Any]:
    """The filter term that targets `partition` (a document's value as read, or the
    partition chosen): `{}` for none, so a one-partition queue's filters are unchanged."""
    return {} if partition is None else {FIELD: partition}


def term_of(doc: dict[str, Any] | None) -> dict[str, Any]:
    """The term of a stored document: its `partition` as it is (whatever its type: a
    fence must match the document as read), nothing when it has none."""
    if doc is None or FIELD not in doc:
        return {}
    return {FIELD: doc[FIELD]}


def stored_int(value: Any) -> TypeGuard[int]:
    """A BSON int32 or int64 as pymongo decodes it (`int`, or `Int64`, a subclass of it),
    never a boolean or a double: what "an int" means for the stored count and
    partition. A 64-bit integer is what a program in Go (int64), Java (long) or Node.js
    (Long) writes."""
    return isinstance(value, int) and not isinstance(value, bool)


def count_of(doc: dict[str, Any] | None) -> int:
    """The count a control document stores (1 without one); MalformedDocument for one
    that is no int from 1 to MAX_PARTITIONS: guessing would put activities where no
    worker looks."""
    if doc is None:
        return 1
    count = doc.get("count")
    if not stored_int(count) or not 1 <= count <= MAX_PARTITIONS:
        raise MalformedDocument(
            f"control document {PARTITIONS_ID!r}: count is {count!r}, not an int from 1 "
            f"to {MAX_PARTITIONS}; fix it with init-indexes --partitions N")
    return int(count)


def check_count(count: int) -> int:
    """A count asked for (init-indexes --partitions): ValueError when out of bounds."""
    if type(count) is not int or not 1 <= count <= MAX_PARTITIONS:
        from runnerq_cli.values import shown  # a 4000-digit count is not printed whole

        raise ValueError(f"partitions must be a whole number from 1 to {MAX_PARTITIONS}, "
                         f"got {shown(count)}")
    return count


class Rotation:
    """Where a claimer looks next: a cursor over 0..N-1 starting at a random partition,
    moved on by one at every claim, found or not (docs/design.md, "How a worker spreads
    over partitions"). Every partition is tried at least once in N claims: none is
    starved however busy the others are. Thread-safe (a worker's slots share it)."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()
        self._next: int | None = None
        self._lock = threading.Lock()

    def take(self, count: int) -> int:
        """The partition to try now (of `count`); the cursor moves on."""
        with self._lock:
            if self._next is None:
                self._next = self._rng.randrange(count)
            current = self._next % count
            self._next = current + 1
            return current


class RoundRobin(Rotation):
    """Where an unkeyed activity goes: the same cursor, for an enqueuer."""
