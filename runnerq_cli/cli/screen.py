"""The screen text is written to: a rich Console on the current stdout or stderr,
coloured only on a terminal and never with NO_COLOR set, as wide as the terminal
(piped: COLUMNS, else wide enough for a row).

Below every other module of the CLI's output (output.py re-exports it, words.py
fits text to its width), so none of them imports another to learn the screen.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console


def colour_enabled(stream: Any = None) -> bool:
    stream = stream or sys.stdout
    return not os.environ.get("NO_COLOR") and hasattr(stream, "isatty") and stream.isatty()


def console(stderr: bool = False, *, markup: bool = True) -> Console:
    """A rich Console on the current stdout (or stderr), honouring NO_COLOR and pipes.

    Made per call (it is cheap) so it always writes to the current sys.stdout.
    Commands that print data pass `markup=False`: their text carries untrusted
    values (a reason `disk [/] full` is text, not a closing tag), so styles are
    given as Text styles, never as markup.
    """
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    terminal = hasattr(stream, "isatty") and stream.isatty()
    # Piped, there is no width to fit: rich would assume 80 columns and fold
    # tables into unreadable cells. Use COLUMNS if set, else room enough for a row.
    width = None if terminal else int(os.environ.get("COLUMNS") or 240)
    return Console(file=stream, stderr=stderr, no_color=not colour_enabled(stream),
                   highlight=False, markup=markup, emoji=False, soft_wrap=not terminal,
                   width=width)
