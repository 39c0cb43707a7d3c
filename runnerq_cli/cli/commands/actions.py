"""Operator actions: `cancel`, `retry`, `run-now`, `reschedule`, `set-priority`, `delete`
(by ids or by filter), and the bulk `redrive` and `purge`.

By ids: act on each id, report each, and exit non-zero if any failed (the
failures' exit code when they agree, 1 when they differ).

By filter (`--status`, `--type`, `--since`, `--until`, `--metadata`,
`--error-contains`, `--worker`): `--max N` is required (without it: exit 2,
saying how many match); `--dry-run` shows the count and a sample and writes
nothing; on a terminal the count and sample are shown for confirmation, off a
terminal `--yes` is required (exit 2 otherwise), as for `redrive` and `purge`.
Exactly the activities shown are acted on, each with one conditional update;
ones that changed since are skipped with the reason (exit 9).

The logic lives in the backend (operator.py, bulk.py, filters.py); this
module parses, confirms and prints.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import typer

from runnerq_cli.cli.choices import PRIORITIES, completer
from runnerq_cli.cli.confirmation import confirm
from runnerq_cli.cli.examples import examples
from runnerq_cli.cli.exits import ExitCode, common_exit_code, exit_code_of, skip_row
from runnerq_cli.cli.output import OutputFormat, emit, error_line, output_option, warning_line
from runnerq_cli.cli.state import state
from runnerq_cli.cli.words import echo_fitted
from runnerq_cli.errors import InvalidArgument, NotFound
from runnerq_cli.plural import agreeing, counted

if TYPE_CHECKING:
    from runnerq_cli.backend.api import RunnerQ
    from runnerq_cli.backend.domain.filters import ActivityFilter
    from runnerq_cli.backend.ops.actions import ActionResult
    from runnerq_cli.backend.ops.bulk import BulkReport, Selection

IDS_HELP = "Activity id(s): UUIDs or their first 8+ hex digits; or select by filter instead."
YES_HELP = "Act without asking (needed when not on a terminal)."
DRY_RUN_HELP = "Show what would change; change nothing."
REASON_HELP = "Why: recorded with the actor in each activity's event and in the audit."
ACTOR_HELP = "Who acts (recorded) [default: the operating-system user]."

# Shared options: every action takes the same filter, limits and audit fields.
STATUS_OPT = typer.Option(None, "--status", metavar="STATUS",
                          help="Filter: in this status (repeatable) [default: every status "
                               "the action applies to].")
TYPE_OPT = typer.Option(None, "--type", "-t", metavar="TYPE",
                        help="Filter: of this activity type (repeatable).")
SINCE_OPT = typer.Option(None, "--since", metavar="TIME",
                         help="Filter: created (terminal: finished) at or after TIME "
                              "(ISO-8601, or a duration ago like 1h).")
UNTIL_OPT = typer.Option(None, "--until", metavar="TIME",
                         help="Filter: created (terminal: finished) at or before TIME.")
METADATA_OPT = typer.Option(None, "--metadata", "-m", metavar="KEY=VALUE",
                            help="Filter: with this metadata tag (repeatable).")
ERROR_OPT = typer.Option(None, "--error-contains", metavar="TEXT",
                         help="Filter: last error contains TEXT (a plain, case-sensitive "
                              "substring; no pattern syntax).")
WORKER_OPT = typer.Option(None, "--worker", metavar="WORKER_ID",
                          help="Filter: held by, or had an attempt on, this worker.")
MAX_OPT = typer.Option(None, "--max", metavar="N",
                       help="With a filter: act on at most N activities (required).")
DRY_RUN_OPT = typer.Option(False, "--dry-run", help=DRY_RUN_HELP)
YES_OPT = typer.Option(False, "--yes", "-y", help=YES_HELP)
REASON_OPT = typer.Option(None, "--reason", metavar="TEXT", help=REASON_HELP)
ACTOR_OPT = typer.Option(None, "--actor", metavar="NAME", help=ACTOR_HELP)
CASCADE_OPT = typer.Option(
    False, "--cascade",
    help="With ids: also cancel every pending, scheduled or waiting descendant "
         "(their trees; running ones are left to their workers).")
BATCH_OPT = typer.Option(500, "--batch-size", metavar="N", min=1, max=10000,
                         help="Activities per batch, 1 to 10,000 (one read and one write each; "
                              "the audit record is updated after each).")


@dataclass
class Request:
    """What the operator asked for, as typed (parsed by `_filter` and `_run`)."""

    ids: list[str]
    status: list[str] | None = None
    types: list[str] | None = None
    since: str | None = None
    until: str | None = None
    metadata: list[str] | None = None
    error_contains: str | None = None
    worker: str | None = None
    max_count: int | None = None
    dry_run: bool = False
    yes: bool = False
    reason: str | None = None
    actor: str | None = None
    output: OutputFormat = OutputFormat.TEXT
    batch_size: int = 500
    cascade: bool = False  # cancel: every cancellable descendant too


# ----------------------------------------------------------------- parsing


def _filter(req: Request) -> ActivityFilter:
    """The ActivityFilter of the filter options (InvalidArgument on bad values)."""
    from runnerq_cli import times
    from runnerq_cli.backend.domain.filters import ActivityFilter
    from runnerq_cli.backend.domain.models import Status, parse_metadata_pairs

    return ActivityFilter(
        statuses=tuple(Status.parse(s) for s in req.status or ()),
        types=tuple(req.types or ()),
        since=times.optional_time(req.since, "--since"),
        until=times.optional_time(req.until, "--until"),
        metadata=tuple(parse_metadata_pairs(req.metadata or [], "--metadata").items()),
        error_contains=req.error_contains, worker=req.worker)


def _check_request(req: Request, flt: ActivityFilter) -> None:
    """Ids or a filter, not both and not neither; --max only with a filter."""
    from runnerq_cli.backend.domain.operator_text import check_text
    from runnerq_cli.backend.domain.sizes import MAX_BULK

    check_text(req.reason, "--reason")
    check_text(req.actor, "--actor")
    if req.ids and not flt.is_empty:
        raise InvalidArgument("give activity ids or a filter, not both")
    if req.cascade and not req.ids:
        raise InvalidArgument("--cascade applies to activity ids, not to a filter")
    if not req.ids and flt.is_empty:
        raise InvalidArgument("give activity ids, or a filter (--status, --type, --since, "
                              "--until, --metadata, --error-contains, --worker) with --max")
    if req.max_count is not None:
        if req.ids:
            raise InvalidArgument("--max applies to a filter, not to ids")
        if not 1 <= req.max_count <= MAX_BULK:
            raise InvalidArgument(f"--max must be between 1 and {MAX_BULK}, "
                                  f"got {req.max_count}")


# ----------------------------------------------------------------- running


def _run(ctx: typer.Context, action: str, req: Request, **params: Any) -> int:
    """Parse, (preview, confirm,) act, print; returns the exit code."""
    flt = _filter(req)
    _check_request(req, flt)
    backend = existing_backend(ctx)
    command = command_line(ctx)
    if isinstance(params.get("at"), timedelta):  # --delay: from the server's clock
        params["at"] = backend.now() + params["at"]
    if req.ids:
        from runnerq_cli.cli.ids import activity_ids

        req.ids = activity_ids(backend, req.ids)  # id prefixes, all resolved before acting
        if req.cascade:  # the trees below them, found before acting (oldest generation first)
            import uuid

            below = backend.trees.cancellable_descendants(uuid.UUID(i) for i in req.ids)
            req.ids = list(dict.fromkeys([*req.ids, *(str(i) for i in below)]))
        return _by_ids(backend, action, req, params, command)
    return _by_filter(backend, action, req, flt, params, command)


def command_line(ctx: typer.Context) -> str:
    """The command as recorded in the audit, so that it re-runs as written: its path and
    the options given under their own flags (`--type`, `--max`, not the parameter names),
    each value shell-quoted. Of the root options, the queue always (from a flag, the
    environment or a config file, it is what the command acted on: without it a re-run
    acts on whatever queue the re-runner's setup names) and the database when not the
    default; never the URI (it may hold a password)."""
    import shlex
    from enum import Enum

    from runnerq_cli.cli.state import state
    from runnerq_cli.config import Settings

    params = {p.name: p for p in ctx.command.params}
    root = ctx.find_root().command_path
    settings = state(ctx).settings()
    parts = [root]
    if settings.database != Settings.database:
        parts.append(f"--database={shlex.quote(settings.database)}")
    parts += [f"--queue={shlex.quote(settings.queue)}",
              ctx.command_path.removeprefix(root).strip()]
    for name, value in ctx.params.items():
        if value in (None, False, [], ()) or name == "output":
            continue
        param = params.get(name)
        if param is not None and param.param_type_name == "argument":
            parts.extend(shlex.quote(str(v)) for v in
                         (value if isinstance(value, list | tuple) else [value]))
            continue
        longs = [o for o in (param.opts if param is not None else []) if o.startswith("--")]
        flag = longs[0] if longs else "--" + name.replace("_", "-")
        if value is True:
            parts.append(flag)
            continue
        for item in value if isinstance(value, list | tuple) else [value]:
            text = item.value if isinstance(item, Enum) else item
            parts.append(f"{flag}={shlex.quote(str(text))}")
    return " ".join(parts)


def existing_backend(ctx: typer.Context, *, create: bool = False,
                      create_flag: str | None = None) -> RunnerQ:
    """The backend, once its queue is known to exist (a misspelt queue: exit 4)."""
    backend = state(ctx).backend()
    try:
        backend.maintenance.require_queue(create=create)
    except NotFound as exc:
        if create_flag is None:
            raise
        raise NotFound(f"{exc} (give {create_flag} if a new queue is meant)") from None
    return backend


# What each action did, in the past tense: "cancelled 700 of 2,940".
DONE_WORDS = {"cancel": "cancelled", "retry": "retried", "run-now": "made due now",
              "reschedule": "rescheduled", "set-priority": "changed the priority of",
              "delete": "deleted", "redrive": "redrove", "purge": "purged"}


def _interrupted_line(action: str, done: int, total: int, skipped: int,
                      last: Any, in_flight: int = 0) -> str:
    """What an interrupted bulk action did, counted against what it set out to do;
    `in_flight`: the ids of a batch the server failed to confirm (it may have applied it)."""
    left = total - done - skipped
    reached = f"last id reached {last}" if last is not None else "no batch was confirmed"
    flight = (f" (the {in_flight:,} of the batch in flight may be done too: the server did "
              "not confirm it)" if in_flight else "")
    return (f"interrupted: {DONE_WORDS.get(action, action)} {done:,} of {total:,}"
            + (f" ({skipped:,} skipped)" if skipped else "")
            + f"; {left:,} not reached{flight}; {reached}; the audit record says so; "
            "run the same command again to go on")


def _apply(backend: RunnerQ, action: str, target: Selection | list[Any], total: int,
           req: Request, command: str, params: dict[str, Any]) -> BulkReport:
    """The bulk run with its progress bar, stopped between batches by a signal. A server
    that fails midway (stalled, gone) ends it with an error, but first its line says how
    far it got ("cancelled 25 of 144"), as a signal's does: the batches done stay done."""
    from runnerq_cli.cli.interrupt import stop_on_signal
    from runnerq_cli.cli.progress import BulkProgress
    from runnerq_cli.errors import Unavailable

    seen: list[BulkReport] = []
    try:
        with stop_on_signal() as stop, BulkProgress(action, total) as bar:
            def on_batch(report: BulkReport) -> None:
                seen[:] = [report]
                bar.update(report.reached)

            return backend.bulk.apply(action, target, reason=req.reason, actor=req.actor,
                                      should_stop=stop.is_set, on_batch=on_batch,
                                      command=command, batch_size=req.batch_size, **params)
    except Unavailable:
        last = seen[0] if seen else None
        reached = last.reached if last else 0
        error_line(_interrupted_line(
            action, len(last.applied) if last else 0, total, len(last.skipped) if last else 0,
            last.last_id if last else None, min(req.batch_size, total - reached)))
        raise


def _by_ids(backend: RunnerQ, action: str, req: Request, params: dict[str, Any],
            command: str) -> int:
    if req.dry_run:
        preview = backend.bulk.preview_ids(action, req.ids)
        if req.output is not OutputFormat.TEXT:
            emit(req.output, preview if req.output is OutputFormat.JSONL
                 else {"action": action, "dry_run": True, "activities": preview})
        else:
            for row in preview:
                verdict = f"would {action}" if row["eligible"] else f"skip ({row['reason']})"
                echo_fitted(f"{verdict}: {row['id']}")
        return int(ExitCode.OK)
    report = _apply(backend, action, req.ids, len(req.ids), req, command, params)
    rows: list[dict[str, Any]] = []
    for outcome in report.outcomes:
        if isinstance(outcome, tuple):
            skip, exc = outcome
            error_line(str(exc))
            rows.append({"action": action, "id": str(skip["id"]), "ok": False,
                         "error": str(exc), "exit_code": int(exit_code_of(exc))})
            continue
        rows.append(outcome.to_json())
        if req.output is OutputFormat.TEXT:
            echo_fitted(_describe(outcome))
    if req.output is not OutputFormat.TEXT:
        emit(req.output, rows)
    if report.interrupted:
        error_line(_interrupted_line(action, len(report.applied), report.selected,
                                     len(report.skipped), report.last_id))
    return _exit_code(report)


def _by_filter(backend: RunnerQ, action: str, req: Request, flt: ActivityFilter,
               params: dict[str, Any], command: str) -> int:
    _go_on(backend, action, command, params)
    if req.max_count is None and not req.dry_run:
        matched = backend.bulk.select(action, flt, 1).matched  # counts; reads one document
        raise InvalidArgument(f"{counted(matched, 'activity')} "
                              f"{agreeing(matched, 'matches', 'match')} this filter: give "
                              f"--max N to {action} at most N of them (--dry-run shows a "
                              "sample)")
    selection = backend.bulk.select(action, flt, req.max_count, **params)
    if req.dry_run:
        _print_selection(selection, req.output, dry_run=True)
        return int(ExitCode.OK)
    if not selection.ids:
        _print_report(None, selection, req.output)
        return int(ExitCode.OK)
    if not req.yes:
        if sys.stdin.isatty() and req.output is OutputFormat.TEXT:
            _print_selection(selection, req.output, dry_run=False)
        confirm(f"{_title(action)} {counted(len(selection.ids), 'activity')}?", req.yes)
    report = _apply(backend, action, selection, len(selection.ids), req, command, params)
    _print_report(report, selection, req.output)
    if report.interrupted:
        error_line(_interrupted_line(action, len(report.applied), report.selected,
                                     len(report.skipped), report.last_id))
    return _exit_code(report)


def _go_on(backend: RunnerQ, action: str, command: str, params: dict[str, Any]) -> None:
    """The same command run again after an interruption, or after its --max left the
    rest, goes on where it stopped: the activities already done are left out (`select`),
    and a reschedule keeps the time the first run chose (its `--delay` counted from
    then), while still in the future."""
    from datetime import datetime

    previous = backend.bulk.unfinished(action, command) if "at" in params else None
    if not previous or not isinstance(previous.get("at"), str):
        return
    try:
        at = datetime.fromisoformat(previous["at"])
    except ValueError:
        return
    if at.tzinfo is not None and at > backend.now():
        params["at"] = at
        which = ("the interrupted run" if previous.get("state") == "interrupted"
                 else "the last run (its --max left the rest)")
        warning_line(f"going on with {which} of this command: at {previous['at']}")


# ----------------------------------------------------------------- printing


def _title(action: str) -> str:
    return action.replace("-", " ").capitalize()


def _print_sample(sample: list[dict[str, Any]]) -> None:
    """The sample as a table that fits the screen, like `list`: ids as unique prefixes
    (accepted back by every command), the error given the room left."""
    from runnerq_cli.cli.tables import Column, print_table, unique_prefixes
    from runnerq_cli.times import format_duration

    prefixes = unique_prefixes([row["id"] for row in sample])
    columns = [Column("id"), Column("type", style="bold"), Column("status", drop=2),
               Column("age", drop=1, right=True),
               Column("last error", flexible=True, style="red")]
    rows = [[prefixes[str(row["id"])], str(row.get("activity_type") or "-"),
             str(row.get("status") or "-"),
             format_duration(row["age_seconds"]) if row.get("age_seconds") is not None
             else "-", " ".join(str(row.get("last_error") or "").split())]
            for row in sample]
    print_table(columns, rows)


def _print_selection(selection: Selection, output: OutputFormat, *, dry_run: bool) -> None:
    """The count and the sample (a dry run, or what a confirmation asks about)."""
    if output is not OutputFormat.TEXT:
        emit(output, {**selection.to_json(), "dry_run": dry_run})
        return
    shown = len(selection.ids)
    limit = f" (--max {selection.max_count})" if selection.max_count is not None else ""
    verb = f"would {selection.action}" if dry_run else selection.action
    echo_fitted(f"{counted(selection.matched, 'activity')} match; {verb} {shown}{limit}"
                + ("" if selection.max_count is not None or not dry_run
                   else f" (the first {shown}: give --max\u00a0N to act)"))
    if selection.sample:
        typer.echo(f"sample ({len(selection.sample)} of {shown}):")
        _print_sample(selection.sample)


def _print_report(report: BulkReport | None, selection: Selection,
                  output: OutputFormat) -> None:
    """Matched, applied and skipped (each skip with its reason)."""
    data = (report.to_json() if report is not None else
            {"action": selection.action, "matched": selection.matched, "selected": 0,
             "applied": 0, "skipped": 0, "interrupted": False, "last_id": None,
             "results": [], "skips": []})
    from runnerq_cli.backend.domain.models import to_jsonable

    data["filter"] = selection.filter.to_json()
    skips = _skips(report) if report is not None else []
    data["skips"] = to_jsonable(skips)
    if output is OutputFormat.JSON:
        emit(output, data)
        return
    if output is OutputFormat.JSONL:
        rows = [r.to_json() for r in report.applied] if report else []
        rows += [{"action": selection.action, "id": str(s["id"]), "ok": False,
                  "skipped": s["reason"], "exit_code": s["exit_code"]}
                 for s in skips]
        emit(output, rows)
        return
    for result in report.applied if report else []:
        echo_fitted(_describe(result))
    for skip in report.skipped if report else []:
        echo_fitted(f"skipped: {skip['id']}: {skip['reason']}")
    typer.echo(f"{selection.action}: matched {data['matched']}, shown {data['selected']}, "
               f"applied {data['applied']}, skipped {data['skipped']}")


def _exit_code(report: BulkReport) -> int:
    """130 if interrupted; else 0 when nothing was skipped, the skips' exit code when
    they agree, 1 when they differ."""
    if report.interrupted:
        return int(ExitCode.INTERRUPTED)
    return int(common_exit_code(report.errors()))


def _skips(report: BulkReport) -> list[dict[str, Any]]:
    """The report's skips, each with the exit code of its error."""
    errors = {skip["id"]: exc for skip, exc in
              (o for o in report.outcomes if isinstance(o, tuple))}
    return [skip_row(skip, errors[skip["id"]]) for skip in report.skipped]


def _describe(result: ActionResult) -> str:
    from runnerq_cli.backend.domain.models import Priority, to_jsonable
    from runnerq_cli.literal import literal

    text = f"{result.action}: {result.activity_id} ({literal(result.activity_type)}) " \
           f"{result.previous_status} -> {result.status}"
    detail = result.detail
    if "scheduled_at" in detail:
        text += f", runs at {to_jsonable(detail['scheduled_at'])}"
    if "new_priority" in detail:
        old, new = detail.get("old_priority"), detail["new_priority"]
        text += f", priority {Priority.label(old)} -> {Priority.label(new)}"
    return text


SAMPLE_SIZE = 10  # activities listed before a bulk confirmation


def _redrive_preview(activities: list[dict[str, Any]]) -> list[str]:
    """A sample of the dead-lettered activities a redrive would move."""
    lines = [f"dead-lettered activities to redrive ({len(activities)}):"]
    for item in activities[:SAMPLE_SIZE]:
        error = " ".join(str(item.get("last_error") or "").split())[:60]
        lines.append(f"  {item['id']}  {item['activity_type']}"
                     + (f"  last error: {error}" if error else ""))
    if len(activities) > SAMPLE_SIZE:
        lines.append(f"  ... and {len(activities) - SAMPLE_SIZE} more "
                     "(all of them: redrive --dry-run)")
    return lines


def _purge_preview(counts: dict[str, int], settings: Any) -> list[str]:
    """Which activities a purge would delete: kind, count and the retention behind it."""
    from runnerq_cli.times import format_duration

    return ["past their retention (deleted with their results and events):",
            f"  {counts.get('completed', 0)} completed, finished over "
            f"{format_duration(settings.retention_completed)} ago (retention.completed)",
            f"  {counts.get('failed', 0)} failed, dead-lettered or cancelled, finished over "
            f"{format_duration(settings.retention_failed)} ago (retention.failed)"]


def _when(at: str | None, delay: str | None) -> Any:
    """The time of --at TIME or --delay DURATION (exactly one)."""
    from datetime import timedelta

    from runnerq_cli import times

    if (at is None) == (delay is None):
        raise InvalidArgument("give exactly one of --at TIME or --delay DURATION")
    if delay is not None:  # from the server's clock, once connected (_run)
        return timedelta(seconds=times.duration(delay, "--delay"))
    return times.time(at, "--at", relative=False)


# ----------------------------------------------------------------- commands


def _filter_command(action: str, summary: str, *, cascade: bool = False) -> Callable[..., None]:
    """A command that acts on ids or on a filter: the same options for every such action,
    and with `cascade` cancel's --cascade after them. One definition serves all: typer
    reads the signature set here, which gives --cascade its option for cancel and leaves
    it out for the others (whose calls then take the parameter's default, False)."""
    def command(
        ctx: typer.Context,
        ids: list[str] | None = typer.Argument(None, metavar="[ID...]", help=IDS_HELP),
        status: list[str] | None = STATUS_OPT, types: list[str] | None = TYPE_OPT,
        since: str | None = SINCE_OPT, until: str | None = UNTIL_OPT,
        metadata: list[str] | None = METADATA_OPT, error_contains: str | None = ERROR_OPT,
        worker: str | None = WORKER_OPT, max_count: int | None = MAX_OPT,
        dry_run: bool = DRY_RUN_OPT, yes: bool = YES_OPT, reason: str | None = REASON_OPT,
        actor: str | None = ACTOR_OPT, output: OutputFormat = output_option(),
        batch_size: int = BATCH_OPT, cascade: bool = False,
    ) -> None:
        req = Request(ids or [], status, types, since, until, metadata, error_contains, worker,
                      max_count, dry_run, yes, reason, actor, output, batch_size, cascade)
        raise typer.Exit(_run(ctx, action, req))

    signature = inspect.signature(command, eval_str=True)
    *shared, last = signature.parameters.values()
    command.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[*shared, last.replace(default=CASCADE_OPT)] if cascade else shared)
    command.__doc__ = summary
    command.__name__ = action.replace("-", "_")
    return command


