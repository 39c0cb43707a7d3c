"""What `schedule apply` and `limit apply` share: a queue's settings kept as code in a
YAML file, read with one refusal line naming the file, and the plan or the changes
printed the same way (each entry changed, then the counts, or "nothing changed")."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import typer

from runnerq_cli.cli.output import OutputFormat, emit
from runnerq_cli.errors import InvalidArgument
from runnerq_cli.plural import counted

# Bytes of a file of schedules or limits: far more than any fleet's.
AS_CODE_FILE_MAX = 4 * 1024 * 1024


class Report(Protocol):
    """An apply's report (ops/schedules.py, ops/limits.py): its changes, each with an
    `action` (create, update, remove, unchanged) and the `fields` it changes."""

    @property
    def changes(self) -> Sequence[Any]: ...

    @property
    def changed(self) -> bool: ...

    def count(self, action: str) -> int: ...

    def to_json(self) -> dict[str, Any]: ...


def read_yaml_file(path: str, what: str) -> Any:
    """The data of a YAML (or JSON) file of `what` ("a schedules file"): a FIFO without a
    writer, more than AS_CODE_FILE_MAX bytes, text that is not UTF-8 or YAML that is not
    plain data (aliases, duplicate keys: inputs.load_yaml) is one refusal naming the file."""
    from runnerq_cli.inputs import YAMLRefused, load_yaml, read_input

    raw = read_input(path, "FILE", AS_CODE_FILE_MAX)
    if len(raw) > AS_CODE_FILE_MAX:
        raise InvalidArgument(f"{path}: more than 4 MiB")
    try:
        return load_yaml(raw.decode("utf-8"), what)
    except UnicodeDecodeError as exc:
        raise InvalidArgument(f"{path}: not UTF-8 (byte {exc.start + 1})") from None
    except YAMLRefused as exc:
        raise InvalidArgument(f"{path}: {exc}") from None


def print_apply(report: Report, output: OutputFormat, dry_run: bool, path: str, noun: str,
                name_of: Callable[[Any], str]) -> None:
    """An apply's output. For scripts: the report (json) or one line a change (jsonl).
    For people: each change (`would ` before it in a dry run) with the fields it changes,
    then the counts; "nothing changed: N nouns as in FILE" when none. `name_of` gives a
    change's name as shown (literally: untrusted text stays text)."""
    from runnerq_cli.literal import literal

    if output is not OutputFormat.TEXT:
        emit(output, report.to_json() if output is OutputFormat.JSON
             else [c.to_json() for c in report.changes])
        return
    for change in report.changes:
        if change.action == "unchanged":
            continue
        fields = f" ({', '.join(change.fields)})" if change.fields else ""
        typer.echo(f"{'would ' if dry_run else ''}{change.action} "
                   f"{literal(name_of(change))}{fields}")
    if not report.changed:
        typer.echo(f"nothing changed: {counted(len(report.changes), noun)} as in "
                   f"{literal(path)}" if report.changes else f"nothing changed: no {noun}s")
        return
    counts = ", ".join(f"{report.count(a)} {w}" for a, w in (
        ("create", "created"), ("update", "updated"), ("remove", "removed"),
        ("unchanged", "unchanged")) if report.count(a))
    typer.echo(("dry run, nothing written: " if dry_run else "") + counts)
