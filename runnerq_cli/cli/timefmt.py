"""One time format for every text view (docs/cli.md, "Output conventions").

`2026-12-01 05:05:17.503Z`: UTC to the millisecond, a space between date and
time, `Z` for UTC. With the root option `--local` times are shown in the local
time zone with their offset instead (`2026-12-01 06:05:17.503+01:00`). JSON
output is not affected: it keeps ISO-8601 with `Z` (docs/reference.md).
"""

from __future__ import annotations

from datetime import UTC, datetime

NONE = "-"  # what a missing time prints as (never `None`)

_local = False


def use_local(local: bool) -> None:
    """Show times in the local zone (True) or UTC (False); set once by the root command."""
    global _local
    _local = local


def stamp(value: datetime | None) -> str:
    """`value` in the one text format; `-` for no time."""
    if not isinstance(value, datetime):
        return NONE if value is None else str(value)
    if value.tzinfo is None:  # stored times are UTC; a naive one is UTC too
        value = value.replace(tzinfo=UTC)
    if _local:
        value = value.astimezone()
        offset = value.strftime("%z")
        zone = f"{offset[:3]}:{offset[3:]}" if offset else ""
    else:
        value = value.astimezone(UTC)
        zone = "Z"
    return value.strftime("%Y-%m-%d %H:%M:%S.") + f"{value.microsecond // 1000:03d}{zone}"
