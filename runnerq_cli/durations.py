"""Parsing of human durations ("30s", "5m", "2h", "1d", "1h30m") and times."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from runnerq_cli.errors import InvalidArgument

_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")


def parse_duration(text: str | int | float, *, what: str = "duration") -> float:
    """Seconds in `text`; a bare number means seconds. Negative values are refused."""
    if isinstance(text, bool):
        raise InvalidArgument(f"{what}: expected a duration like 30s, 5m or 2h, got {text!r}")
    if isinstance(text, int | float):
        seconds = float(text)
    else:
        value = text.strip().lower()
        if value.startswith("-"):
            raise InvalidArgument(f"{what} must not be negative, got {text!r}")
        try:
            seconds = float(value)
        except ValueError:
            pos, seconds = 0, 0.0
            for match in _PART.finditer(value):
                if match.start() != pos:
                    break
                seconds += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
                pos = match.end()
            if pos != len(value) or not value:
                raise InvalidArgument(
                    f"{what}: expected a duration like 30s, 5m or 2h, got {text!r}"
                ) from None
    if seconds < 0:
        raise InvalidArgument(f"{what} must not be negative, got {text!r}")
    return seconds


def parse_time(text: str, *, what: str = "time", now: datetime | None = None) -> datetime:
    """An ISO-8601 time (naive means UTC), or a duration meaning that long ago."""
    value = text.strip()
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        try:
            ago = parse_duration(value, what=what)
        except InvalidArgument:
            raise InvalidArgument(
                f"{what}: expected an ISO-8601 time or a duration like 10m, got {text!r}"
            ) from None
        return (now or datetime.now(UTC)) - timedelta(seconds=ago)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def format_duration(seconds: float) -> str:
    """Short human form: 45s, 3m20s, 2h5m, 1d3h."""
    seconds = max(0.0, seconds)
    if seconds < 10:
        return f"{seconds:.1f}s".replace(".0s", "s")
    total = round(seconds)
    for unit, size, sub, sub_size in (("d", 86400, "h", 3600), ("h", 3600, "m", 60),
                                      ("m", 60, "s", 1)):
        if total >= size:
            major, rest = divmod(total, size)
            minor = rest // sub_size
            return f"{major}{unit}{minor}{sub}" if minor else f"{major}{unit}"
    return f"{total}s"
