"""Worker log lines: one per activity outcome, plus lifecycle messages.

`rich` on a terminal (colour, aligned), `plain` text lines, or `json` lines
for log shippers. Written to standard error, flushed per line, thread-safe.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
from datetime import UTC, datetime
from typing import Any, TextIO

from runnerq_cli.redaction import redact_uri

LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40}
OUTCOME_STYLE = {"completed": "green", "retrying": "yellow", "failed": "red",
                 "dead_lettered": "bold red", "claim_lost": "magenta", "released": "cyan",
                 "timed_out": "yellow"}
OUTCOME_LEVEL = {"completed": "info", "retrying": "warning", "failed": "error",
                 "dead_lettered": "error", "claim_lost": "warning", "released": "warning"}


def resolve_format(fmt: str, stream: TextIO) -> str:
    if fmt != "auto":
        return fmt
    return "rich" if hasattr(stream, "isatty") and stream.isatty() else "plain"


class WorkerLog:
    """Outcome and lifecycle lines in the chosen format."""

    def __init__(self, fmt: str = "auto", level: str = "info",
                 stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.format = resolve_format(fmt, self.stream)
        self.level = LEVELS.get(level, 20)
        self._lock = threading.Lock()
        self._console: Any = None
        if self.format == "rich":
            from rich.console import Console

            self._console = Console(file=self.stream, highlight=False,
                                    no_color=bool(os.environ.get("NO_COLOR")))

    def enabled(self, level: str) -> bool:
        return LEVELS.get(level, 20) >= self.level

    def message(self, level: str, text: str, **fields: Any) -> None:
        """A lifecycle line (started, stopping, maintenance errors...)."""
        if not self.enabled(level):
            return
        now = datetime.now(UTC)
        if self.format == "json":
            self._write(json.dumps({"ts": _iso(now), "level": level, "msg": text,
                                    **_plain(fields)}, default=str))
        elif self.format == "rich":
            extra = " ".join(f"[dim]{k}=[/dim]{_escape(v)}" for k, v in fields.items())
            style = {"error": "red", "warning": "yellow", "debug": "dim"}.get(level, "blue")
            self._rich(f"[dim]{now:%H:%M:%S}[/dim] [{style}]{level:<7}[/{style}] "
                       f"{_escape(text)} {extra}".rstrip())
        else:
            extra = " ".join(f"{k}={_show(v)}" for k, v in fields.items())
            self._write(f"{_iso(now)} {level.upper():<7} {text} {extra}".rstrip())

    def outcome(self, outcome: str, activity_type: str, activity_id: Any, attempt: int,
                seconds: float, error: str | None = None, **fields: Any) -> None:
        """One line per finished attempt."""
        level = OUTCOME_LEVEL.get(outcome, "info")
        if not self.enabled(level):
            return
        now = datetime.now(UTC)
        short_error = " ".join(str(error).split())[:300] if error else None
        if self.format == "json":
            record = {"ts": _iso(now), "level": level, "event": "activity", "outcome": outcome,
                      "activity_type": activity_type, "activity_id": str(activity_id),
                      "attempt": attempt, "seconds": round(seconds, 4), **_plain(fields)}
            if error:
                record["error"] = str(error)[-2048:]
            self._write(json.dumps(record, default=str))
        elif self.format == "rich":
            style = OUTCOME_STYLE.get(outcome, "white")
            text = (f"[dim]{now:%H:%M:%S}[/dim] [{style}]{outcome:<13}[/{style}] "
                    f"{_escape(activity_type)} [dim]{str(activity_id)[:8]}[/dim] "
                    f"attempt {attempt} {seconds:.3f}s")
            if short_error:
                text += f" [{style}]{_escape(short_error)}[/{style}]"
            self._rich(text)
        else:
            text = (f"{_iso(now)} {level.upper():<7} {outcome} {activity_type} {activity_id} "
                    f"attempt={attempt} seconds={seconds:.3f}")
            if short_error:
                text += f" error={json.dumps(short_error)}"
            self._write(text)

    def _write(self, line: str) -> None:
        line = redact_uri(line)  # handler and driver errors may quote a URI
        with self._lock:
            try:
                self.stream.write(line + "\n")
                self.stream.flush()
            except (OSError, ValueError):
                pass  # a closed log stream must not stop the worker

    def _rich(self, markup: str) -> None:
        markup = redact_uri(markup)
        with self._lock, contextlib.suppress(OSError, ValueError):
            self._console.print(markup, soft_wrap=True)


def _iso(now: datetime) -> str:
    return now.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _show(value: Any) -> str:
    text = str(value)
    return json.dumps(text) if (" " in text or not text) else text


def _plain(fields: dict[str, Any]) -> dict[str, Any]:
    return {k: (v if isinstance(v, int | float | str | bool | type(None) | list) else str(v))
            for k, v in fields.items()}


def _escape(value: Any) -> str:
    from rich.markup import escape

    return escape(str(value))
