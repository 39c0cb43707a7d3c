"""Operator actions: `cancel`, `retry`, `redrive`, `run-now`, `reschedule`, `set-priority`, `purge`.

One verb per action (Temporal-CLI style). Commands taking ids act on each
id, report each, and exit non-zero if any failed (the failures' exit code
when they agree, 1 when they differ). Bulk commands (`redrive`, `purge`)
show what they would change with `--dry-run` and need `--yes` to act
without a prompt; without a terminal and without `--yes` they refuse (exit 2).

The logic lives in backend/operator.py; this module parses, confirms and prints.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import typer

from runnerq_cli.cli.output import OutputFormat, emit, error_line, output_option
from runnerq_cli.cli.state import state
from runnerq_cli.errors import ExitCode, InvalidArgument

if TYPE_CHECKING:
    from runnerq_cli.backend.operator import ActionResult

IDS_HELP = "Activity id(s) (UUID)."
YES_HELP = "Act without asking (needed when not on a terminal)."
DRY_RUN_HELP = "Show what would change; change nothing."


def _report(ctx: typer.Context, action: str, ids: list[str], fmt: OutputFormat,
            **kwargs: Any) -> int:
    """Run `action` on every id, print one line (or JSON object) each; return the exit code."""
    backend = state(ctx).backend()
    rows: list[dict[str, Any]] = []
    codes: set[int] = set()
    with backend.errors_translated():
        for activity_id, outcome in zip(ids, backend.iter_actions(action, ids, **kwargs),
                                        strict=True):
            if isinstance(outcome, Exception):
                code = int(getattr(outcome, "exit_code", ExitCode.FAILURE))
                codes.add(code)
                error_line(str(outcome))
                rows.append({"action": action, "id": activity_id.strip(), "ok": False,
                             "error": str(outcome), "exit_code": code})
                continue
            rows.append(outcome.to_json())
            if fmt is OutputFormat.TEXT:
                typer.echo(_describe(outcome))
    if fmt is not OutputFormat.TEXT:
        emit(fmt, rows)
    if not codes:
        return ExitCode.OK
    return codes.pop() if len(codes) == 1 else ExitCode.FAILURE


def _describe(result: ActionResult) -> str:
    from runnerq_cli.backend.models import Priority, to_jsonable

    text = f"{result.action}: {result.activity_id} ({result.activity_type}) " \
           f"{result.previous_status} -> {result.status}"
    detail = result.detail
    if "scheduled_at" in detail:
        text += f", runs at {to_jsonable(detail['scheduled_at'])}"
    if "new_priority" in detail:
        old, new = detail.get("old_priority"), detail["new_priority"]
        name = {int(p): p.name.lower() for p in Priority}
        text += f", priority {name.get(old, old)} -> {name.get(new, new)}"
    return text


def _confirm(question: str, yes: bool) -> None:
    """Go on with --yes, or after a 'y' on a terminal; refuse (exit 2) otherwise."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise InvalidArgument(f"{question.rstrip('?')}: refusing without --yes when not on a "
                              "terminal (use --dry-run to see what would change)")
    if not typer.confirm(question, default=False):  # not confirmed: exit 2, as without --yes
        raise InvalidArgument("not confirmed: nothing changed")


