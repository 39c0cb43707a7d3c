"""Worker logs over the standard `logging` module: the `runnerq` logger hierarchy.

The worker emits records on `runnerq.worker` (lifecycle messages and one
record per finished attempt); an application that embeds it routes, filters
and formats them with `logging` like any library's. The library adds no
handler but a NullHandler; the CLI installs one (`configure_logging`): rich's
RichHandler on a terminal, plain text lines, or JSON lines for log shippers,
chosen by --log-format, filtered by --log-level.

Each record carries its key=value details as `record.fields` (a dict) and,
for an attempt, `record.outcome`, `record.activity_type`, `record.activity_id`,
`record.attempt`, `record.seconds` and `record.error`.

`WorkerLog` keeps the call-site API the engine uses (`message`, `outcome`,
`enabled`). Given a `stream`, it writes there through its own handler and a
logger of its own (not in the hierarchy: tests and benchmarks that run several
workers in one process keep their lines apart).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

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
_LEVEL_STYLE = {"ERROR": "red", "CRITICAL": "bold red", "WARNING": "yellow", "DEBUG": "dim"}

# A library adds no handler of its own (logging HOWTO, "Configuring Logging for a Library").
logging.getLogger(ROOT_LOGGER).addHandler(logging.NullHandler())


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
    text = str(value)
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
            text = (f"{head} {outcome} {record.activity_type} {record.activity_id} "  # type: ignore[attr-defined]
                    f"attempt={record.attempt} seconds={record.seconds:.3f}")  # type: ignore[attr-defined]
            short = _short_error(getattr(record, "error", None))
            return text + (f" error={json.dumps(short)}" if short else "")
        fields = getattr(record, "fields", None) or {}
        extra = " ".join(f"{k}={_show(v)}" for k, v in fields.items())
        text = f"{head} {record.getMessage()} {extra}".rstrip()
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
                "outcome": outcome, "activity_type": record.activity_type,  # type: ignore[attr-defined]
                "activity_id": str(record.activity_id),  # type: ignore[attr-defined]
                "attempt": record.attempt,  # type: ignore[attr-defined]
                "seconds": round(record.seconds, 4), **fields}  # type: ignore[attr-defined]
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
            text = (f"[{style}]{outcome:<13}[/{style}] {escape(str(record.activity_type))} "  # type: ignore[attr-defined]
                    f"[dim]{str(record.activity_id)[:8]}[/dim] "  # type: ignore[attr-defined]
                    f"attempt {record.attempt} {record.seconds:.3f}s")  # type: ignore[attr-defined]
            short = _short_error(getattr(record, "error", None))
            return text + (f" [{style}]{escape(short)}[/{style}]" if short else "")
        fields = getattr(record, "fields", None) or {}
        extra = " ".join(f"[dim]{k}=[/dim]{escape(str(v))}" for k, v in fields.items())
        return f"{escape(record.getMessage())} {extra}".rstrip()


class _QuietStreamHandler(logging.StreamHandler):  # type: ignore[type-arg]
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


def configure_logging(fmt: str = "auto", level: str = "info",
                      stream: TextIO | None = None) -> logging.Handler:
    """What the CLI does: one handler on the `runnerq` logger at `level`.

    Returns the handler (remove it with `unconfigure_logging`). Applications
    that embed the worker configure logging themselves instead.
    """
    handler = make_handler(fmt, stream)
    logger = logging.getLogger(ROOT_LOGGER)
    handler.previous_level = logger.level  # type: ignore[attr-defined]
    logger.addHandler(handler)
    logger.setLevel(LEVELS.get(level, logging.INFO))
    return handler


def unconfigure_logging(handler: logging.Handler) -> None:
    """Undo `configure_logging`: the handler removed, the logger's level as it was."""
    logger = logging.getLogger(ROOT_LOGGER)
    logger.removeHandler(handler)
    logger.setLevel(getattr(handler, "previous_level", logging.NOTSET))
    handler.close()


# ------------------------------------------------------------------- adapter

class WorkerLog:
    """The engine's logging calls, as `logging` records on `runnerq.worker`.

    `WorkerLog()` (no stream) only emits records: where they go is the
    application's logging configuration (the CLI's: `configure_logging`).
    `WorkerLog(fmt, level, stream)` writes to `stream` through a handler of its own.
    """

    def __init__(self, fmt: str = "auto", level: str = "info",
                 stream: TextIO | None = None) -> None:
        self.stream = stream
        self.format = resolve_format(fmt, stream or sys.stderr)
        self.level = LEVELS.get(level, logging.INFO)
        if stream is None:
            self.logger = logging.getLogger(WORKER_LOGGER)
        else:
            # Outside the hierarchy: this worker's lines go to this stream only.
            self.logger = logging.Logger(WORKER_LOGGER, self.level)
            self.logger.addHandler(make_handler(self.format, stream))

    def enabled(self, level: str) -> bool:
        return self.logger.isEnabledFor(LEVELS.get(level, logging.INFO))

    def message(self, level: str, text: str, **fields: Any) -> None:
        """A lifecycle record (started, stopping, maintenance errors...)."""
        levelno = LEVELS.get(level, logging.INFO)
        if self.logger.isEnabledFor(levelno):
            self.logger.log(levelno, text, extra={"fields": fields})

    def outcome(self, outcome: str, activity_type: str, activity_id: Any, attempt: int,
                seconds: float, error: str | None = None, **fields: Any) -> None:
        """One record per finished attempt."""
        levelno = LEVELS[OUTCOME_LEVEL.get(outcome, "info")]
        if not self.logger.isEnabledFor(levelno):
            return
        short = _short_error(error)
        text = (f"{outcome} {activity_type} {activity_id} attempt={attempt} "
                f"seconds={seconds:.3f}" + (f" error={json.dumps(short)}" if short else ""))
        self.logger.log(levelno, text, extra={
            "fields": fields, "outcome": outcome, "activity_type": activity_type,
            "activity_id": str(activity_id), "attempt": attempt, "seconds": seconds,
            "error": str(error) if error else None})
