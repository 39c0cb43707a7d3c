"""Inspection commands: list, show, events, result, wait, workers.

Read-only. Each is one or two indexed queries (backend/inspection.py,
backend/pagination.py); nothing here scans the queue.
"""

from __future__ import annotations

import typer

from runnerq_cli.cli.choices import STATUSES, completer
from runnerq_cli.cli.examples import examples
from runnerq_cli.cli.output import OutputFormat, output_option


def _ago(value: object, now: object) -> str:
    from runnerq_cli.values import format_duration

    if value is None:
        return "-"
    return format_duration((now - value).total_seconds()) + " ago"  # type: ignore[operator]


def _short_time(value: object) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value is not None else "-"  # type: ignore[attr-defined]


def list_cmd(
    ctx: typer.Context,
    status: str = typer.Argument(..., metavar="STATUS", autocompletion=completer(STATUSES),
                                 help="pending, scheduled, processing (running), completed, "
                                      "failed, dead-letter or cancelled."),
    activity_type: str | None = typer.Option(None, "--type", metavar="TYPE",
                                             help="Only this activity type."),
    since: str | None = typer.Option(None, "--since", metavar="TIME",
                                     help="Only those since TIME (created, started or finished, "
                                          "by status; ISO-8601 or a duration ago like 1h)."),
    metadata: list[str] | None = typer.Option(None, "--metadata", metavar="KEY=VALUE",
                                              help="Only with this metadata tag (repeatable)."),
    limit: int = typer.Option(50, "--limit", min=1, max=1000, help="Page size."),
    after: str | None = typer.Option(None, "--after", metavar="CURSOR",
                                     help="The next page: the cursor the previous page printed."),
    output: OutputFormat = output_option(),
) -> None:
    """List activities in one status, one page at a time (stable under concurrent inserts)."""
    import sys

    from runnerq_cli import values
    from runnerq_cli.backend.models import Priority, Status
    from runnerq_cli.backend.pagination import ListFilter, parse_metadata
    from runnerq_cli.cli.output import console, emit
    from runnerq_cli.cli.state import state

    parsed = Status.parse(status)
    filters = ListFilter(activity_type=activity_type,
                         since=values.time(since, "--since") if since else None,
                         metadata=parse_metadata(metadata or [], "--metadata"))
    backend = state(ctx).backend()
    page = backend.list_page(parsed, filters=filters, limit=limit, after=after)
    if output is OutputFormat.JSON:
        emit(output, {"status": parsed.value, "items": [a.to_json() for a in page.items],
                      "next_cursor": page.next_cursor})
        return
    if output is OutputFormat.JSONL:
        emit(output, [a.to_json() for a in page.items])
    else:
        from rich.table import Table

        time_col = {"pending": "created", "scheduled": "due", "processing": "lease until"}.get(
            parsed.value, "finished")
        table = Table(box=None, header_style="bold", pad_edge=False)
        for col in ("id", "type", "priority", "status", "retries", time_col, "last error"):
            table.add_column(col, min_width=36 if col == "id" else None, overflow="fold",
                             no_wrap=col == "id")
        for act in page.items:
            when = {"pending": act.created_at, "scheduled": act.scheduled_at,
                    "processing": act.lease_deadline}.get(parsed.value, act.completed_at)
            prio = Priority.label(act.priority)
            table.add_row(str(act.id), act.activity_type, prio, act.display_status,
                          f"{act.retry_count}/{act.max_retries or '∞'}", _short_time(when),
                          (act.last_error or "")[:60])
        out = console()
        if page.items:
            out.print(table)
        else:
            out.print(f"no {parsed.value.replace('_', '-')} activities")
    if page.next_cursor:
        sys.stderr.write(f"next page: --after {page.next_cursor}\n")
        sys.stderr.flush()


