"""The values a few string options accept, for shell completion (light: no backend import).

The options keep parsing their text themselves (aliases such as `running`, `1-4`,
any case); these lists are what TAB offers. tests/test_completion.py checks them
against the backend's enums so they cannot drift apart.
"""

# Annotations are evaluated here (no `from __future__ import annotations`): typer reads
# the completers' signatures at every run, and string annotations would be compiled one by one
# (about 2 ms of CPU per command run, tests/test_import_cost.py).

from collections.abc import Callable

STATUSES = ("pending", "scheduled", "processing", "running", "waiting", "completed", "failed",
            "dead-letter", "cancelled")
PRIORITIES = ("low", "normal", "high", "critical")
ON_DUPLICATE = ("return-existing", "allow-reuse", "allow-reuse-on-failure", "no-reuse")
LOG_FORMATS = ("auto", "rich", "plain", "json")
LOG_LEVELS = ("debug", "info", "warning", "error")
TAIL_MODES = ("auto", "change-stream", "poll")
STATS_BY = ("type", "error")


def completer(values: tuple[str, ...]) -> Callable[[str], list[str]]:
    """A typer `autocompletion` callback offering `values` that start with what was typed."""

    def complete(incomplete: str) -> list[str]:
        return [value for value in values if value.startswith(incomplete)]

    return complete
