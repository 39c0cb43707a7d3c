"""Values in words for people: yes/no, lists, times, pauses (never Python literals).

Text views print `paused: yes` and `types: send_email, resize`, not `True` or
`['send_email']`. Every piece of untrusted text goes through literal().
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from runnerq_cli.literal import literal


def words(value: Any) -> str:
    """`value` for people: yes/no, a comma-separated list, `k v` pairs, one time format."""
    from runnerq_cli.cli.timefmt import stamp

    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, datetime):
        return stamp(value)
    if isinstance(value, dict):
        return ", ".join(f"{literal(k)} {words(v)}" for k, v in value.items()) or "-"
    if isinstance(value, list | tuple | set | frozenset):
        return ", ".join(words(v) for v in value) or "-"
    return literal(value)


def describe_pause(pause: Any) -> str:
    """One line: what is paused, since when, by whom, why (each value escaped)."""
    from runnerq_cli.cli.timefmt import stamp

    if not pause.active:
        return "not paused"
    what = "the whole queue" if pause.all else "types " + ", ".join(
        literal(t) for t in pause.types)
    text = f"paused: {what}"
    if pause.at is not None:
        text += f" since {stamp(pause.at)}"
    if pause.actor:
        text += f" by {literal(pause.actor, max_length=200)}"
    if pause.reason:
        text += f" ({literal(pause.reason, max_length=500)})"
    return text
