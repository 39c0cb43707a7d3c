"""Durations and times a user gives (docs/input.md), and the one short form of a duration.

Split from values.py, whose parsers every command runs: a plain `enqueue` parses no
duration and no time, and a module it does not load costs it no compile time where
byte-code is not cached (benchmarks/bench_cli_startup.py). The rules are values.py's:
a bad value is an `InvalidArgument` naming what was wrong, never a crash or a clamp.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta
from typing import Any

from runnerq_cli.errors import InvalidArgument
from runnerq_cli.plural import counted
from runnerq_cli.values import MAX_DURATION, shown

TIME_MIN = datetime(1970, 1, 1, tzinfo=UTC)
TIME_MAX = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)

_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
# ASCII digits only: Python's \\d, int() and float() also take Arabic-Indic or full-width
# digits ('٤', '２'), which no documentation promises and no other tool reads the same.
_PART = re.compile(r"([0-9]{1,15}(?:\.[0-9]{1,9})?)(ms|s|m|h|d|w)")


# ------------------------------------------------------------------ durations


def duration(value: Any, what: str = "duration", *, minimum: float = 0.0,
             maximum: float = MAX_DURATION, whole: bool = False) -> float:
    """Seconds in "30s", "5m", "1h30m", "250ms" or a bare number of seconds.

    Finite, within [minimum, maximum] (at most 100 years by default), whole
    seconds if `whole`. Negative values are refused.
    """
    expected = f"{what}: expected a duration like 30s, 5m or 2h, got {shown(value)}"
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise InvalidArgument(expected)
    if isinstance(value, str):
        text = value.strip().lower()
        if not text.isascii():  # float('١٠') is 10.0: refused like any other non-duration
            raise InvalidArgument(expected)
        if text.startswith("-"):
            raise InvalidArgument(f"{what} must not be negative, got {shown(value)}")
        if len(text) > 100:
            raise InvalidArgument(expected)
        try:
            seconds = float(text)
        except ValueError:
            pos, seconds = 0, 0.0
            for match in _PART.finditer(text):
                if match.start() != pos:
                    break
                seconds += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
                pos = match.end()
            if pos != len(text) or not text:
                raise InvalidArgument(expected) from None
    else:
        seconds = float(value) if abs(value) < 1e300 else math.inf
    if not math.isfinite(seconds):
        raise InvalidArgument(f"{what}: expected a finite duration, got {shown(value)}")
    if seconds < 0:
        raise InvalidArgument(f"{what} must not be negative, got {shown(value)}")
    if seconds > maximum:
        raise InvalidArgument(f"{what}: at most {_limit(maximum)}, got {shown(value)}")
    if seconds < minimum:
        raise InvalidArgument(f"{what}: must be at least {_limit(minimum)}, "
                              f"got {shown(value)}")
    if whole:
        if seconds != int(seconds):
            raise InvalidArgument(f"{what}: expected whole seconds, got {shown(value)}")
        return int(seconds)
    return seconds


def _limit(seconds: float) -> str:
    """A duration limit for a message: "100 years", "1d", "1h", "10ms" (exact: a limit
    rounded to format_duration's tenths of a second would be another limit, 10ms "0s")."""
    year = 365 * 86400
    if 0 < seconds < 1:
        return f"{round(seconds * 1000, 3):g}ms"
    return counted(seconds / year, "year", number=f"{seconds / year:g}") if seconds >= year \
        else format_duration(seconds)


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


# ------------------------------------------------------------------ times


def time(value: Any, what: str = "time", *, relative: bool = True,
         now: datetime | None = None) -> datetime:
    """An aware UTC datetime from ISO-8601 text (naive means UTC) or, if `relative`,
    a duration meaning that long ago. Between 1970 and the end of year 9999 (UTC)."""
    if isinstance(value, datetime):
        parsed = value
    elif isinstance(value, str) and len(value) <= 64 and value.isascii():
        text = value.strip()
        try:
            parsed = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            if not relative:
                raise InvalidArgument(f"{what}: expected an ISO-8601 time like "
                                      f"2030-01-31T09:00:00Z, got {shown(value)}") from None
            try:
                ago = duration(text, what)
            except InvalidArgument as exc:
                if "expected a duration" not in str(exc):
                    raise  # a duration, but out of range: say so
                raise InvalidArgument(f"{what}: expected an ISO-8601 time or a duration "
                                      f"ago like 10m, got {shown(value)}") from None
            # further back than 1970 means "since the start": nothing is older
            parsed = max((now or datetime.now(UTC)) - timedelta(seconds=ago), TIME_MIN)
    else:
        raise InvalidArgument(f"{what}: expected an ISO-8601 time, got {shown(value)}")
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    try:
        parsed = parsed.astimezone(UTC)
    except (OverflowError, ValueError):
        parsed = None  # type: ignore[assignment]
    if parsed is None or not TIME_MIN <= parsed <= TIME_MAX:
        raise InvalidArgument(f"{what}: {shown(value)} is out of range (from "
                              f"1970-01-01T00:00:00Z to 9999-12-31T23:59:59Z)")
    return parsed


def optional_time(value: str | None, what: str, **options: Any) -> datetime | None:
    """`time(value)` for an option that may be absent: None only when it was not given.

    An empty value (`--since ''`, a variable that expanded to nothing) is a malformed
    time like any other, never "no filter": the commands test `is None`, not truth.
    """
    return None if value is None else time(value, what, **options)
