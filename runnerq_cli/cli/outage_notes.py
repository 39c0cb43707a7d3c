"""How the long-running commands tell a person that the server is away, and back.

The mechanism is the backend's (domain/outage.py, `OutageWatch`); these are its
callbacks for a terminal: one `note:` line on stderr at each failed try (since when,
retrying) and one when the server answers again. `stats --watch`, `wait`,
`enqueue --wait`, `metrics serve` and `tail events` all take theirs from here.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from runnerq_cli.backend.domain.outage import Outage, OutageWatch


def note(message: str) -> None:
    """`note: message` on stderr, one inert line: information, the command carries on."""
    from runnerq_cli.cli.output import one_line

    sys.stderr.write(f"note: {one_line(message)}\n")
    sys.stderr.flush()


def note_away(outage: Outage) -> None:
    note(outage.away_line())


def note_back(outage: Outage) -> None:
    note(outage.back_line())


def watch(*, answered: bool = False, on_away: Callable[[Outage], None] = note_away,
          on_back: Callable[[Outage], None] = note_back,
          sleep: Callable[[float], bool] | None = None) -> OutageWatch:
    """A watch that notes the outage on stderr. `answered`: the command has reached the
    server already (else the first failure is the command's own: exit 6 at once);
    `sleep(seconds)`: the back-off between tries, True when the command was stopped."""
    from runnerq_cli.backend.domain.outage import OutageWatch

    return OutageWatch(on_away, on_back, answered=answered, sleep=sleep)
