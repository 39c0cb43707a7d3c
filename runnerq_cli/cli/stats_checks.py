"""`stats --check EXPR`: tiny comparison expressions for CI and monitoring.

Grammar (no eval, nothing reaches the server): `NAME OP VALUE` where NAME is
one of `metrics.check_values` names (pending, dead_letter, oldest_pending,
wait_p95, workers, ...), OP is one of == != < <= > >=, and VALUE is a number, or for
a name in seconds (metrics.CHECK_DURATIONS: oldest_pending, wait_p95, ...) a duration
too (60s, 5m, 1h; compared in seconds). A count is a number: `dead_letter > 5m` is
refused, and `dead_letter > 1e999` is "not a finite number", not a duration.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from dataclasses import dataclass

from runnerq_cli import times, values
from runnerq_cli.errors import InvalidArgument
from runnerq_cli.literal import literal

_OPS: dict[str, Callable[[float, float], bool]] = {
    "==": operator.eq, "!=": operator.ne, "<=": operator.le, ">=": operator.ge,
    "<": operator.lt, ">": operator.gt,
}
_EXPR = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_\-]*)\s*(==|!=|<=|>=|<|>)\s*([0-9][0-9a-z.]*)\s*")


@dataclass(frozen=True)
class Check:
    text: str
    name: str
    op: str
    value: float

    def holds(self, values: dict[str, float]) -> bool:
        return _OPS[self.op](values[self.name], self.value)

    def describe(self, values: dict[str, float]) -> str:
        actual = values[self.name]
        shown = f"{actual:g}"
        return f"check failed: {literal(self.text.strip())} (actual {self.name} = {shown})"


def parse_check(text: str, known: set[str] | frozenset[str],
                durations: set[str] | frozenset[str]) -> Check:
    """`text` as a Check of one of the `known` names; a value in words for the name's
    kind: a duration for the `durations`, a number for the others."""
    match = _EXPR.fullmatch(text)
    if not match:
        raise InvalidArgument(
            f"invalid --check {text!r}: expected NAME OP VALUE, e.g. 'dead_letter == 0' or "
            "'oldest_pending < 60s'")
    name, op, raw = match.groups()
    if name not in known:
        raise InvalidArgument(f"invalid --check {text!r}: unknown name {name!r}; known: "
                              + ", ".join(sorted(known)))
    what = f"--check {values.shown(text)}"
    if name not in durations:
        return Check(text, name, op, float(values.number(raw, what)))
    try:
        value = float(values.number(raw, what))
    except InvalidArgument:
        value = times.duration(raw, what)
    return Check(text, name, op, value)


def evaluate(checks: list[Check], values: dict[str, float]) -> list[str]:
    """One line per check that does not hold (empty: all hold)."""
    return [c.describe(values) for c in checks if not c.holds(values)]