def register(app: typer.Typer) -> None:
    """Add the operator action commands to the root app."""

    @app.command("cancel")
    def cancel(
        ctx: typer.Context,
        ids: list[str] = typer.Argument(..., metavar="ID...", help=IDS_HELP),
        reason: str | None = typer.Option(None, "--reason", help="Recorded in the event."),
        output: OutputFormat = output_option(),
    ) -> None:
        """Cancel pending or scheduled activities (running ones are refused: exit 9)."""
        raise typer.Exit(_report(ctx, "cancel", ids, output, reason=reason))

    @app.command("retry")
    def retry(
        ctx: typer.Context,
        ids: list[str] = typer.Argument(..., metavar="ID...", help=IDS_HELP),
        output: OutputFormat = output_option(),
    ) -> None:
        """Run failed, dead-lettered or cancelled activities again, from attempt 1."""
        raise typer.Exit(_report(ctx, "retry", ids, output))

    @app.command("run-now")
    def run_now(
        ctx: typer.Context,
        activity_id: str = typer.Argument(..., metavar="ID", help="Activity id (UUID)."),
        output: OutputFormat = output_option(),
    ) -> None:
        """Make a scheduled activity (a delay or a retry back-off) pending now."""
        raise typer.Exit(_report(ctx, "run-now", [activity_id], output))

    @app.command("reschedule")
    def reschedule(
        ctx: typer.Context,
        activity_id: str = typer.Argument(..., metavar="ID", help="Activity id (UUID)."),
        at: str | None = typer.Option(None, "--at", metavar="TIME",
                                      help="ISO-8601 time to run at (naive means UTC)."),
        delay: str | None = typer.Option(None, "--delay", metavar="DURATION",
                                         help="Run this long from now (30s, 5m, 2h)."),
        output: OutputFormat = output_option(),
    ) -> None:
        """Schedule a pending or scheduled activity to run at a time."""
        from datetime import UTC, datetime, timedelta

        from runnerq_cli import values

        if (at is None) == (delay is None):
            raise InvalidArgument("give exactly one of --at TIME or --delay DURATION")
        if delay is not None:
            when = datetime.now(UTC) + timedelta(seconds=values.duration(delay, "--delay"))
        else:
            when = values.time(at, "--at", relative=False)
        raise typer.Exit(_report(ctx, "reschedule", [activity_id], output, at=when))

    @app.command("set-priority")
    def set_priority(
        ctx: typer.Context,
        activity_id: str = typer.Argument(..., metavar="ID", help="Activity id (UUID)."),
        priority: str = typer.Argument(..., metavar="PRIORITY",
                                       help="low, normal, high, critical or 1-4."),
        output: OutputFormat = output_option(),
    ) -> None:
        """Change the priority of a pending or scheduled activity."""
        raise typer.Exit(_report(ctx, "set-priority", [activity_id], output, priority=priority))

    @app.command("redrive")
    def redrive(
        ctx: typer.Context,
        types: list[str] | None = typer.Option(None, "--type", "-t", metavar="TYPE",
                                               help="Only this activity type (repeatable)."),
        dry_run: bool = typer.Option(False, "--dry-run", help=DRY_RUN_HELP),
        yes: bool = typer.Option(False, "--yes", "-y", help=YES_HELP),
        output: OutputFormat = output_option(),
    ) -> None:
        """Move every dead-lettered activity back to pending (from attempt 1)."""
        backend = state(ctx).backend()
        with backend.errors_translated():
            report = backend.redrive(types, dry_run=True)
            if not dry_run and (report.count or report.stale_records):
                if report.count:
                    _confirm(f"Redrive {report.count} dead-lettered activities?", yes)
                # Exactly the ones shown and confirmed, not any dead-lettered since.
                report = backend.redrive(types, ids=[a["id"] for a in report.activities])
        if output is not OutputFormat.TEXT:
            emit(output, report.to_json())
            return
        verb = "would redrive" if dry_run else "redrove"
        for item in report.activities:
            typer.echo(f"{verb}: {item['id']} ({item['activity_type']})")
        typer.echo(f"{verb} {report.count} activities"
                   + (f"; {report.stale_records} stale dead-letter records "
                      f"{'would be ' if dry_run else ''}removed" if report.stale_records else ""))

    @app.command("purge")
    def purge(
        ctx: typer.Context,
        dry_run: bool = typer.Option(False, "--dry-run", help=DRY_RUN_HELP),
        yes: bool = typer.Option(False, "--yes", "-y", help=YES_HELP),
        output: OutputFormat = output_option(),
    ) -> None:
        """Apply retention now: delete terminal activities past it, with results and events."""
        backend = state(ctx).backend()
        with backend.errors_translated():
            counts = backend.purge_preview()
            if not dry_run and sum(counts.values()):
                _confirm(f"Delete {sum(counts.values())} activities past their retention?", yes)
                counts = backend.purge(limits=counts)  # no more than was confirmed
        data = {"action": "purge", "dry_run": dry_run, **counts, "total": sum(counts.values())}
        if output is not OutputFormat.TEXT:
            emit(output, data)
            return
        verb = "would purge" if dry_run else "purged"
        typer.echo(f"{verb} {data['total']} activities ({counts.get('completed', 0)} completed, "
                   f"{counts.get('failed', 0)} failed, dead-lettered or cancelled)")
