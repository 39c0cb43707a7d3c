"""A filter's values (`--type`, `--worker`, `--since`'s neighbours): an empty one is
refused, never read as "no filter" (docs/input.md).

Apart from values.py, whose parsers every command runs, since a plain `enqueue` filters
nothing: it need not compile this where byte-code is not cached
(benchmarks/bench_cli_startup.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from runnerq_cli.errors import InvalidArgument


def filter_term(value: Any, what: str, hint: str = " (leave it out to mean any)") -> Any:
    """A filter's value as given (None: the option was left out), refusing an empty or
    blank one. `--type "$TYPE"` with TYPE unset must not widen an action, a listing or
    a tail to every type: an empty value names nothing, and is never "no filter"."""
    if isinstance(value, str) and not value.strip():
        raise InvalidArgument(f"{what} must not be empty{hint}", what)
    return value


def filter_terms(items: Iterable[Any] | None, what: str) -> tuple[Any, ...]:
    """Each of a filter's values (`--type a --type b`), as filter_term does one."""
    return tuple(filter_term(item, what) for item in items or ())