cancel = _filter_command(
    "cancel", "Cancel pending, scheduled, waiting or running activities (running ones "
              "through their claim: by a filter only with --status processing).",
    cascade=True)
retry = _filter_command(
    "retry", "Run failed, dead-lettered or cancelled activities again, from attempt 1.")
run_now = _filter_command(
    "run-now", "Make scheduled activities (a delay or a retry back-off) or waiting ones "
               "pending now.")
delete = _filter_command(
    "delete", "Delete terminal activities with their results and events (recorded in the audit).")


def reschedule(
    ctx: typer.Context,
    ids: list[str] | None = typer.Argument(None, metavar="[ID...]", help=IDS_HELP),
    at: str | None = typer.Option(None, "--at", metavar="TIME",
                                  help="ISO-8601 time to run at (naive means UTC)."),
    delay: str | None = typer.Option(None, "--delay", metavar="DURATION",
                                     help="Run this long from now (30s, 5m, 2h)."),
    status: list[str] | None = STATUS_OPT, types: list[str] | None = TYPE_OPT,
    since: str | None = SINCE_OPT, until: str | None = UNTIL_OPT,
    metadata: list[str] | None = METADATA_OPT, error_contains: str | None = ERROR_OPT,
    worker: str | None = WORKER_OPT, max_count: int | None = MAX_OPT,
    dry_run: bool = DRY_RUN_OPT, yes: bool = YES_OPT, reason: str | None = REASON_OPT,
    actor: str | None = ACTOR_OPT, output: OutputFormat = output_option(),
    batch_size: int = BATCH_OPT,
) -> None:
    """Schedule pending or scheduled activities to run at a time."""
    when = _when(at, delay)
    req = Request(ids or [], status, types, since, until, metadata, error_contains, worker,
                  max_count, dry_run, yes, reason, actor, output, batch_size)
    raise typer.Exit(_run(ctx, "reschedule", req, at=when))


