"""Inserts stamped at the write: the time a reader orders by (`created_at` of an activity,
`ingested_at` of an event) is the server's as it applies the write (`$currentDate`),
never the client's, so a stalled writer or a host whose clock is off cannot put a
document behind a tail's window (docs/design.md, "Following events"). A backend built
with a clock of its own (tests, simulations) stamps with that clock instead.

Each insert is a guarded upsert (`{_id, FIELD: null}`, `$setOnInsert`): a replay after a
network error collides on `_id` and changes nothing. Used by the enqueue (activities),
the outbox writer (writes.py: events) and the audit trail; apart from the outbox so that
a command that only enqueues does not load the outbox writer (tests/test_import_cost.py).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from runnerq_cli.backend.domain.partitions import term_of
from runnerq_cli.backend.store.driver import Collection
from runnerq_cli.backend.store.servertime import When, server_stamps, server_update
from runnerq_cli.backend.store.statements import Statement, update_statements

# Documents per stamped-insert command: the server stamps one command's documents with
# one time and they become visible when it ends, so a command must stay well within a
# tail's settle window (5 s) even on a slow server. 250 upserts take a real server a few
# milliseconds and the dev server about 0.5 s, whatever the collection's size; a bulk
# batch of 500 copies its events in 2 commands (benchmarks/README.md, "Bulk work").
INSERT_CHUNK = 250


def stamp(clock: Callable[[], datetime], now: When, *fields: str) -> dict[str, Any]:
    """Update operators that set `fields` to the time of the write: the server's
    (`$currentDate`), or `now` of a clock of the caller's own."""
    if server_stamps(clock):
        return {"$currentDate": dict.fromkeys(fields, True)}
    return {"$set": dict.fromkeys(fields, now)}


def insert_stamped(collection: Collection, doc: dict[str, Any], field: str,
                   clock: Callable[[], datetime], now: When) -> None:
    """`stamped_inserts` of one document (without `field`), raising its refusal
    (WriteRefused)."""
    errors = stamped_inserts(collection, [doc], field, clock, now)
    if errors:
        from runnerq_cli.backend.store.failures import refused

        raise refused([errors[0]])


def stamped_inserts(collection: Collection, docs: list[dict[str, Any]], field: str,
                    clock: Callable[[], datetime], now: When,
                    ) -> dict[int, dict[str, Any]]:
    """Insert `docs` (each with its `_id`) with `field` stamped at the write (see `stamp`;
    a document that carries `field` keeps it), in commands of at most INSERT_CHUNK.

    A document already there (a repeat of this insert, after a network error) collides
    on `_id` and is left as it is: it counts as inserted. Returns the other write errors
    by the index in `docs`. A document holding times the server computes (a delay's
    `scheduled_at`: servertime.ServerTime) is inserted by an update pipeline, its
    values in `$literal` where they could be read as expressions (update_pipelines.py;
    the guard matches no stored document, so `$setOnInsert`'s
    "only on insert" still holds).
    """
    errors: dict[int, dict[str, Any]] = {}
    for offset in range(0, len(docs), INSERT_CHUNK):
        chunk = docs[offset:offset + INSERT_CHUNK]
        statements: list[Statement] = []
        for doc in chunk:
            # Never matches a document we wrote; the insert takes `_id` (and a partitioned
            # queue's `partition`: the whole shard key, which a sharded upsert must carry,
            # docs/design.md "Partitions") from the guard: not sent twice.
            target = {"_id": doc["_id"], **term_of(doc)}
            guard = {**target, field: None}
            if doc.get(field) is not None:
                statements.append((guard, server_update({"$setOnInsert": {
                    k: v for k, v in doc.items() if k not in target}}), True))
            else:
                fields = {k: v for k, v in doc.items() if k not in guard}
                when = stamp(clock, now, field)
                update = {"$setOnInsert": {**fields, **when.get("$set", {})}}
                if "$currentDate" in when:
                    update["$currentDate"] = when["$currentDate"]
                statements.append((guard, server_update(update), True))
        refusals = update_statements(collection, statements)[1]
        if refusals:  # (failures.py: loaded only then)
            from runnerq_cli.backend.store.failures import DUPLICATE_KEY

            for error in refusals:
                if error.get("code") != DUPLICATE_KEY:
                    errors[offset + error["index"]] = error
    return errors
