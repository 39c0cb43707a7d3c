"""Several updates in one `update` command, without the driver's bulk machinery.

A worker acknowledges a few activities at a time: two commands of a few small
updates each. pymongo's `bulk_write` spends more client CPU per command than
the updates it carries (benchmarks/README.md: about 480 Python calls per
command, against 375 for the same `update` command sent as it is), and the
acknowledgement is on every activity's path. `update_statements` sends the
command a bulk write would send, with the collection's codec options and
write concern, and answers what a bulk write reports: documents matched and
the write errors by statement index.

Size: a command is one BSON document (16 MiB at most) and a result may
weigh 8 MiB. A batch the driver finds too large to send (it says so before
sending anything) goes in halves, as many times as needed, as a bulk write
splits its batches; a batch of small acknowledgements is one command.

Retries: the driver retries a bulk write once after a retryable error (a
network error, a primary stepping down), under one transaction number so it
applies once. It does not retry a plain command, so `update_statements`
retries once itself. Use it only for fenced updates, which a second
application leaves as the first did (queue.py tells a repeated
acknowledgement from a lost claim).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pymongo.collection import Collection
from pymongo.errors import AutoReconnect, DocumentTooLarge, ServerSelectionTimeoutError

from runnerq_cli.backend.store import driver
from runnerq_cli.backend.store.connection import ConnectionInterrupted
from runnerq_cli.errors import TooLarge, WriteUnconfirmed

Statement = tuple[Mapping[str, Any], Mapping[str, Any], bool]  # filter, update, upsert
# The queue's collections (driver.py) or a plain pymongo one (tests, tools)
AnyCollection = Collection[Any] | driver.Collection


def update_statements(collection: AnyCollection, statements: Sequence[Statement],
                      ) -> tuple[int, list[dict[str, Any]]]:
    """Apply unordered updates, in one command unless their size needs more: (documents
    matched, write errors by statement index).

    Raises `WriteUnconfirmed` when the server applied the updates but could
    not confirm the write concern (the caller may repeat them, as after a
    network error).
    """
    return _update_in_parts(collection, [{"q": query, "u": update, "upsert": upsert}
                                         for query, update, upsert in statements], 0)


def update_many_statements(collection: AnyCollection,
                           statements: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]],
                           ) -> int:
    """Several multi-document updates in one `update` command: documents changed. For
    idempotent updates only (the command is retried once, as `update_statements`)."""
    updates = [{"q": query, "u": update, "multi": True} for query, update in statements]
    return _update_in_parts(collection, updates, 0)[0]


def _update_in_parts(collection: AnyCollection, updates: list[dict[str, Any]], offset: int,
                     ) -> tuple[int, list[dict[str, Any]]]:
    """One command, or halves of it when the driver finds it too large to send."""
    try:
        matched, errors = _update(collection, updates)
    except (DocumentTooLarge, TooLarge):  # raised before anything is sent (TooLarge: the
        # same, through driver.py; DocumentTooLarge: a plain pymongo collection)
        if len(updates) == 1:
            raise
        half = len(updates) // 2
        first = _update_in_parts(collection, updates[:half], offset)
        second = _update_in_parts(collection, updates[half:], offset + half)
        return first[0] + second[0], first[1] + second[1]
    return matched, [{**error, "index": error["index"] + offset} for error in errors]


def _update(collection: AnyCollection, updates: list[dict[str, Any]],
            ) -> tuple[int, list[dict[str, Any]]]:
    command: dict[str, Any] = {"update": collection.name, "ordered": False, "updates": updates}
    concern = collection.write_concern
    if not concern.is_server_default:
        command["writeConcern"] = concern.document
    try:
        reply = _run(collection, command)
    except ServerSelectionTimeoutError:
        raise  # no server to retry on: it waited for one already
    except (AutoReconnect, ConnectionInterrupted):  # a network error or a stepdown: once
        # more, as the driver would (ConnectionInterrupted: the same, through driver.py)
        reply = _run(collection, command)
    if "writeConcernError" in reply:
        error = reply["writeConcernError"]
        raise WriteUnconfirmed(
            f"the write concern was not confirmed: {error.get('errmsg', 'no reason given')}",
            dict(reply))
    errors = list(reply.get("writeErrors", ()))
    if errors:  # (failures.py: loaded only then)
        from runnerq_cli.backend.store.failures import interrupted

        if (later := interrupted(errors)) is not None:
            raise later  # not a refusal: the whole batch again later (INTERRUPTED_CODES)
    return reply.get("n", 0) - len(reply.get("upserted", ())), errors


def _run(collection: AnyCollection, command: dict[str, Any]) -> Mapping[str, Any]:
    return collection.database.command(command, codec_options=collection.codec_options)
