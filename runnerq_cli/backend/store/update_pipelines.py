"""An update holding server-time markers as an update pipeline (MongoDB 4.2+): each
marked time computed from `$$NOW` as the write lands, every other value exactly as
written (servertime.py says why the times written are the server's).

servertime.server_update sends an update as it is, or with `$currentDate`, whenever it
can; it loads this module only for an update that needs a pipeline (a delay, a lease
deadline, a back-off), so a plain enqueue does not compile it (benchmarks/
bench_cli_startup.py, uncached byte-code; tests/test_import_cost.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from bson import Decimal128, ObjectId

from runnerq_cli.backend.domain.write_times import ServerTime, has_server_times


def pipeline(update: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The update operators of `update` as an update pipeline (MongoDB 4.2+): `$set`,
    `$setOnInsert` (only under a guard no stored document matches: writes.stamped_inserts),
    `$currentDate`, `$inc`, `$min`, `$max`, `$push` (with `$each`), `$unset`.

    Every stage reads the document as it was before the update, like the operators."""
    fields: dict[str, Any] = {}
    unset: list[str] = []
    for op, spec in update.items():
        for path, value in spec.items():
            here = f"${path}"
            if op in ("$set", "$setOnInsert"):
                fields[path] = replacing(expression(value))
            elif op == "$currentDate":
                fields[path] = "$$NOW"
            elif op == "$inc":
                fields[path] = {"$add": [{"$ifNull": [here, 0]}, expression(value)]}
            elif op in ("$min", "$max"):  # both ignore a missing or null field
                fields[path] = {op: [here, expression(value)]}
            elif op == "$push":
                each = value["$each"] if isinstance(value, Mapping) and "$each" in value \
                    else [value]
                fields[path] = {"$concatArrays": [{"$ifNull": [here, []]},
                                                  [expression(v) for v in each]]}
            elif op == "$unset":
                unset.append(path)
            else:
                raise ValueError(f"no pipeline form for the update operator {op}")
    stages: list[dict[str, Any]] = [{"$set": fields}] if fields else []
    if unset:
        stages.append({"$unset": unset})
    return stages


def replacing(expr: Any) -> Any:
    """`expr` as the value of a `$set` stage's field that replaces what is stored there.

    At the top of a `$set` stage a plain document (no operator key) is a nested field
    spec, not a value: MongoDB merges it into the stored document (stale fields of an
    earlier `outbox.result` would survive) and applies it to each element of a stored
    array. `$mergeObjects` of that one document is an expression whose value is the
    document itself, which replaces the field whole. (The dev server replaces either
    way; tests/test_clock_skew.py checks the form, and on MongoDB the outcome.)"""
    if isinstance(expr, dict) and not any(key.startswith("$") for key in expr):
        return {"$mergeObjects": [expr]}
    return expr


def expression(value: Any) -> Any:
    """`value` as an aggregation expression: a marker's time from `$$NOW`, documents and
    lists that hold markers field by field (their keys are ours: event and outbox fields),
    and everything else exactly as written: bare if it reads as itself, else in
    `$literal`."""
    if isinstance(value, ServerTime):
        return value.expression()
    if isinstance(value, Mapping) and has_server_times(value):
        return {key: expression(v) for key, v in value.items()}
    if isinstance(value, list | tuple) and has_server_times(value):
        return [expression(v) for v in value]
    return value if reads_as_written(value) else {"$literal": value}


# Values an aggregation expression evaluates to themselves, whatever they hold.
_CONSTANTS = (type(None), bool, int, float, datetime, uuid.UUID, bytes, ObjectId, Decimal128)


def reads_as_written(value: Any) -> bool:
    """Whether `value`, bare in a pipeline, is stored exactly as written: null, a boolean,
    a number, a date, a UUID, binary, an ObjectId, a string that does not start with "$"
    (that is a field path, or a variable with "$$"), or a list of those. Never a
    document: its `$` keys would be operators, and in a `$set` stage a document is a
    nested field spec, merged into the stored document instead of replacing it. Any
    other type is wrapped too (what the server makes of it is not this module's to
    guess)."""
    if isinstance(value, str):
        return not value.startswith("$")
    if isinstance(value, list | tuple):
        return all(reads_as_written(item) for item in value)
    return isinstance(value, _CONSTANTS)