def show_cmd(
    ctx: typer.Context,
    activity_id: str = typer.Argument(..., metavar="ID"),
    output: OutputFormat = output_option(),
) -> None:
    """Every field of an activity, its payload, last error, result and event timeline."""
    import json

    from runnerq_cli.backend.models import Priority, to_jsonable
    from runnerq_cli.cli.eventfmt import event_line, event_record
    from runnerq_cli.cli.output import console, emit
    from runnerq_cli.cli.state import state

    backend = state(ctx).backend()
    act = backend.get_activity(activity_id)
    result = backend.get_result(act.id)
    events = list(reversed(backend.get_activity_events(act.id, limit=1000)))
    if output is not OutputFormat.TEXT:
        emit(output, {"activity": {**act.to_json(), "extra": to_jsonable(act.extra)},
                      "result": result.to_json() if result else None,
                      "events": [event_record(e) for e in events]})
        return
    from rich.table import Table

    out = console()
    fields = Table(box=None, show_header=False, pad_edge=False)
    fields.add_column(style="bold")
    fields.add_column(overflow="fold")
    data = act.to_json()
    if act.priority in {int(p) for p in Priority}:
        data["priority"] = f"{Priority.label(act.priority)} ({act.priority})"
    if act.display_status != act.status:
        data["status"] = f"{act.status} ({act.display_status})"
    for name, value in data.items():
        if name in ("payload", "display_status", "last_error"):
            continue
        if isinstance(value, dict):
            value = json.dumps(value) if value else "-"
        fields.add_row(name, "-" if value is None else str(value))
    for name, value in to_jsonable(act.extra).items():
        fields.add_row(name, json.dumps(value) if not isinstance(value, str) else value)
    out.print(fields)
    out.print("\n[bold]payload[/bold]")
    out.print(json.dumps(to_jsonable(act.payload), indent=2), markup=False)
    if act.last_error:
        out.print("\n[bold]last error[/bold]")
        out.print(act.last_error, markup=False, style="red")
    out.print("\n[bold]result[/bold]")
    if result is None:
        out.print("(none)")
    else:
        out.print(f"{result.state}: " + json.dumps(to_jsonable(result.data), indent=2),
                  markup=False)
    out.print("\n[bold]events[/bold]")
    for event in events:
        out.print(event_line(event))
    if not events:
        out.print("(none)")


def events_cmd(
    ctx: typer.Context,
    activity_id: str = typer.Argument(..., metavar="ID"),
    limit: int = typer.Option(100, "--limit", min=1, max=10_000,
                              help="Keep the newest N (still printed oldest first), like "
                                   "`tail -n`."),
    output: OutputFormat = output_option(),
) -> None:
    """The event timeline of one activity, printed oldest first (--limit keeps the newest)."""
    from runnerq_cli.cli.eventfmt import event_line, event_record
    from runnerq_cli.cli.output import console, emit
    from runnerq_cli.cli.state import state

    backend = state(ctx).backend()
    act = backend.get_activity(activity_id)  # NotFound (exit 4) for an unknown id
    events = list(reversed(backend.get_activity_events(act.id, limit=limit)))
    if output is not OutputFormat.TEXT:
        emit(output, [event_record(e) for e in events] if output is OutputFormat.JSONL
             else {"activity_id": str(act.id), "events": [event_record(e) for e in events]})
        return
    out = console()
    for event in events:
        out.print(event_line(event))
    if not events:
        out.print("(no events)")


def result_cmd(
    ctx: typer.Context,
    activity_id: str = typer.Argument(..., metavar="ID"),
    output: OutputFormat = output_option(),
) -> None:
    """Print an activity's result; the exit code says its state (docs/reference.md)."""
    import json
    import sys

    from runnerq_cli.backend.models import parse_activity_id, to_jsonable
    from runnerq_cli.cli.output import emit, error_line
    from runnerq_cli.cli.state import state
    from runnerq_cli.cli.waiting import code_for_result
    from runnerq_cli.errors import ExitCode

    aid = parse_activity_id(activity_id)
    backend = state(ctx).backend()
    result = backend.get_result(aid)
    act = None
    if result is None:
        act = backend.get_activity(aid)  # NotFound: exit 4
    if result is None:
        assert act is not None
        code = ExitCode.ACTIVITY_CANCELLED if act.status == "cancelled" else ExitCode.NO_RESULT
        if output is not OutputFormat.TEXT:
            emit(output, {"activity_id": str(aid), "state": None, "data": None,
                          "status": act.status, "exit_code": int(code)})
        error_line(f"activity {aid} has no result ({act.display_status})")
        raise typer.Exit(int(code))
    code = code_for_result(result)
    if output is not OutputFormat.TEXT:
        emit(output, {**result.to_json(), "exit_code": int(code)})
    else:
        data = to_jsonable(result.data)
        sys.stdout.write((data if isinstance(data, str) else json.dumps(data, indent=2)) + "\n")
    if code is not ExitCode.OK:
        error_line(f"activity {aid} result is Err: {json.dumps(to_jsonable(result.data))}")
    raise typer.Exit(int(code))