def set_priority(
    ctx: typer.Context,
    args: list[str] = typer.Argument(..., metavar="[ID...] PRIORITY",
                                     help="Activity id(s), then the priority: low, normal, "
                                          "high, critical or 1-4 (with a filter: only it).",
                                     autocompletion=completer(PRIORITIES)),
    status: list[str] | None = STATUS_OPT, types: list[str] | None = TYPE_OPT,
    since: str | None = SINCE_OPT, until: str | None = UNTIL_OPT,
    metadata: list[str] | None = METADATA_OPT, error_contains: str | None = ERROR_OPT,
    worker: str | None = WORKER_OPT, max_count: int | None = MAX_OPT,
    dry_run: bool = DRY_RUN_OPT, yes: bool = YES_OPT, reason: str | None = REASON_OPT,
    actor: str | None = ACTOR_OPT, output: OutputFormat = output_option(),
    batch_size: int = BATCH_OPT,
) -> None:
    """Change the priority of pending or scheduled activities."""
    from runnerq_cli.backend.domain.models import Priority

    *ids, priority = args
    Priority.parse(priority)  # a bad priority is refused before anything is read
    req = Request(ids, status, types, since, until, metadata, error_contains, worker,
                  max_count, dry_run, yes, reason, actor, output, batch_size)
    raise typer.Exit(_run(ctx, "set-priority", req, priority=priority))


