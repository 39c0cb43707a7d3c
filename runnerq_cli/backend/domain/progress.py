"""A running handler's progress report, checked before anything is written
(docs/design.md, "Progress").

Pure rules, no I/O: the worker checks in the handler's own call (`ctx.progress`), so bad
input raises there, where the handler's author sees it, and the backend stores only what
passed.
"""

from __future__ import annotations

import math
from typing import Any

from runnerq_cli import texts
from runnerq_cli.errors import InvalidArgument

MESSAGE_MAX = 200  # characters (code points): a line, not a log


def _number(value: Any, name: str) -> float:
    # bool is an int to Python, never a count of work to anyone reading it
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgument(f"progress {name} must be a number, got {type(value).__name__}",
                              name)
    number = float(value)
    if not math.isfinite(number) or number < 0:
        raise InvalidArgument(f"progress {name} must be a finite number of at least 0, "
                              f"got {value!r}", name)
    return number


def progress_document(done: Any, total: Any = None, message: Any = None) -> dict[str, Any]:
    """The `progress` sub-document's reported part: `done`, and `total` and `message` when
    given; InvalidArgument (nothing to write) otherwise."""
    doc: dict[str, Any] = {"done": _number(done, "done")}
    if total is not None:
        doc["total"] = _number(total, "total")
        if doc["total"] == 0:
            raise InvalidArgument("progress total must be above 0 (leave it out when unknown)",
                                  "total")
    if message is not None:  # shown on terminals: one line, no escapes (values.py)
        doc["message"] = texts.one_line_text(message, "progress message",
                                              max_chars=MESSAGE_MAX)
    return doc


def progress_text(progress: Any) -> str | None:
    """One short line for `show` and `list`: "40/100 (40%) copying", "7", or None when
    there is no readable progress."""
    if not isinstance(progress, dict) or not isinstance(progress.get("done"), int | float):
        return None
    done = float(progress["done"])
    total = progress.get("total")
    text = f"{done:g}"
    if isinstance(total, int | float) and total > 0:
        text = f"{done:g}/{float(total):g} ({min(100.0, 100 * done / total):.0f}%)"
    message = progress.get("message")
    if isinstance(message, str) and message:
        text += f" {message}"
    return text
