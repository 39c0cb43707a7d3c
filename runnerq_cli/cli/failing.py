"""`stats --by error`: what is failing, grouped by activity type and error.

The CLI side of `rq.inspector.failures_by_type_and_error` (backend/views/failures.py):
a table that fits the screen (the error is the column that gets cut), or the
groups as JSON. Read from the stored failure events, so an incident stays
listed after its dead letters are retried.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from runnerq_cli.plural import counted

if TYPE_CHECKING:
    from runnerq_cli.backend.api import RunnerQ

SCHEMA = "runnerq.failures/1"
DEFAULT_WINDOW = 3600.0  # without --since: the last hour, as doctor
LIMIT = 50


def show_failures(backend: RunnerQ, since_seconds: float | None, output: str) -> None:
    """Print the failing groups of the last `since_seconds` (default: an hour)."""
    import typer

    from runnerq_cli.cli.output import OutputFormat, emit
    from runnerq_cli.cli.tables import Column, print_table, unique_prefixes
    from runnerq_cli.cli.timefmt import stamp
    from runnerq_cli.times import format_duration

    window = since_seconds or DEFAULT_WINDOW
    found = backend.inspector.failures_by_type_and_error(since=timedelta(seconds=window),
                                                          limit=LIMIT)
    if output != "text":
        emit(OutputFormat(output), {"schema": SCHEMA, "queue": backend.settings.queue,
                                    "window_seconds": window, **found.to_json()})
        return
    if not found.groups:
        typer.echo(f"no failed attempts in the last {format_duration(window)}")
        return
    prefixes = unique_prefixes([g.example_id for g in found.groups if g.example_id])
    columns = [Column("type", style="bold"), Column("n", right=True),
               Column("dead", right=True, drop=2), Column("first seen", drop=3),
               Column("last seen", drop=1), Column("e.g.", drop=4),
               Column("error", flexible=True, style="red")]
    rows = [[g.activity_type, str(g.count), str(g.dead_letter), stamp(g.first_seen),
             stamp(g.last_seen), prefixes.get(str(g.example_id), "-"), g.error or "-"]
            for g in found.groups]
    typer.echo(f"failed attempts in the last {format_duration(window)}, by type and error "
               f"({found.attempts:,} in {counted(len(found.groups), 'group')}"
               + (f" of {found.total_groups}" if found.total_groups > len(found.groups) else "")
               + ")")
    print_table(columns, rows)
