"""`runnerq-mongo audit`: the operator actions, newest first (backend/ops/audit.py).

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
    limit: int = typer.Option(100, "--limit", min=1, max=10000,
                              help="At most this many (1 to 10,000)."),
    output: OutputFormat = output_option(),
) -> None:
    """Who did what, when and why: operator actions with their activity ids. A run that was
    stopped midway (a signal, a crash) is shown INTERRUPTED with how far it got."""
    from runnerq_cli import filter_values, times

    when = times.optional_time(since, "--since")
    filter_values.filter_term(actor, "--actor")
    filter_values.filter_term(action, "--action")
    backend = state(ctx).backend()
    entries = backend.audit_log.audit(since=when, actor=actor, action=action, limit=limit)
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
    from runnerq_cli.cli.words import screen_width, wrap

    width = screen_width()
    for entry, record in zip(entries, records, strict=True):
        # Folded between words to the screen's width; a record's later lines are indented,
        # so only a record starts at the margin (a reason can never forge one).
        for line in wrap("", _line(entry.timestamp, record), "    ", width):
            typer.echo(line)


def _line(when: Any, entry: dict[str, Any]) -> str:
    """One record as one text; every recorded text through literal() (no line breaks)."""
    from runnerq_cli.cli.tables import unique_prefixes
    from runnerq_cli.cli.timefmt import stamp
    from runnerq_cli.literal import literal

    detail = entry["detail"]
    ids = [literal(i) for i in entry["ids"]]
    prefixes = unique_prefixes(ids)
    shown = ", ".join(prefixes[i] for i in ids[:5]) + (
        f", ... ({len(ids) - 5} more)" if len(ids) > 5 else "")
    extra = detail.get("types")
    types = literal(extra, max_length=200) if isinstance(extra, str) else (
        ",".join(literal(t) for t in extra) if isinstance(extra, list) else None)
    who = literal(entry["actor"] or "-", max_length=200)
    if detail.get("os_user"):
        who += f" (os {literal(detail['os_user'])}@{literal(detail.get('host') or '?')})"
    state = entry.get("state") or "done"
    text = f"{stamp(when)}  {literal(entry['action']):<12} {who}  count={entry['count']}"
    if state != "done":
        text += f"  {literal(state).upper()}"
        if detail.get("last_id") or detail.get("last_line"):
            text += (f" (last id {literal(detail['last_id'])})" if detail.get("last_id")
                     else f" (last line {literal(detail['last_line'])})")
    if types:
        text += f"  types={types}"
    if entry["reason"]:
        text += f"  reason='{literal(entry['reason'], max_length=500)}'"
    if ids:
        text += f"  ids: {shown}"
    return text


def register(app: typer.Typer) -> None:
    """Add `audit` to the root app."""
    app.command("audit", epilog=examples("audit"))(audit)