def _audited_backend(ctx: typer.Context, reason: str | None, actor: str | None) -> Any:
    """The backend, once --reason and --actor (recorded in the audit) are checked and the
    queue is known to exist."""
    from runnerq_cli.backend.domain.operator_text import check_text

    check_text(reason, "--reason")
    check_text(actor, "--actor")
    return existing_backend(ctx)


def redrive(
    ctx: typer.Context,
    types: list[str] | None = typer.Option(None, "--type", "-t", metavar="TYPE",
                                           help="Only this activity type (repeatable)."),
    error_contains: str | None = ERROR_OPT,
    max_count: int | None = typer.Option(
        None, "--max", metavar="N",
        help="Redrive at most N, those dead-lettered longest first (again: the next N) "
             "[default: all of them]."),
    dry_run: bool = DRY_RUN_OPT, yes: bool = YES_OPT, reason: str | None = REASON_OPT,
    actor: str | None = ACTOR_OPT, output: OutputFormat = output_option(),
    batch_size: int = BATCH_OPT,
) -> None:
    """Move every dead-lettered activity back to pending (from attempt 1)."""
    from runnerq_cli import filter_values
    from runnerq_cli.backend.domain.sizes import MAX_BULK
    from runnerq_cli.cli.interrupt import stop_on_signal
    from runnerq_cli.cli.progress import BulkProgress

    if max_count is not None and not 1 <= max_count <= MAX_BULK:
        raise InvalidArgument(f"--max must be between 1 and {MAX_BULK}, got {max_count}")
    filter_values.filter_terms(types, "--type")  # before the server: bad input is answered at once
    backend = _audited_backend(ctx, reason, actor)
    # The console's path: the preview bounded by the max, then exactly the ids shown.
    report = backend.operator.redrive(types, dry_run=True, error_contains=error_contains,
                                      limit=max_count)
    confirmed: list[Any] = []
    if not dry_run and (report.count or report.stale_records):
        if report.count:
            confirm(f"Redrive {counted(report.count, 'dead-lettered activity')}?", yes,
                     _redrive_preview(report.activities))
        # Exactly the ones shown and confirmed, not any dead-lettered since.
        confirmed = [a["id"] for a in report.activities]
        with stop_on_signal() as stop, BulkProgress("redrive", report.count) as bar:
            report = backend.operator.redrive(
                types, ids=confirmed, reason=reason, actor=actor,
                should_stop=stop.is_set, on_batch=bar.update, command=command_line(ctx),
                error_contains=error_contains, batch_size=batch_size)
    if output is not OutputFormat.TEXT:
        emit(output, report.to_json())
    else:
        verb = "would redrive" if dry_run else "redrove"
        from runnerq_cli.literal import literal

        for item in report.activities:
            echo_fitted(f"{verb}: {item['id']} ({literal(item['activity_type'])})")
        typer.echo(f"{verb} {counted(report.count, 'activity')}"
                   + (f"; {report.stale_records} stale dead-letter records "
                      f"{'would be ' if dry_run else ''}removed"
                      if report.stale_records and not report.interrupted else ""))
    if report.interrupted:
        error_line(_interrupted_line("redrive", report.count, len(confirmed), 0,
                                     report.last_id))
        raise typer.Exit(int(ExitCode.INTERRUPTED))


