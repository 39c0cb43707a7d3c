"""The arguments of a driver request, read one by one: a request another program wrote
is input like any other, so each value is checked and a bad one named
(InvalidArgument: the reply's `invalid_argument`), never passed on half-read."""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from runnerq_cli.errors import InvalidArgument, RunnerQError


class Unsupported(RunnerQError):
    """An operation this backend does not offer (yet): the spec's `unsupported`."""


class Args:
    """A request's `args` object, with typed reads and the protocol's defaults."""

    def __init__(self, raw: Any) -> None:
        if raw is None:
            raw = {}
        if not isinstance(raw, Mapping):
            raise InvalidArgument("args must be a JSON object")
        self.raw: Mapping[str, Any] = raw

    def given(self, name: str) -> bool:
        return self.raw.get(name) is not None

    def text(self, name: str, default: str | None = None) -> str:
        value = self.raw.get(name, default)
        if not isinstance(value, str):
            raise InvalidArgument(f"{name} must be a string", name)
        return value

    def optional_text(self, name: str) -> str | None:
        return self.text(name) if self.given(name) else None

    def integer(self, name: str, default: int, minimum: int | None = None) -> int:
        value = self.raw.get(name)
        if value is None:
            return default
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if not isinstance(value, int) or isinstance(value, bool):
            raise InvalidArgument(f"{name} must be a whole number", name)
        if minimum is not None and value < minimum:
            raise InvalidArgument(f"{name} must be at least {minimum}", name)
        return value

    def number(self, name: str, default: float, minimum: float = 0) -> float:
        value = self.raw.get(name)
        if value is None:
            return default
        if not isinstance(value, int | float) or isinstance(value, bool) \
                or not math.isfinite(value) or value < minimum:
            raise InvalidArgument(f"{name} must be a finite number of at least {minimum:g}",
                                  name)
        return float(value)

    def flag(self, name: str, default: bool) -> bool:
        value = self.raw.get(name, default)
        if not isinstance(value, bool):
            raise InvalidArgument(f"{name} must be true or false", name)
        return value

    def id(self, name: str) -> uuid.UUID:
        value = self.raw.get(name)
        try:
            return uuid.UUID(str(value)) if isinstance(value, str) else _no_id(name)
        except ValueError:
            raise InvalidArgument(f"{name} must be a UUID, not {value!r:.60}", name) from None

    def optional_id(self, name: str) -> uuid.UUID | None:
        return self.id(name) if self.given(name) else None

    def types(self, name: str) -> list[str] | None:
        value = self.raw.get(name)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
            raise InvalidArgument(f"{name} must be a list of strings", name)
        return value or None

    def time(self, name: str) -> datetime:
        """An RFC 3339 time ("2099-01-01T00:00:00.000Z"), as UTC."""
        text = self.text(name)
        try:
            when = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise InvalidArgument(f"{name} must be an RFC 3339 time, not {text!r:.60}",
                                  name) from None
        if when.tzinfo is None:
            raise InvalidArgument(f"{name} must carry its UTC offset", name)
        return when.astimezone(UTC)

    def claim(self, name: str = "claim") -> tuple[uuid.UUID, str]:
        """A claim as the driver gave it: `{"id", "token"}`."""
        value = self.raw.get(name)
        if not isinstance(value, Mapping):
            raise InvalidArgument(f"{name} must be a claim {{id, token}}", name)
        inner = Args(value)
        return inner.id("id"), inner.text("token")


def _no_id(name: str) -> uuid.UUID:
    raise InvalidArgument(f"{name} must be a UUID", name)
