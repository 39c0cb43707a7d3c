"""`runnerq-mongo audit`: the operator actions, newest first (backend/audit.py).

Records live in the events collection and expire with the events (the events
TTL, `events_ttl`).
"""

from __future__ import annotations

from typing import Any

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
    for entry in entries:
        typer.echo(_line(entry))


def _line(entry: Any) -> str:
    """One action, one line: every recorded value escaped, so none can forge a second line."""
    from runnerq_cli.cli.tables import unique_prefixes
    from runnerq_cli.cli.timefmt import stamp
    from runnerq_cli.literal import literal

    ids = [literal(i) for i in entry.ids]
    prefixes = unique_prefixes(ids)
    shown = ", ".join(prefixes[i] for i in ids[:5]) + (
        f", ... ({len(ids) - 5} more)" if len(ids) > 5 else "")
    types = entry.detail.get("types")
    if isinstance(types, list | tuple):
        types = ",".join(literal(t) for t in types)
    parts = [stamp(entry.timestamp), f"{literal(entry.action):<12}",
             literal(entry.actor, max_length=200) if entry.actor else "-",
             f"count={entry.count}"]
    if types:
        parts.append(f"types={literal(types, max_length=200)}")
    if entry.reason:
        parts.append(f"reason='{literal(entry.reason, max_length=500)}'")
    if ids:
        parts.append(f"ids: {shown}")
    return "  ".join(parts)


def register(app: typer.Typer) -> None:
    """Add `audit` to the root app."""
    app.command("audit", epilog=examples("audit"))(audit)
