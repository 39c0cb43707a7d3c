"""The step every call to MongoDB goes through: one driver call, its errors translated.

driver.py's `Collection` and `Database` and cursors.py's cursors and change streams each
run their driver calls through a `Boundary` (the URI's): what each driver error becomes
is failures.py's, loaded only when a call raised."""

from __future__ import annotations

from collections.abc import Callable
from typing import ParamSpec, TypeVar

from bson.errors import BSONError
from pymongo import errors as mongo_errors

from runnerq_cli.backend.store import connection

P = ParamSpec("P")
T = TypeVar("T")


class Boundary:
    """Runs driver calls for one URI, translating their errors (failures.py)."""

    __slots__ = ("uri",)

    def __init__(self, uri: str) -> None:
        self.uri = uri

    def call(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        uri = self.uri
        if not connection.is_answered(uri):
            connection.probe(uri)
        try:
            value = fn(*args, **kwargs)
        except (mongo_errors.PyMongoError, mongo_errors.DocumentTooLarge,  # (not one)
                BSONError) as exc:  # a value BSON cannot encode, a reply it cannot decode
            from runnerq_cli.backend.store.failures import translated  # (only on a failure)

            raise translated(exc, uri) from None
        connection.answered(uri)
        return value
