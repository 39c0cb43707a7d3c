"""Keyset (cursor) pagination of activities by status.

A page ends with an opaque cursor holding the sort key and `_id` of its last
item; the next page asks for what sorts strictly after it. Unlike offsets,
this neither skips nor repeats an item when activities are added (or leave
the status) while someone pages: a new activity sorts either before the
cursor (not shown, it was not there when that part was read) or after it
(shown once). `_id` breaks ties, so equal sort keys are never split wrongly.

Each order (queries.LIST_ORDERS) is served by a partial index holding `_id` after the
sort keys (indexes.py), so a page costs an index seek plus `limit` documents, at any depth.
"""

from __future__ import annotations

import base64
import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from runnerq_cli import values as values_mod
from runnerq_cli.backend.domain.documents import Activity
from runnerq_cli.backend.domain.filters import check_error_contains, error_contains_clause
from runnerq_cli.backend.domain.models import Status, check_metadata_key, parse_metadata_pairs
from runnerq_cli.backend.domain.queries import LIST_ORDERS, status_query
from runnerq_cli.errors import InvalidArgument

# status -> (sort fields with direction, field `--since` applies to)
ORDERS = LIST_ORDERS
__all__ = ["ORDERS", "ListFilter", "Page", "status_query"]
MAX_LIMIT = 1000


@dataclass(frozen=True)
class Page:
    items: list[Activity]
    next_cursor: str | None  # None: this was the last page
    skipped: int = 0  # malformed documents left out of `items` (shapes.py)


@dataclass(frozen=True)
class ListFilter:
    activity_type: str | None = None
    since: datetime | None = None
    metadata: tuple[tuple[str, str], ...] = ()
    error_contains: str | None = None  # last_error contains this text (filters.py)
    key: str | None = None  # the flow key (docs/design.md, "Keys"): the keyed index serves it

    def __post_init__(self) -> None:
        from runnerq_cli import filter_values
        from runnerq_cli.backend.domain.specs import flow_key

        filter_values.filter_term(self.activity_type, "activity_type")
        check_error_contains(self.error_contains)
        if self.key is not None:
            flow_key(self.key)

    def query(self, status: Status) -> dict[str, Any]:
        """Only equality and range on fixed field names: user text is never an operator."""
        query: dict[str, Any] = status_query(status)
        if self.activity_type:
            query["activity_type"] = str(self.activity_type)
        if self.since is not None:
            query[ORDERS[status][1]] = {"$gte": self.since}
        for key, value in self.metadata:
            check_metadata_key(key)
            query[f"metadata.{key}"] = str(value)
        if self.error_contains is not None:
            query["last_error"] = error_contains_clause(self.error_contains)
        if self.key is not None:
            query["flow_key"] = str(self.key)
        return query


def parse_metadata(pairs: list[str] | tuple[str, ...],
                   option: str = "metadata") -> tuple[tuple[str, str], ...]:
    """`KEY=VALUE` metadata filters, by the same key rule as enqueue (errors name `option`)."""
    return tuple(parse_metadata_pairs(pairs, option).items())


def _dump(value: Any) -> Any:
    if isinstance(value, datetime):
        return {"d": value.isoformat()}
    if isinstance(value, uuid.UUID):
        return {"u": str(value)}
    return value


def _load(value: Any) -> Any:
    if isinstance(value, dict) and "d" in value:
        return datetime.fromisoformat(value["d"])
    if isinstance(value, dict) and "u" in value:
        return uuid.UUID(value["u"])
    if isinstance(value, int) and not isinstance(value, bool):
        return values_mod.integer(value, "cursor value")  # BSON holds 64 bits
    if isinstance(value, str | float) or value is None:
        return value
    raise ValueError("bad value")


def encode_cursor(status: Status, values: list[Any]) -> str:
    raw = json.dumps({"s": status.value, "k": [_dump(v) for v in values]},
                     separators=(",", ":")).encode()
    return "pc" + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(text: str, status: Status) -> list[Any]:
    value = text.strip()
    try:
        if not value.startswith("pc"):
            raise ValueError("prefix")
        body = value[2:]
        if len(body) > 4096:
            raise ValueError("length")
        data = values_mod.json_value(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)),
                                     "cursor")
        values = [_load(v) for v in data["k"]]
        if len(values) != len(ORDERS[status][0]):
            raise ValueError("length")
    except (ValueError, KeyError, TypeError, OverflowError):
        raise InvalidArgument(f"after: invalid cursor {value[:40]!r}", "after") from None
    if data.get("s") != status.value:
        raise InvalidArgument(f"this cursor belongs to a list of {data.get('s')!r}, "
                              f"not {status.value!r}")
    return values


def after_clause(order: tuple[tuple[str, int], ...], values: list[Any]) -> dict[str, Any]:
    """`(k1, k2, ...) > (v1, v2, ...)` in the order's directions, as a MongoDB filter."""
    branches = []
    for i, (name, direction) in enumerate(order):
        branch = {order[j][0]: values[j] for j in range(i)}
        branch[name] = {"$gt" if direction == 1 else "$lt": values[i]}
        branches.append(branch)
    return {"$or": branches}


def sort_values(doc: dict[str, Any], order: tuple[tuple[str, int], ...]) -> list[Any]:
    return [doc.get(name) for name, _ in order]
