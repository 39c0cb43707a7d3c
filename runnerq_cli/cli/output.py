"""Output for humans and scripts: text on a terminal, stable JSON otherwise.

Conventions every command follows:
- `-o text|json|jsonl`; JSON goes to stdout, one document (json) or one per line (jsonl).
- Errors go to stderr as one line `error: ...`; the exit code says what kind.
- Colour only on a terminal, and never with NO_COLOR set.
- Text from the database or the command line is printed through
  `runnerq_cli.literal` (escaped, never markup); consoles never read markup.
"""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from typing import Any, NoReturn

import typer

from runnerq_cli.cli.exits import ExitCode
from runnerq_cli.cli.screen import colour_enabled as colour_enabled  # re-exported
from runnerq_cli.cli.screen import console as console  # re-exported

ERROR_LINE_MAX = 600


class OutputFormat(StrEnum):
    TEXT = "text"
    JSON = "json"
    JSONL = "jsonl"


OUTPUT_OPTION_HELP = "Output format: text (for people), json or jsonl (for scripts)."


def output_option(default: OutputFormat = OutputFormat.TEXT) -> Any:
    return typer.Option(default, "--output", "-o", help=OUTPUT_OPTION_HELP,
                        case_sensitive=False)


def jsonable(value: Any) -> Any:
    """`value` with ids, times and enums as JSON text (models.to_jsonable), imported on
    first output: a command that prints only an id never loads it."""
    from runnerq_cli.backend.domain.models import to_jsonable

    return to_jsonable(value)


def print_json(data: Any) -> None:
    """One JSON document on stdout (pretty when stdout is a terminal)."""
    indent = 2 if sys.stdout.isatty() else None
    sys.stdout.write(json.dumps(jsonable(data), indent=indent, sort_keys=False) + "\n")
    sys.stdout.flush()


def print_jsonl(data: Any) -> None:
    """One JSON object per line; flushed at once so a pipe sees it live."""
    sys.stdout.write(json.dumps(jsonable(data), separators=(",", ":")) + "\n")
    sys.stdout.flush()


def emit(fmt: OutputFormat, data: Any) -> None:
    """Machine output: a list becomes jsonl lines, anything else one document."""
    if fmt is OutputFormat.JSONL:
        for item in data if isinstance(data, list) else [data]:
            print_jsonl(item)
    else:
        print_json(data)


def one_line(message: object, limit: int = ERROR_LINE_MAX) -> str:
    """`message` as one inert, password-safe line: whitespace runs folded to one space,
    every other control character, ESC sequence and bidi override escaped (literal())."""
    from runnerq_cli.literal import literal
    from runnerq_cli.redaction import redact_uri

    text = " ".join(redact_uri(str(message)).split())
    return literal(text, max_length=limit)


def error_line(message: str) -> None:
    """`error: message` on stderr, as one line (newlines folded), password-safe."""
    # A huge value quoted back never floods the terminal; an ESC in it never acts.
    sys.stderr.write(f"error: {one_line(message)}\n")
    sys.stderr.flush()


def warning_line(message: str) -> None:
    """`warning: message` on stderr, one line: something to know that stops nothing."""
    sys.stderr.write(f"warning: {one_line(message)}\n")
    sys.stderr.flush()


def fail(message: str, code: ExitCode = ExitCode.USAGE) -> NoReturn:
    error_line(message)
    raise typer.Exit(int(code))


def is_terminal() -> bool:
    return sys.stdout.isatty()
