"""The root command's list of commands, written out, so root `--help` (and a misspelt
command's "Did you mean ...?") imports no command module (issue 41).

Each row is (name, hidden, the first paragraph of its help), in the order root --help
lists them: what `_LazyRootGroup` needs to list a command without loading it
(cli/app.py). Generated from the live commands; after adding a command or changing
the first paragraph of a command's help:

    python -m runnerq_cli.cli.summary_writer --write   # regenerate this file
    python -m runnerq_cli.cli.summary_writer --check   # exit 1 if stale (tests/test_import_cost.py)

Data only: the writer (summary_writer.py) imports the app, which imports this.
"""

from __future__ import annotations

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

