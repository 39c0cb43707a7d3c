"""Root `--help`'s list of commands, grouped by what a person is doing (issue 25, point 10).

Apart from app.py because only root --help writes it: a command run, which builds the
same root group, need not compile it (benchmarks/bench_cli_startup.py part 2)."""

from __future__ import annotations

from typing import Any

from runnerq_cli.cli.typer_compat import make_default_short_help

# The sections, in order; a command in none is listed under "Other commands".
HELP_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Set up", ("init-indexes", "dev-server", "config", "completion")),
    ("Run", ("enqueue", "worker", "schedule", "scheduler", "limit")),
    ("Inspect", ("stats", "list", "show", "tree", "events", "result", "wait", "workers", "tail",
                 "queues", "audit", "console")),
    ("Act", ("cancel", "retry", "run-now", "reschedule", "set-priority", "delete", "redrive",
             "purge", "signal", "pause", "resume", "dlq")),
    ("Diagnose", ("doctor", "explain", "metrics")),
)


def write_commands(formatter: Any, rows: dict[str, str]) -> None:
    """Each shown command (name: its help) with its help shortened to the width, under
    the title of its section, in click's formatter."""
    if not rows:
        return
    limit = formatter.width - 6 - max(len(name) for name in rows)
    grouped = {name for _, names in HELP_GROUPS for name in names}
    sections = [*HELP_GROUPS, ("Other commands", tuple(n for n in rows if n not in grouped))]
    for title, names in sections:
        shown = [n for n in names if n in rows]
        if shown:
            with formatter.section(title):
                formatter.write_dl([(n, make_default_short_help(rows[n], limit))
                                    for n in shown])
