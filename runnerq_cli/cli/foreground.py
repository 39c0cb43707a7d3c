"""How a command that serves until stopped (`dev-server`, `console`) says how to stop it.

"Press Ctrl-C to stop." is true only for a foreground job of a terminal. A background
job (`console &`) never gets the terminal's Ctrl-C, and its line lands after the prompt
the shell already drew; output to a file or a pipe (`console > console.log &`, a
service manager) is read later, by someone for whom Ctrl-C means nothing. Those get the
way that always works: `kill PID` (SIGTERM, a clean stop for both commands).
"""

from __future__ import annotations

import os
from typing import Any


def _in_background(stream: Any) -> bool:
    """Whether `stream` is a terminal of which this process is not the foreground job
    (`dev-server &`): Ctrl-C does not reach it there."""
    try:
        return bool(stream.isatty()) and os.getpgrp() != os.tcgetpgrp(stream.fileno())
    except (OSError, ValueError, AttributeError):
        return False


def _on_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (ValueError, AttributeError):
        return False


def how_to_stop(stream: Any) -> str:
    """The start-up's last line(s) for output going to `stream`: Ctrl-C in the foreground
    of a terminal; in its background `kill PID` or `fg` then Ctrl-C, ending with a blank
    line so the prompt the shell already drew is not left half-overwritten; to a file or
    a pipe `kill PID`."""
    pid = os.getpid()
    if not _on_terminal(stream):
        return f"Stop it with `kill {pid}`.\n"
    if _in_background(stream):
        return (f"Running in the background: stop it with `kill {pid}` "
                "(or `fg`, then Ctrl-C).\n\n")
    return "Press Ctrl-C to stop.\n"
