"""Inspection commands: list, show, events, result, wait, workers.

Read-only. Each is one or two indexed queries (backend/views/inspection.py,
backend/domain/pagination.py); nothing here scans the queue.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

from runnerq_cli.cli.choices import STATUSES, completer
from runnerq_cli.cli.examples import examples
from runnerq_cli.cli.output import OutputFormat, output_option
from runnerq_cli.plural import counted

if TYPE_CHECKING:
    from runnerq_cli.backend.api import RunnerQ

ID_HELP = "The activity's id, or its first 8 or more hex digits (as text views show it)."


def _ago(value: object, now: object) -> str:
    from runnerq_cli.times import format_duration

    if value is None:
        return "-"
    return format_duration((now - value).total_seconds()) + " ago"  # type: ignore[operator]


def _print_list(status: str, items: list[Any], backend: RunnerQ) -> None:
    """`list` as text: a table that fits the screen, ids as unique prefixes."""
    from runnerq_cli.backend.domain.models import Priority
    from runnerq_cli.backend.domain.progress import progress_text
    from runnerq_cli.cli.output import console
    from runnerq_cli.cli.tables import Column, print_table, unique_prefixes
    from runnerq_cli.cli.timefmt import stamp

    if not items:
        console(markup=False).print(f"no {status.replace('_', '-')} activities")
        return
    if status == "waiting":
        _print_waiting(items, backend)
        return
    time_col = {"pending": "created", "scheduled": "due", "processing": "lease until"}.get(
        status, "finished")
    # The status column says something only where it differs from the one listed
    # (retrying among scheduled, running for processing): else it is left out.
    same = all(a.display_status == status for a in items)
    # The error is what a failed list is read for: below its room the time goes too.
    columns = [Column("id"), Column("type", style="bold"), Column("priority", drop=4),
               Column("status", drop=3), Column("tries", drop=2, right=True),
               Column(time_col, drop=1), Column("last error", flexible=True, style="red")]
    # Running work is read for how far it got: its progress where any reported one
    # (docs/design.md, "Progress"), in the room the last error has elsewhere.
    progress = status == "processing" and any("progress" in a.extra for a in items)
    if progress:
        columns[-1] = Column("progress", flexible=True)
    prefixes = unique_prefixes([a.id for a in items])
    rows = []
    for act in items:
        when = {"pending": act.created_at, "scheduled": act.scheduled_at,
                "processing": act.lease_deadline}.get(status, act.completed_at)
        last = (progress_text(act.extra.get("progress")) or "") if progress \
            else act.last_error or ""
        rows.append([prefixes[str(act.id)], act.activity_type, Priority.label(act.priority),
                     act.display_status, f"{act.attempts}/{act.max_retries or '∞'}",
                     stamp(when), last])
    if same:
        del columns[3]
        for row in rows:
            del row[3]
    print_table(columns, rows)


def _print_waiting(items: list[Any], backend: RunnerQ) -> None:
    """`list waiting` as text: what each waits for (an awaited child's state: one read
    for the page), and when it wakes by itself."""
    from runnerq_cli.cli.tables import Column, print_table, unique_prefixes
    from runnerq_cli.cli.timefmt import stamp

    columns = [Column("id"), Column("type", style="bold"), Column("wakes", drop=1),
               Column("waiting for", flexible=True)]
    prefixes = unique_prefixes([a.id for a in items])
    rows = []
    for act, wait in zip(items, _waits_of(items, backend), strict=True):
        rows.append([prefixes[str(act.id)], act.activity_type, stamp(act.scheduled_at),
                     wait.describe(stamp) if wait else ""])
    print_table(columns, rows)


def _items_json(items: list[Any], backend: RunnerQ) -> list[dict[str, Any]]:
    """The listed activities as JSON; a waiting one's with what it waits for, as `show -o
    json` has it (`waiting`; an awaited child's state: one read for the page)."""
    rows = [act.to_json() for act in items]
    waiting = [(row, act) for row, act in zip(rows, items, strict=True)
               if act.status == "waiting"]
    if waiting:
        waits = _waits_of([act for _, act in waiting], backend)
        for (row, _), wait in zip(waiting, waits, strict=True):
            row["waiting"] = wait.to_json() if wait else None
    return rows


def _waits_of(items: list[Any], backend: RunnerQ) -> list[Any]:
    """What each listed activity waits for (None unless waiting), an awaited child's
    state read once for all of them."""
    return list(backend.trees.waits([{**act.extra, "status": act.status,
                                      "scheduled_at": act.scheduled_at} for act in items]))


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
    error_contains: str | None = typer.Option(
        None, "--error-contains", metavar="TEXT",
        help="Only those whose last error contains TEXT (plain, case-sensitive)."),
    key: str | None = typer.Option(None, "--key", metavar="KEY",
                                   help="Only those enqueued with this flow key "
                                        "(`list pending --type T --key K`: a key's backlog)."),
    limit: int = typer.Option(50, "--limit", min=1, max=1000, help="Page size (1 to 1,000)."),
    after: str | None = typer.Option(None, "--after", metavar="CURSOR",
                                     help="The next page: the cursor the previous page printed."),
    output: OutputFormat = output_option(),
) -> None:
    """List activities in one status, one page at a time (stable under concurrent inserts)."""
    import sys

    from runnerq_cli import filter_values, times
    from runnerq_cli.backend.domain.models import Status
    from runnerq_cli.backend.domain.pagination import ListFilter, parse_metadata
    from runnerq_cli.backend.domain.specs import flow_key
    from runnerq_cli.cli.output import emit
    from runnerq_cli.cli.state import state

    parsed = Status.parse(status)
    filter_values.filter_term(activity_type, "--type")
    filter_values.filter_term(after, "--after", " (leave it out for the first page)")
    filters = ListFilter(activity_type=activity_type,
                         since=times.optional_time(since, "--since"),
                         metadata=parse_metadata(metadata or [], "--metadata"),
                         error_contains=error_contains,
                         key=None if key is None else flow_key(key, "--key"))
    backend = state(ctx).backend()
    page = backend.inspector.list_page(parsed, filters=filters, limit=limit, after=after)
    if page.skipped:  # never "no activities" without a word on those it could not read
        sys.stderr.write(f"skipped {counted(page.skipped, 'malformed activity')} "
                         "(runnerq-mongo doctor names them)\n")
    if not page.items and not page.skipped and after is None:
        from runnerq_cli.cli.state import warn_if_missing

        warn_if_missing(backend)  # nothing there, or not that queue?
    if output is OutputFormat.JSON:
        emit(output, {"status": parsed.value, "items": _items_json(page.items, backend),
                      "next_cursor": page.next_cursor, "skipped": page.skipped})
        return
    if output is OutputFormat.JSONL:
        emit(output, _items_json(page.items, backend))
    else:
        _print_list(parsed.value, page.items, backend)
    if page.next_cursor:
        sys.stderr.write(f"next page: --after {page.next_cursor}\n")
        sys.stderr.flush()


def show_cmd(
    ctx: typer.Context,
    activity_id: str = typer.Argument(..., metavar="ID", help=ID_HELP),
    output: OutputFormat = output_option(),
) -> None:
    """Every field of an activity, its payload, last error, result and event timeline."""
    from runnerq_cli.backend.domain.models import MalformedDocument, to_jsonable
    from runnerq_cli.cli.eventfmt import event_record
    from runnerq_cli.cli.ids import activity_id as resolve_id
    from runnerq_cli.cli.output import emit, warning_line
    from runnerq_cli.cli.state import state

    backend = state(ctx).backend()
    act = backend.get_activity(resolve_id(backend, activity_id))
    try:
        result = backend.get_result(act.id)
    except MalformedDocument as exc:  # another program's result: the activity still shows
        warning_line(str(exc))
        result = None
    events = list(reversed(backend.get_activity_events(act.id, limit=1000)))
    wait = backend.trees.wait({**act.extra, "status": act.status,
                               "scheduled_at": act.scheduled_at})
    if output is not OutputFormat.TEXT:
        emit(output, {"activity": {**act.to_json(), "extra": to_jsonable(act.extra)},
                      "waiting": wait.to_json() if wait else None,
                      "progress": to_jsonable(act.extra.get("progress")),
                      "result": result.to_json() if result else None,
                      "events": [event_record(e) for e in events]})
        return
    _print_show(act, result, events, wait)


def _field_text(value: Any) -> str:
    """A field's value in words: times in the one format, structures as compact JSON."""
    import json
    from datetime import datetime

    from runnerq_cli.backend.domain.models import to_jsonable
    from runnerq_cli.cli.timefmt import stamp

    if value is None or value == {} or value == []:
        return "-"
    if isinstance(value, datetime):
        return stamp(value)
    if isinstance(value, dict | list | tuple):
        return json.dumps(to_jsonable(value), ensure_ascii=False)
    return str(to_jsonable(value))


def _progress_line(progress: Any) -> str:
    """`40/100 (40%) copying, attempt 2, at <time>` (docs/design.md, "Progress")."""
    from runnerq_cli.backend.domain.progress import progress_text

    text = progress_text(progress)
    if text is None:
        return _field_text(progress)
    if isinstance(progress.get("attempt"), int):
        text += f", attempt {progress['attempt']}"
    if progress.get("updated_at") is not None:
        text += f", at {_field_text(progress['updated_at'])}"
    return text


def _print_show(act: Any, result: Any, events: list[Any], wait: Any = None) -> None:
    """`show` as text: name/value lines, the payload, last error, result and events."""
    import json

    from rich.text import Text

    from runnerq_cli.backend.domain.models import Priority, to_jsonable
    from runnerq_cli.cli.eventfmt import event_line
    from runnerq_cli.cli.output import console
    from runnerq_cli.literal import literal

    out = console(markup=False)
    rows: list[tuple[str, str]] = [("id", str(act.id))]
    for name in act._FIELDS:
        if name in ("payload", "last_error"):
            continue
        rows.append((name, _field_text(getattr(act, name))))
    shown = dict(rows)
    if act.priority in {int(p) for p in Priority}:
        shown["priority"] = f"{Priority.label(act.priority)} ({act.priority})"
    if act.display_status != act.status:
        shown["status"] = f"{act.status} ({act.display_status})"
    if wait is not None:  # what a parked durable activity waits for, in words
        from runnerq_cli.cli.timefmt import stamp

        shown["status"] = f"{act.status}: {wait.describe(stamp)}"
    for name, value in act.extra.items():
        shown[str(name)] = _field_text(value)
    if "progress" in act.extra:  # a running handler's report, in words
        shown["progress"] = _progress_line(act.extra["progress"])
    width = max(len(literal(n)) for n in shown)
    for name, value in shown.items():
        line = Text(f"{literal(name):<{width}}", style="bold")
        line.append(f"  {literal(value)}")
        out.print(line, soft_wrap=True)

    def heading(title: str) -> None:
        out.print()
        out.print(Text(title, style="bold"))

    heading("payload")
    # JSON escapes every control character (ensure_ascii: bidi overrides too).
    out.print(json.dumps(to_jsonable(act.payload), indent=2), soft_wrap=True)
    if act.last_error:
        heading("last error")
        out.print(Text(literal(act.last_error), style="red"), soft_wrap=True)
    heading("result")
    if result is None:
        out.print("(none)")
    else:
        out.print(f"{literal(result.state)}: " + json.dumps(to_jsonable(result.data), indent=2),
                  soft_wrap=True)
    heading("events")
    for event in events:  # on a terminal cut between fields to fit, as `tail` does
        out.print(event_line(event))
    if not events:
        out.print("(none)")


def events_cmd(
    ctx: typer.Context,
    activity_id: str = typer.Argument(..., metavar="ID", help=ID_HELP),
    limit: int = typer.Option(100, "--limit", min=1, max=10_000,
                              help="Keep the newest N, 1 to 10,000 (still printed oldest "
                                   "first), like `tail -n`."),
    output: OutputFormat = output_option(),
) -> None:
    """The event timeline of one activity, printed oldest first (--limit keeps the newest)."""
    from runnerq_cli.backend.domain.models import MalformedDocument
    from runnerq_cli.cli.eventfmt import event_line, event_record
    from runnerq_cli.cli.ids import activity_id as resolve_id
    from runnerq_cli.cli.output import console, emit, warning_line
    from runnerq_cli.cli.state import state

    backend = state(ctx).backend()
    aid = resolve_id(backend, activity_id)
    try:
        backend.get_activity(aid)  # NotFound: exit 4
    except MalformedDocument as exc:  # it exists: its stored events say what became of it
        warning_line(str(exc))
    events = list(reversed(backend.get_activity_events(aid, limit=limit)))
    if output is not OutputFormat.TEXT:
        emit(output, [event_record(e) for e in events] if output is OutputFormat.JSONL
             else {"activity_id": str(aid), "events": [event_record(e) for e in events]})
        return
    out = console(markup=False)
    for event in events:
        out.print(event_line(event))
    if not events:
        out.print("(no events)")


def result_cmd(
    ctx: typer.Context,
    activity_id: str = typer.Argument(..., metavar="ID", help=ID_HELP),
    output: OutputFormat = output_option(),
) -> None:
    """Print an activity's result; the exit code says its state (docs/reference.md)."""
    import json
    import sys

    from runnerq_cli.backend.domain.models import to_jsonable
    from runnerq_cli.cli.exits import ExitCode
    from runnerq_cli.cli.ids import activity_id as resolve_id
    from runnerq_cli.cli.output import emit, error_line
    from runnerq_cli.cli.state import state
    from runnerq_cli.cli.wait_report import code_for_result, with_id

    backend = state(ctx).backend()
    aid = resolve_id(backend, activity_id)
    result = backend.get_result(aid)
    act = None
    if result is None:
        act = backend.get_activity(aid)  # NotFound: exit 4
    if result is None:
        assert act is not None
        code = ExitCode.ACTIVITY_CANCELLED if act.status == "cancelled" else ExitCode.NO_RESULT
        if output is not OutputFormat.TEXT:
            emit(output, with_id({"activity_id": str(aid), "state": None, "data": None,
                                  "status": act.status, "exit_code": int(code)}))
        error_line(f"activity {aid} has no result ({act.display_status})")
        raise typer.Exit(int(code))
    code = code_for_result(result)
    if output is not OutputFormat.TEXT:
        emit(output, with_id({**result.to_json(), "exit_code": int(code)}))
    else:
        from runnerq_cli.literal import literal

        data = to_jsonable(result.data)
        # A text result is printed as its lines, every other control escaped (no ESC
        # sequence acts); -o json has it exact.
        sys.stdout.write((literal(data, multiline=True) if isinstance(data, str)
                          else json.dumps(data, indent=2)) + "\n")
    if code is not ExitCode.OK:
        error_line(f"activity {aid} result is Err: {json.dumps(to_jsonable(result.data))}")
    raise typer.Exit(int(code))


def wait_cmd(
    ctx: typer.Context,
    activity_id: str = typer.Argument(..., metavar="ID", help=ID_HELP),
    timeout: str | None = typer.Option(None, "--timeout", metavar="DURATION",
                                       help="Give up after this long (exit 13); "
                                            "default: wait forever."),
    output: OutputFormat = output_option(),
) -> None:
    """Block until the activity is terminal, print its result, exit by its outcome."""
    from runnerq_cli import times
    from runnerq_cli.cli.ids import activity_id as resolve_id
    from runnerq_cli.cli.outage_notes import watch
    from runnerq_cli.cli.state import state
    from runnerq_cli.cli.wait_report import report

    seconds = times.duration(timeout, "--timeout") if timeout else None
    backend = state(ctx).backend()
    # The server away once the wait has begun: noted, waited for (within --timeout).
    outcome = backend.wait(resolve_id(backend, activity_id), seconds, outage=watch())
    raise typer.Exit(report(outcome, output))


def workers_cmd(
    ctx: typer.Context,
    stale_after: str = typer.Option("30s", "--stale-after", metavar="DURATION",
                                    help="No heartbeat for this long: shown as stale."),
    output: OutputFormat = output_option(),
) -> None:
    """Workers in the registry: id, host, pid, types, in flight, counters, last seen."""
    from runnerq_cli import times
    from runnerq_cli.cli.output import console, emit
    from runnerq_cli.cli.state import state
    from runnerq_cli.cli.words import describe_pause, wrap

    stale_seconds = times.duration(stale_after, "--stale-after")
    backend = state(ctx).backend()
    workers = backend.registry.list_workers(stale_seconds)
    now = backend.now()
    pause = backend.control.paused()
    if output is not OutputFormat.TEXT:
        records = [{**w.to_json(), "paused": pause.covers(w.types)} for w in workers]
        emit(output, records if output is OutputFormat.JSONL
             else {"workers": records, "pause": pause.to_json()})
        return
    from rich.text import Text

    from runnerq_cli.cli.tables import Cell, Column, print_table

    out = console(markup=False)
    if pause.active:
        for line in wrap("", f"queue {describe_pause(pause)}", "  ", out.width):
            out.print(Text(line, style="bold yellow"), soft_wrap=True)
    if not workers:
        out.print("no workers registered")
        return
    # Narrow screens lose the counters first (stats has them), then pid, host and
    # last seen (the state says stale or live) before the types are cut.
    columns = [Column("worker", style="bold"), Column("host", drop=3),
               Column("pid", drop=4, right=True),
               Column("types", flexible=True, names=True), Column("in flight", right=True),
               Column("claimed", drop=5, right=True), Column("ok", drop=5, right=True),
               Column("retried", drop=6, right=True), Column("failed", drop=5, right=True),
               Column("dead", drop=5, right=True), Column("lost", drop=6, right=True),
               Column("last seen", drop=2, right=True), Column("state")]
    rows: list[list[Cell]] = []
    for w in workers:
        c = w.counters
        state_cell = (("stale", "red") if w.stale else ("paused", "yellow")
                      if pause.covers(w.types) else ("live", "green"))
        rows.append([w.worker_id, w.host, str(w.pid), ",".join(w.types) or "*",
                     f"{w.in_flight}/{w.concurrency}", str(c.get("claimed", 0)),
                     str(c.get("succeeded", 0)), str(c.get("retried", 0)),
                     str(c.get("failed", 0)), str(c.get("dead_lettered", 0)),
                     str(c.get("claims_lost", 0)), _ago(w.last_heartbeat, now), state_cell])
    print_table(columns, rows)


def register(app: typer.Typer) -> None:
    """Add list, show, events, result, wait and workers to the root app."""
    app.command("list", epilog=examples("list"))(list_cmd)
    app.command("show", epilog=examples("show"))(show_cmd)
    app.command("events", epilog=examples("events"))(events_cmd)
    app.command("result", epilog=examples("result"))(result_cmd)
    app.command("wait", epilog=examples("wait"))(wait_cmd)
    app.command("workers", epilog=examples("workers"))(workers_cmd)
