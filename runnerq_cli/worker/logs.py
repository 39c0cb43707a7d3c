"""Worker and backend logs over the standard `logging` module: the `runnerq` hierarchy.

The worker emits records on `runnerq.worker` (lifecycle messages and one
record per finished attempt), the backend's maintenance on `runnerq.backend`
(what the reaper, outbox repair and retention did); an application that embeds
them routes, filters and formats them with `logging` like any library's. The
library adds no handler but a NullHandler; the CLI installs one
(`configure_logging`): rich's RichHandler on a terminal, plain text lines, or
JSON lines for log shippers, chosen by --log-format, filtered by --log-level.

Each record carries its key=value details as `record.fields` (a dict: build it
with `details(...)`) and, for an attempt (`attempt_details(...)`),
`record.outcome`, `record.activity_type`, `record.activity_id`,
`record.attempt`, `record.ran_seconds` (the handler's run time), `record.retry_in_seconds`
(a retry's back-off, else None) and `record.error`. Text lines show every
value through `literal()`: an activity type or error holding an ESC sequence or
a newline cannot forge a log line (JSON lines escape on their own).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

from runnerq_cli.literal import literal
from runnerq_cli.redaction import redact_uri

ROOT_LOGGER = "runnerq"
WORKER_LOGGER = "runnerq.worker"
LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
          "error": logging.ERROR}
OUTCOME_STYLE = {"completed": "green", "retrying": "yellow", "failed": "red",
                 "dead_lettered": "bold red", "claim_lost": "magenta", "released": "cyan",
                 "timed_out": "yellow"}
OUTCOME_LEVEL = {"completed": "info", "retrying": "warning", "failed": "error",
                 "dead_lettered": "error", "claim_lost": "warning", "released": "warning"}

# A library adds no handler of its own (logging HOWTO, "Configuring Logging for a Library").
logging.getLogger(ROOT_LOGGER).addHandler(logging.NullHandler())


def details(**fields: Any) -> dict[str, Any]:
    """`extra=` for a record with key=value details: `log.info("started", extra=details(a=1))`."""
    return {"fields": fields}


def attempt_details(outcome: str, activity_type: str, activity_id: Any, attempt: int,
                    ran_seconds: float, error: str | None = None,
                    retry_in_seconds: float | None = None) -> dict[str, Any]:
    """`extra=` for the record of a finished attempt (see the module's docstring)."""
    return {"fields": {}, "outcome": outcome, "activity_type": activity_type,
            "activity_id": str(activity_id), "attempt": attempt, "ran_seconds": ran_seconds,
            "retry_in_seconds": retry_in_seconds, "error": str(error) if error else None}


def attempt_message(outcome: str, activity_type: str, activity_id: Any, attempt: int,
                    ran_seconds: float, error: str | None = None,
                    retry_in_seconds: float | None = None) -> str:
    """The message of an attempt's record, for handlers that show only messages:
    `retrying charge ID attempt=2 ran=0.030s retry_in=4s error="..."`. `ran` is the
    handler's run time; `retry_in` a retry's back-off (a bare `seconds=` read as that)."""
    short = _short_error(error)
    return (f"{outcome} {literal(activity_type)} {literal(activity_id)} attempt={attempt} "
            f"ran={ran_seconds:.3f}s" + _retry_in(retry_in_seconds, "retry_in=")
            + (f" error={json.dumps(short)}" if short else ""))


def _retry_in(seconds: float | None, label: str) -> str:
    """` retry_in=4s` (the one duration form, times.format_duration), or nothing."""
    from runnerq_cli.times import format_duration

    return "" if seconds is None else f" {label}{format_duration(seconds)}"


def resolve_format(fmt: str, stream: TextIO) -> str:
    if fmt != "auto":
        return fmt
    return "rich" if hasattr(stream, "isatty") and stream.isatty() else "plain"


# ------------------------------------------------------------------ formatting

class _Redact(logging.Filter):
    """Handler and driver errors may quote a MongoDB URI: no password reaches a handler."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        record.msg, record.args = redact_uri(message), None
        fields = getattr(record, "fields", None)
        if fields:
            record.fields = {k: (redact_uri(v) if isinstance(v, str) else v)
                             for k, v in fields.items()}
        error = getattr(record, "error", None)
        if isinstance(error, str):
            record.error = redact_uri(error)
        return True


def _iso(created: float) -> str:
    when = datetime.fromtimestamp(created, UTC)
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _show(value: Any) -> str:
    text = literal(value)
    return json.dumps(text) if (" " in text or not text) else text


def _plain(fields: dict[str, Any]) -> dict[str, Any]:
    return {k: (v if isinstance(v, int | float | str | bool | type(None) | list) else str(v))
            for k, v in fields.items()}


def _short_error(error: Any) -> str | None:
    return " ".join(str(error).split())[:300] if error else None


class PlainFormatter(logging.Formatter):
    """`2026-01-02T03:04:05.678Z INFO    worker started worker=w1 concurrency=4`."""

    def format(self, record: logging.LogRecord) -> str:
        head = f"{_iso(record.created)} {record.levelname:<7}"
        outcome = getattr(record, "outcome", None)
        if outcome is not None:
            return f"{head} " + attempt_message(
                outcome, getattr(record, "activity_type", ""), getattr(record, "activity_id", ""),
                getattr(record, "attempt", 0), getattr(record, "ran_seconds", 0.0),
                getattr(record, "error", None), getattr(record, "retry_in_seconds", None))
        fields = getattr(record, "fields", None) or {}
        extra = " ".join(f"{k}={_show(v)}" for k, v in fields.items())
        text = f"{head} {literal(record.getMessage())} {extra}".rstrip()
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, msg and the record's fields."""

    def format(self, record: logging.LogRecord) -> str:
        level = record.levelname.lower()
        fields = _plain(getattr(record, "fields", None) or {})
        outcome = getattr(record, "outcome", None)
        if outcome is not None:
            data: dict[str, Any] = {
                "ts": _iso(record.created), "level": level, "event": "activity",
                "outcome": outcome, "activity_type": getattr(record, "activity_type", ""),
                "activity_id": str(getattr(record, "activity_id", "")),
                "attempt": getattr(record, "attempt", 0),
                "ran_seconds": round(getattr(record, "ran_seconds", 0.0), 4), **fields}
            retry_in = getattr(record, "retry_in_seconds", None)
            if retry_in is not None:
                data["retry_in_seconds"] = retry_in
            error = getattr(record, "error", None)
            if error:
                data["error"] = str(error)[-2048:]
        else:
            data = {"ts": _iso(record.created), "level": level, "msg": record.getMessage(),
                    **fields}
            if record.name != WORKER_LOGGER:
                data.setdefault("logger", record.name)
            if record.exc_info:
                data["exc"] = self.formatException(record.exc_info)
        return json.dumps(data, default=str)


class RichMarkupFormatter(logging.Formatter):
    """The message as rich markup (RichHandler adds the time and level columns)."""

    def format(self, record: logging.LogRecord) -> str:
        from rich.markup import escape

        outcome = getattr(record, "outcome", None)
        if outcome is not None:
            style = OUTCOME_STYLE.get(outcome, "white")
            activity_type = literal(getattr(record, "activity_type", ""))
            activity_id = literal(getattr(record, "activity_id", ""))[:8]
            text = (f"[{style}]{outcome:<13}[/{style}] {escape(activity_type)} "
                    f"[dim]{escape(activity_id)}[/dim] attempt {getattr(record, 'attempt', 0)} "
                    f"ran {getattr(record, 'ran_seconds', 0.0):.3f}s"
                    + _retry_in(getattr(record, "retry_in_seconds", None), "retry in "))
            short = _short_error(getattr(record, "error", None))
            return text + (f" [{style}]{escape(literal(short))}[/{style}]" if short else "")
        fields = getattr(record, "fields", None) or {}
        extra = " ".join(f"[dim]{k}=[/dim]{escape(literal(v))}" for k, v in fields.items())
        return f"{escape(literal(record.getMessage()))} {extra}".rstrip()


class _QuietStreamHandler(logging.StreamHandler[TextIO]):
    """A closed or broken log stream must not stop the worker, nor print tracebacks."""

    def handleError(self, record: logging.LogRecord) -> None:
        pass


def make_handler(fmt: str = "auto", stream: TextIO | None = None) -> logging.Handler:
    """A handler writing `fmt` (auto, rich, plain or json) to `stream` (default stderr)."""
    stream = stream or sys.stderr
    fmt = resolve_format(fmt, stream)
    handler: logging.Handler
    if fmt == "rich":
        from rich.console import Console
        from rich.highlighter import NullHighlighter
        from rich.logging import RichHandler

        class _QuietRichHandler(RichHandler):
            def handleError(self, record: logging.LogRecord) -> None:
                pass

        console = Console(file=stream, highlight=False, soft_wrap=True,
                          no_color=bool(os.environ.get("NO_COLOR")))
        handler = _QuietRichHandler(console=console, show_path=False, markup=True,
                                    highlighter=NullHighlighter(), log_time_format="%H:%M:%S")
        handler.setFormatter(RichMarkupFormatter())
    else:
        handler = _QuietStreamHandler(stream)
        handler.setFormatter(JsonFormatter() if fmt == "json" else PlainFormatter())
    handler.addFilter(_Redact())
    return handler


# The `runnerq` logger's level before each `configure_logging`, put back by `unconfigure_logging`.
_previous_levels: dict[logging.Handler, int] = {}


def configure_logging(fmt: str = "auto", level: str = "info",
                      stream: TextIO | None = None) -> logging.Handler:
    """What the CLI does: one handler on the `runnerq` logger at `level`.

    Returns the handler (remove it with `unconfigure_logging`). Applications
    that embed the worker configure logging themselves instead.
    """
    handler = make_handler(fmt, stream)
    logger = logging.getLogger(ROOT_LOGGER)
    _previous_levels[handler] = logger.level
    logger.addHandler(handler)
    logger.setLevel(LEVELS.get(level, logging.INFO))
    return handler


def unconfigure_logging(handler: logging.Handler) -> None:
    """Undo `configure_logging`: the handler removed, the logger's level as it was."""
    logger = logging.getLogger(ROOT_LOGGER)
    logger.removeHandler(handler)
    logger.setLevel(_previous_levels.pop(handler, logging.NOTSET))
    handler.close()
