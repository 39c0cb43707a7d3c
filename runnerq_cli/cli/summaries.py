"""The root command's list of commands, written out, so root `--help` (and a misspelt
command's "Did you mean ...?") imports no command module (issue 41).

Each row is (name, hidden, the first paragraph of its help), in the order root --help
lists them: what `_LazyRootGroup` needs to list a command without loading it
(cli/app.py). Generated from the live commands; after adding a command or changing
the first paragraph of a command's help:

    python -m runnerq_cli.cli.summaries --write     # regenerate this file
    python -m runnerq_cli.cli.summaries --check     # exit 1 if stale (tests/test_import_cost.py)
"""

from __future__ import annotations

import sys
from pathlib import Path

# (name, hidden, the first paragraph of its help)
SUMMARIES: tuple[tuple[str, bool, str], ...] = (
    # generated: begin
    ('init-indexes', False,
     "Create the queue's collections and indexes (idempotent; conflicts are never "
     'dropped).'),
    ('enqueue', False,
     'Enqueue one activity of TYPE, or many from an NDJSON file with --from.'),
    ('dev-server', False,
     'Run a local MongoDB-compatible dev server (mongoeco) until Ctrl-C or SIGTERM.'),
    ('worker', False,
     "Run handlers for the queue's activities under leases, until stopped."),
    ('console', False,
     "Serve a web console for the queue: RunnerQ's observability API and our page."),
    ('stats', False,
     'Counts by status and priority, oldest pending, throughput, latency, workers.'),
    ('list', False,
     'List activities in one status, one page at a time (stable under concurrent '
     'inserts).'),
    ('show', False,
     'Every field of an activity, its payload, last error, result and event timeline.'),
    ('events', False,
     'The event timeline of one activity, printed oldest first (--limit keeps the '
     'newest).'),
    ('result', False,
     "Print an activity's result; the exit code says its state (docs/reference.md)."),
    ('wait', False,
     'Block until the activity is terminal, print its result, exit by its outcome.'),
    ('workers', False,
     'Workers in the registry: id, host, pid, types, in flight, counters, last seen.'),
    ('cancel', False,
     'Cancel pending, scheduled, waiting or running activities (running ones through '
     'their claim: by a filter only with --status processing).'),
    ('retry', False,
     'Run failed, dead-lettered or cancelled activities again, from attempt 1.'),
    ('run-now', False,
     'Make scheduled activities (a delay or a retry back-off) or waiting ones pending '
     'now.'),
    ('reschedule', False,
     'Schedule pending or scheduled activities to run at a time.'),
    ('set-priority', False,
     'Change the priority of pending or scheduled activities.'),
    ('delete', False,
     'Delete terminal activities with their results and events (recorded in the '
     'audit).'),
    ('redrive', False,
     'Move every dead-lettered activity back to pending (from attempt 1).'),
    ('purge', False,
     'Apply retention now: delete terminal activities past it, with results and '
     'events.'),
    ('signal', False,
     'Send a signal to a running or waiting durable activity (a waiting one wakes).'),
    ('tree', False,
     "An activity's whole tree: every member's state, steps and what it waits for."),
    ('pause', False,
     'Stop workers claiming from the queue (or these types); running work finishes.'),
    ('resume', False,
     'Let workers claim again (everything, or these paused types). With nothing to '
     'resume, nothing is written (no audit record).'),
    ('scheduler', False,
     "Fire the queue's due schedules, alone (workers also fire them: run this for one "
     'place of firing). Stops at SIGINT or SIGTERM; a server away is tried again.'),
    ('audit', False,
     'Who did what, when and why: operator actions with their activity ids. A run that '
     'was stopped midway (a signal, a crash) is shown INTERRUPTED with how far it got.'),
    ('doctor', False,
     'Is this deployment healthy? One check per line, each problem with its fix.'),
    ('explain', False,
     "Why isn't this activity running? A sentence, then the facts behind it."),
    ('queues', False,
     'Every RunnerQ queue in the database, with counts, oldest pending age and '
     'workers.'),
    ('config', False,
     'Show the effective configuration.'),
    ('tail', False,
     'Follow what happens on the queue.'),
    ('schedule', False,
     'Recurring schedules: cron or intervals that fire exactly once across the fleet.'),
    ('limit', False,
     'Flow limits: at most N running per type or per key, rates, across the fleet.'),
    ('dlq', False,
     'Export and import dead-lettered activities.'),
    ('metrics', False,
     'Queue metrics for Prometheus.'),
    ('completion', False,
     'Shell completion scripts (bash, zsh, fish).'),
    # generated: end
)


def live() -> tuple[tuple[str, bool, str], ...]:
    """The rows as the registered commands give them (imports every command module)."""
    from runnerq_cli.cli.app import _root_command, build_app

    group = _root_command(build_app())
    rows = []
    for name in group.list_commands(None):
        text, hidden = group._summaries[name]
        first = text.split("\n\n", 1)[0]  # the short help reads the first paragraph only
        rows.append((name, hidden, " ".join(first.split())))
    return tuple(rows)


def _wrapped(text: str, width: int = 80) -> str:
    """`text` as adjacent string literals of at most `width` characters, one a line."""
    pieces, line = [], ""
    for word in text.split(" "):
        if line and len(line) + 1 + len(word) > width:
            pieces.append(line + " ")
            line = word
        else:
            line = f"{line} {word}" if line else word
    pieces.append(line)
    return "\n".join(f"     {piece!r}" for piece in pieces)


def _source(rows: tuple[tuple[str, bool, str], ...]) -> str:
    text = Path(__file__).read_text(encoding="utf-8")
    head, rest = text.split("    # generated: begin\n", 1)
    _, tail = rest.split("    # generated: end\n", 1)
    body = "".join(f"    ({name!r}, {hidden!r},\n{_wrapped(help_text)}),\n"
                   for name, hidden, help_text in rows)
    return f"{head}    # generated: begin\n{body}    # generated: end\n{tail}"


def main(argv: list[str] | None = None) -> int:
    """`--write` regenerates this file; `--check` exits 1 when it is stale."""
    args = sys.argv[1:] if argv is None else argv
    wanted = _source(live())
    if args == ["--write"]:
        Path(__file__).write_text(wanted, encoding="utf-8")
        return 0
    if args == ["--check"]:
        if Path(__file__).read_text(encoding="utf-8") == wanted:
            return 0
        print("runnerq_cli/cli/summaries.py is stale: python -m runnerq_cli.cli.summaries "
              "--write", file=sys.stderr)
        return 1
    print("usage: python -m runnerq_cli.cli.summaries --write|--check", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
