"""Several updates in one `update` command, without the driver's bulk machinery.

A worker acknowledges a few activities at a time: two commands of a few small
updates each. pymongo's `bulk_write` spends more client CPU per command than
the updates it carries (benchmarks/README.md: about 480 Python calls per
command, against 375 for the same `update` command sent as it is), and the
acknowledgement is on every activity's path. `update_statements` sends the
command a bulk write would send, with the collection's codec options and
write concern, and answers what a bulk write reports: documents matched and
the write errors by statement index.

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
from pymongo.errors import AutoReconnect, ServerSelectionTimeoutError, WriteConcernError

Statement = tuple[Mapping[str, Any], Mapping[str, Any], bool]  # filter, update, upsert


def update_statements(collection: Collection[Any], statements: Sequence[Statement],
                      ) -> tuple[int, list[dict[str, Any]]]:
    """Apply unordered updates in one command: (documents matched, write errors by index).

    Raises `WriteConcernError` when the server applied the updates but could
    not confirm the write concern (the caller may repeat them, as after a
    network error).
    """
    command: dict[str, Any] = {
        "update": collection.name, "ordered": False,
        "updates": [{"q": query, "u": update, "upsert": upsert}
                    for query, update, upsert in statements]}
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
    matched = reply.get("n", 0) - len(reply.get("upserted", ()))
    return matched, list(reply.get("writeErrors", ()))


def _run(collection: Collection[Any], command: dict[str, Any]) -> Mapping[str, Any]:
    return collection.database.command(command, codec_options=collection.codec_options)