def wait_cmd(
    ctx: typer.Context,
    activity_id: str = typer.Argument(..., metavar="ID"),
    timeout: str | None = typer.Option(None, "--timeout", metavar="DURATION",
                                       help="Give up after this long (exit 13); "
                                            "default: wait forever."),
    output: OutputFormat = output_option(),
) -> None:
    """Block until the activity is terminal, print its result, exit by its outcome."""
    from runnerq_cli import values
    from runnerq_cli.cli.state import state
    from runnerq_cli.cli.waiting import report

    seconds = values.duration(timeout, "--timeout") if timeout else None
    backend = state(ctx).backend()
    outcome = backend.wait(activity_id, seconds)
    raise typer.Exit(report(outcome, output))


def workers_cmd(
    ctx: typer.Context,
    stale_after: str = typer.Option("30s", "--stale-after", metavar="DURATION",
                                    help="No heartbeat for this long: shown as stale."),
    output: OutputFormat = output_option(),
) -> None:
    """Workers in the registry: id, host, pid, types, in flight, counters, last seen."""
    from runnerq_cli import values
    from runnerq_cli.cli.output import console, emit
    from runnerq_cli.cli.state import state

    stale_seconds = values.duration(stale_after, "--stale-after")
    backend = state(ctx).backend()
    workers = backend.list_workers(stale_seconds)
    now = backend.now()
    pause = backend.paused()
    if output is not OutputFormat.TEXT:
        records = [{**w.to_json(), "paused": pause.covers(w.types)} for w in workers]
        emit(output, records if output is OutputFormat.JSONL
             else {"workers": records, "pause": pause.to_json()})
        return
    from rich.table import Table

    out = console()
    if pause.active:
        out.print(f"[bold yellow]queue {pause.describe()}[/]")
    if not workers:
        out.print("no workers registered")
        return
    table = Table(box=None, header_style="bold", pad_edge=False)
    for col in ("worker", "host", "pid", "types", "in flight", "claimed", "ok", "retried",
                "failed", "dead", "lost", "last seen", "state"):
        table.add_column(col, overflow="fold")
    for w in workers:
        c = w.counters
        table.add_row(w.worker_id, w.host, str(w.pid), ",".join(w.types) or "*",
                      f"{w.in_flight}/{w.concurrency}", str(c.get("claimed", 0)),
                      str(c.get("succeeded", 0)), str(c.get("retried", 0)),
                      str(c.get("failed", 0)), str(c.get("dead_lettered", 0)),
                      str(c.get("claims_lost", 0)), _ago(w.last_heartbeat, now),
                      "[red]stale[/red]" if w.stale else "[yellow]paused[/yellow]"
                      if pause.covers(w.types) else "[green]live[/green]")
    out.print(table)


def register(app: typer.Typer) -> None:
    """Add list, show, events, result, wait and workers to the root app."""
    app.command("list", epilog=examples("list"))(list_cmd)
    app.command("show", epilog=examples("show"))(show_cmd)
    app.command("events", epilog=examples("events"))(events_cmd)
    app.command("result", epilog=examples("result"))(result_cmd)
    app.command("wait", epilog=examples("wait"))(wait_cmd)
    app.command("workers", epilog=examples("workers"))(workers_cmd)
