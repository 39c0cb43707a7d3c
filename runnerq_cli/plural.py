"""A count with its noun in the right number: `1 schedule`, `2 schedules`, `0 activities`.

Every message of the product that counts something (the CLI's lines, the backend's
errors and notes, doctor's checks, the worker's logs) says it through `counted`, so no
message reads "1 schedules" or "1 lines"; tests/test_plural.py finds a count written
next to its noun by hand. The console's page has its twin, `counted()` in
console/static/index.html, with the same rule.
"""

from __future__ import annotations

_IRREGULAR = {"was": "were", "is": "are", "has": "have", "does": "do", "this": "these"}


def plural(noun: str) -> str:
    """The plural of an English noun phrase (its last word): activity -> activities,
    index -> indexes, try -> tries, dead-lettered activity -> dead-lettered activities."""
    head, _, last = noun.rpartition(" ")
    if last in _IRREGULAR:
        word = _IRREGULAR[last]
    elif last.endswith("y") and last[-2:-1] not in ("a", "e", "i", "o", "u", ""):
        word = last[:-1] + "ies"
    elif last.endswith(("s", "x", "z", "ch", "sh")):
        word = last + "es"
    else:
        word = last + "s"
    return f"{head} {word}" if head else word


def counted(count: float, noun: str, many: str | None = None, *, number: str | None = None,
            ) -> str:
    """`count` and `noun`, the noun in the plural unless the count is exactly one:
    counted(1, "line") -> "1 line", counted(3, "line") -> "3 lines". `many`: the plural
    when `plural()` gets it wrong; `number`: the count as it is to be shown (`1,204`,
    `at least 1,000`) when not as `str(count)`."""
    shown = number if number is not None else str(count)
    return f"{shown} {noun if count == 1 else many or plural(noun)}"


def agreeing(count: float, one: str, many: str) -> str:
    """The verb that agrees with `count`: agreeing(1, "handles", "handle") -> "handles"
    ("1 live worker handles", "2 live workers handle")."""
    return one if count == 1 else many
