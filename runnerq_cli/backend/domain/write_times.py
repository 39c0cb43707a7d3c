"""What a write sets as a time: a value, or a marker the server computes as the write
lands (`ServerTime`: `$$NOW` plus an offset). Pure values, so the domain can name
them (specs.py's `due`); turning them into update pipelines, and the server's clock
itself, is the store's (store/servertime.py, which says why every time written is
the server's).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any


@dataclass(frozen=True)
class ServerTime:
    """A time the server computes as the write lands: its clock plus `offset`."""

    offset: timedelta = timedelta(0)

    def __add__(self, other: timedelta) -> ServerTime:
        return ServerTime(self.offset + other)

    def __sub__(self, other: timedelta) -> ServerTime:
        return ServerTime(self.offset - other)

    @property
    def millis(self) -> int:
        """The offset in whole milliseconds (BSON dates have no finer unit)."""
        return round(self.offset.total_seconds() * 1000)

    def expression(self) -> Any:
        """The aggregation expression of this time (`$$NOW`, plus whole milliseconds)."""
        return "$$NOW" if self.millis == 0 else {"$add": ["$$NOW", self.millis]}

    def after(self, server_now: datetime) -> datetime:
        """The time this marker wrote, given the `$$NOW` of its write (read back)."""
        return server_now + timedelta(milliseconds=self.millis)


SERVER_NOW = ServerTime()
When = datetime | ServerTime  # a time to write: a value, or one the server computes


def has_server_times(value: Any) -> bool:
    """Whether `value` holds a `ServerTime` anywhere (documents and lists walked)."""
    if isinstance(value, ServerTime):
        return True
    if isinstance(value, Mapping):
        return any(has_server_times(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(has_server_times(v) for v in value)
    return False
