"""Several updates in one `update` command, without the driver's bulk machinery.

A worker acknowledges a few activities at a time: two commands of a few small
updates each. pymongo's `bulk_write` spends more client CPU per command than
the updates it carries (benchmarks/README.md: about 480 Python calls per
command, against 375 for the same `update` command sent as it is), and the
acknowledgement is on every activity's path. `update_statements` sends the
command a bulk write would send, with the collection's codec options and
write concern, and answers what a bulk write reports: documents matched and
the write errors by statement index.

Size: a command is one BSON document (16 MiB at most), and a result may
weigh 8 MiB, so statements go in as many commands as their size needs (as
a bulk write splits its batches); a batch of small acknowledgements is one.

Retries: the driver retries a bulk write once after a retryable error (a
network error, a primary stepping down), under one transaction number so it
applies once. It does not retry a plain command, so `update_statements`
retries once itself. Use it only for fenced updates, which a second
application leaves as the first did (queue.py tells a repeated
acknowledgement from a lost claim).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import bson
from pymongo.collection import Collection
from pymongo.errors import AutoReconnect, ServerSelectionTimeoutError, WriteConcernError

Statement = tuple[Mapping[str, Any], Mapping[str, Any], bool]  # filter, update, upsert
# Statements per command: their BSON size (a command must stay under the server's 16 MiB
# document limit, one statement may carry an 8 MiB result) and count.
COMMAND_BYTES = 12 * 1024 * 1024
COMMAND_STATEMENTS = 1000


def update_statements(collection: Collection[Any], statements: Sequence[Statement],
                      ) -> tuple[int, list[dict[str, Any]]]:
    """Apply unordered updates, in one command unless their size needs more: (documents
    matched, write errors by statement index).

    Raises `WriteConcernError` when the server applied the updates but could
    not confirm the write concern (the caller may repeat them, as after a
    network error).
    """
    matched = 0
    errors: list[dict[str, Any]] = []
    for offset, chunk in _chunks(collection, statements):
        n, chunk_errors = _update(collection, chunk)
        matched += n
        errors += [{**error, "index": error["index"] + offset} for error in chunk_errors]
    return matched, errors


def _chunks(collection: Collection[Any], statements: Sequence[Statement],
            ) -> Iterator[tuple[int, list[dict[str, Any]]]]:
    """The statements as update documents, in chunks that fit one command each."""
    options = collection.codec_options
    chunk: list[dict[str, Any]] = []
    start = size = 0
    for index, (query, update, upsert) in enumerate(statements):
        doc = {"q": query, "u": update, "upsert": upsert}
        weight = len(bson.encode(doc, codec_options=options)) if len(statements) > 1 else 0
        if chunk and (size + weight > COMMAND_BYTES or len(chunk) >= COMMAND_STATEMENTS):
            yield start, chunk
            chunk, start, size = [], index, 0
        chunk.append(doc)
        size += weight
    if chunk:
        yield start, chunk


def _update(collection: Collection[Any], updates: list[dict[str, Any]],
            ) -> tuple[int, list[dict[str, Any]]]:
    command: dict[str, Any] = {"update": collection.name, "ordered": False, "updates": updates}
    concern = collection.write_concern
    if not concern.is_server_default:
        command["writeConcern"] = concern.document
    try:
        reply = _run(collection, command)
    except ServerSelectionTimeoutError:
        raise  # no server to retry on: it waited for one already
    except AutoReconnect:  # a network error or a stepdown: once more, as the driver would
        reply = _run(collection, command)
    if "writeConcernError" in reply:
        error = reply["writeConcernError"]
        raise WriteConcernError(error.get("errmsg", "write concern error"), error.get("code"),
                                reply)
    return (reply.get("n", 0) - len(reply.get("upserted", ())),
            list(reply.get("writeErrors", ())))


def _run(collection: Collection[Any], command: dict[str, Any]) -> Mapping[str, Any]:
    return collection.database.command(command, codec_options=collection.codec_options)