def purge(
    ctx: typer.Context,
    dry_run: bool = DRY_RUN_OPT, yes: bool = YES_OPT, reason: str | None = REASON_OPT,
    actor: str | None = ACTOR_OPT, output: OutputFormat = output_option(),
) -> None:
    """Apply retention now: delete terminal activities past it, with results and events."""
    from runnerq_cli.cli.interrupt import stop_on_signal
    from runnerq_cli.cli.progress import BulkProgress
    from runnerq_cli.errors import PurgeInterrupted

    backend = _audited_backend(ctx, reason, actor)
    counts = backend.operator.purge_preview()
    interrupted = False
    if not dry_run and sum(counts.values()):
        confirm(f"Delete {counted(sum(counts.values()), 'activity')} past their retention?", yes,
                 _purge_preview(counts, state(ctx).settings()))
        try:
            with stop_on_signal() as stop, BulkProgress("purge", sum(counts.values())) as bar:
                counts = backend.operator.purge(limits=counts, reason=reason, actor=actor,
                                                audit=True, should_stop=stop.is_set,
                                                on_batch=bar.update,
                                                command=command_line(ctx))  # no more than confirmed
        except PurgeInterrupted as stopped:
            counts, interrupted = stopped.counts, True
    data = {"action": "purge", "dry_run": dry_run, **counts, "total": sum(counts.values()),
            "interrupted": interrupted}
    if output is not OutputFormat.TEXT:
        emit(output, data)
    else:
        verb = "would purge" if dry_run else "purged"
        typer.echo(f"{verb} {counted(data['total'], 'activity')} ({counts.get('completed', 0)} "
                   f"completed, {counts.get('failed', 0)} failed, dead-lettered or cancelled)")
    if interrupted:
        total = data["total"]
        error_line(f"interrupted: purged {counted(total, 'activity', number=f'{total:,}')}; "
                   "the audit record says "
                   "so; run the same command again to go on")
        raise typer.Exit(int(ExitCode.INTERRUPTED))


COMMANDS = (("cancel", cancel), ("retry", retry), ("run-now", run_now),
            ("reschedule", reschedule), ("set-priority", set_priority), ("delete", delete),
            ("redrive", redrive), ("purge", purge))


def register(app: typer.Typer) -> None:
    """Add the operator action commands to the root app."""
    for name, function in COMMANDS:
        app.command(name, epilog=examples(name))(function)
