"""`runnerq-mongo audit`: the operator actions, newest first (backend/audit.py).

Records live in the events collection and expire with the events (the events
TTL, `events_ttl`).
"""

from __future__ import annotations

import typer

from runnerq_cli.cli.examples import examples
from runnerq_cli.cli.output import OutputFormat, emit, output_option
from runnerq_cli.cli.state import state


def audit(
    ctx: typer.Context,
    since: str | None = typer.Option(None, "--since", metavar="TIME",
                                     help="Only actions at or after TIME (ISO-8601, or a "
                                          "duration ago like 1d)."),
    actor: str | None = typer.Option(None, "--actor", metavar="NAME",
                                     help="Only actions by this actor."),
    action: str | None = typer.Option(None, "--action", metavar="ACTION",
                                      help="Only this action: cancel, retry, run-now, "
                                           "reschedule, set-priority, delete, redrive, purge, "
                                           "pause, resume, dlq-import."),
    limit: int = typer.Option(100, "--limit", min=1, max=10000, help="At most this many."),
    output: OutputFormat = output_option(),
) -> None:
    """Who did what, when and why: operator actions with their activity ids."""
    from runnerq_cli import values

    when = values.time(since, "--since") if since else None
    backend = state(ctx).backend()
    entries = backend.audit(since=when, actor=actor, action=action, limit=limit)
    records = [e.to_json() for e in entries]
    if output is OutputFormat.JSONL:
        emit(output, records)
        return
    if output is OutputFormat.JSON:
        emit(output, {"actions": records})
        return
    if not entries:
        typer.echo("no operator actions recorded")
        return
    for entry in records:
        ids = entry["ids"]
        shown = ", ".join(ids[:5]) + (f", ... ({len(ids) - 5} more)" if len(ids) > 5 else "")
        extra = entry["detail"].get("types")
        typer.echo(f"{entry['timestamp']}  {entry['action']:<12} {entry['actor'] or '-'}  "
                   f"count={entry['count']}"
                   + (f"  types={extra if isinstance(extra, str) else ','.join(extra)}"
                      if extra else "")
                   + (f"  reason={entry['reason']!r}" if entry["reason"] else "")
                   + (f"  ids: {shown}" if ids else ""))


def register(app: typer.Typer) -> None:
    """Add `audit` to the root app."""
    app.command("audit", epilog=examples("audit"))(audit)
