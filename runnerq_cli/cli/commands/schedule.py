"""`runnerq-mongo schedule ...` (recurring schedules) and `runnerq-mongo scheduler`.

Thin: every definition is read by the backend's one parser (domain/schedules.py:
`definition_from_data`, the same for `add`'s options and `apply`'s file), checked
whole before anything is written; the store, the firing and the audit are
backend/ops/schedules.py's. docs/design.md, "Schedules"; docs/cli.md, "schedule".
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

from runnerq_cli.cli.as_code import print_apply, read_yaml_file
from runnerq_cli.cli.audited import ACTOR_OPT, REASON_OPT, audit_command, check_reason_actor
from runnerq_cli.cli.examples import examples
from runnerq_cli.cli.output import OutputFormat, emit, output_option
from runnerq_cli.cli.state import state, warn_if_missing
from runnerq_cli.errors import InvalidArgument
from runnerq_cli.literal import literal

if TYPE_CHECKING:
    from datetime import datetime

    from runnerq_cli.backend.ops.schedules import ScheduleInfo

schedule_app = typer.Typer(
    help="Recurring schedules: cron or intervals that fire exactly once across the fleet.",
    no_args_is_help=True)


def _time(value: datetime | None, zone: Any = None) -> str:
    from runnerq_cli.cli.timefmt import stamp

    if value is None:
        return "-"
    if zone is not None:
        return value.astimezone(zone).strftime("%Y-%m-%d %H:%M:%S %Z")
    return stamp(value)


def _print_list(rows: list[ScheduleInfo]) -> None:
    from runnerq_cli.cli.tables import Column, print_table

    columns = [Column("name", style="bold"), Column("type"), Column("when", drop=3),
               Column("next fire", drop=1), Column("last fire", drop=2),
               Column("last activity", drop=4), Column("state", flexible=True)]
    table = []
    for row in rows:
        last = row.last_fire
        status = "-" if last is None else ((last.kind or "-") if last.activity_id is None
                                           else row.last_status or "gone")
        state_text = ("malformed: " + str(row.problem)) if row.problem else (
            "paused" + (f" ({row.schedule.pause_reason})" if row.schedule
                        and row.schedule.pause_reason else "") if row.paused else "active")
        table.append([row.name, row.activity_type or "-", row.when or "-",
                      _time(row.next_fire_at), _time(last.at if last else None), status,
                      state_text])
    if not table:
        typer.echo("no schedules")
        return
    print_table(columns, table)


@schedule_app.command("add", epilog=examples("schedule add"))
def add(
    ctx: typer.Context,
    name: str = typer.Argument(..., metavar="NAME", help="The schedule's name (unique in the "
                               "queue)."),
    activity_type: str = typer.Option(..., "--type", "-t", metavar="TYPE",
                                      help="The activity type each fire enqueues."),
    cron: str | None = typer.Option(None, "--cron", metavar="EXPR",
                                    help="5 cron fields, or @hourly, @daily, @weekly, "
                                         "@monthly, @yearly."),
    every: str | None = typer.Option(None, "--every", metavar="DURATION",
                                     help="A fixed interval instead (10m, 1h)."),
    timezone: str = typer.Option("UTC", "--timezone", "--tz", metavar="ZONE",
                                 help="The IANA zone the cron is read in (Europe/Berlin)."),
    payload: str | None = typer.Option(None, "--payload", "-p", metavar="JSON",
                                       help="The activities' payload, a JSON object."),
    priority: str | None = typer.Option(None, "--priority", metavar="PRIORITY",
                                        help="low, normal, high or critical."),
    metadata: list[str] = typer.Option([], "--metadata", "-m", metavar="KEY=VALUE",
                                       help="A metadata tag of the activities (repeatable)."),
    max_retries: int | None = typer.Option(None, "--max-retries", metavar="N",
                                           help="Attempts allowed (0: unlimited)."),
    timeout: str | None = typer.Option(None, "--timeout", metavar="DURATION",
                                       help="How long one attempt may run."),
    delay: str | None = typer.Option(None, "--delay", metavar="DURATION",
                                     help="Each activity due this long after its fire."),
    start: str | None = typer.Option(None, "--start", metavar="TIME",
                                     help="No fire before TIME (ISO-8601)."),
    end: str | None = typer.Option(None, "--end", metavar="TIME",
                                   help="No fire after TIME (ISO-8601)."),
    jitter: str | None = typer.Option(None, "--jitter", metavar="DURATION",
                                      help="Delay each fire's activity by up to this."),
    missed: str | None = typer.Option(None, "--missed", metavar="POLICY",
                                      help="Missed fires: skip, latest or all "
                                           "[default: skip]."),
    max_catchup: int | None = typer.Option(None, "--max-catchup", metavar="N",
                                           help="With --missed all: at most N missed "
                                                "fires [default: 10]."),
    grace: str | None = typer.Option(None, "--grace", metavar="DURATION",
                                     help="How late a fire is still on time [default: 1m]."),
    overlap: str | None = typer.Option(None, "--overlap", metavar="POLICY",
                                       help="allow; skip while the last fire's activity "
                                            "is unfinished; or buffer_one: hold one fire "
                                            "back until it ends [default: allow]."),
    paused: bool = typer.Option(False, "--paused", help="Add it paused."),
    replace: bool = typer.Option(False, "--replace",
                                 help="Replace a schedule of that name (else exit 5)."),
    reason: str | None = REASON_OPT,
    actor: str | None = ACTOR_OPT,
    output: OutputFormat = output_option(),
) -> None:
    """Add a schedule. Exit codes: 2 an invalid definition (expression, zone, start after
    end, interval of zero, no fire left), 5 the name is taken: nothing written."""
    from runnerq_cli import values
    from runnerq_cli.backend.domain.models import parse_metadata_pairs
    from runnerq_cli.backend.domain.schedules import definition_from_data

    check_reason_actor(reason, actor)
    data: dict[str, Any] = {"name": name, "type": activity_type, "timezone": timezone}
    options = {"cron": cron, "every": every, "priority": priority, "max_retries": max_retries,
               "timeout": timeout, "delay": delay, "start": start, "end": end,
               "jitter": jitter, "missed": missed, "max_catchup": max_catchup,
               "grace": grace, "overlap": overlap}
    data.update({k: v for k, v in options.items() if v is not None})
    if payload is not None:
        data["payload"] = values.json_object(payload, "--payload")
    if metadata:
        data["metadata"] = parse_metadata_pairs(metadata, "--metadata")
    definition = definition_from_data(data)
    info = state(ctx).backend().schedules.add(definition, replace=replace, paused=paused,
                                              reason=reason, actor=actor,
                                              command=audit_command(ctx))
    if output is not OutputFormat.TEXT:
        emit(output, info.to_json())
        return
    typer.echo(f"added schedule {literal(info.name)}: {definition.when_text()}; next fire "
               f"{_time(info.next_fire_at)}" + (" (paused)" if info.paused else ""))


@schedule_app.command("list", epilog=examples("schedule list"))
def list_(ctx: typer.Context, output: OutputFormat = output_option()) -> None:
    """The queue's schedules: when, next fire, last fire and how its activity is doing."""
    backend = state(ctx).backend()
    rows = backend.schedules.list_schedules()
    if not rows:
        warn_if_missing(backend)  # no schedules, or not that queue?
    if output is not OutputFormat.TEXT:
        emit(output, [r.to_json() for r in rows])
        return
    _print_list(rows)


@schedule_app.command("show", epilog=examples("schedule show"))
def show(
    ctx: typer.Context,
    name: str = typer.Argument(..., metavar="NAME", help="The schedule."),
    count: int = typer.Option(5, "--next", "-n", metavar="N", min=1, max=1000,
                              help="How many coming fire times to list."),
    output: OutputFormat = output_option(),
) -> None:
    """One schedule: its definition in words and its next fire times, in its zone and UTC."""
    backend = state(ctx).backend()
    info = backend.schedules.get_schedule(name)
    upcoming = backend.schedules.upcoming(name, count) if info.schedule else []
    if output is not OutputFormat.TEXT:
        from runnerq_cli.backend.domain.schedules import iso

        emit(output, {**info.to_json(), "upcoming": [iso(t) for t in upcoming]})
        return
    typer.echo(f"schedule {literal(info.name)}")
    if info.schedule is None:
        typer.echo(f"  malformed: {literal(str(info.problem))}")
        return
    s, d = info.schedule, info.schedule.definition
    zone = d.zone
    lines = [("type", d.activity.activity_type),
             ("when", d.when_text() if d.cron is None else f"{d.cron} = {d.when_text()}"),
             ("state", "paused" + (f" ({s.pause_reason})" if s.pause_reason else "")
              if s.paused else "active"),
             ("policies", f"missed={d.missed}" + (f" max_catchup={d.max_catchup}"
                                                  if d.missed == "all" else "")
              + f" grace={d.grace_seconds:g}s overlap={d.overlap}"
              + (f" jitter={d.jitter_seconds:g}s" if d.jitter_seconds else "")),
             ("start", _time(d.start_at)), ("end", _time(d.end_at)),
             ("fires", f"{s.fires} enqueued, {s.missed_fires} missed, "
                       f"{s.skipped_fires} skipped")]
    last = s.last_fire
    if last is not None:  # two lines: each fits 80 columns
        lines.append(("last fire", f"{_time(last.at)} ({last.kind or 'kind unknown'})"))
        lines.append(("activity", f"{last.activity_id} ({info.last_status or 'gone'})"
                      if last.activity_id else "none"))
    if s.buffered is not None:
        lines.append(("buffered", f"{_time(s.buffered.at)} ({s.buffered.kind}): waits for "
                                  "the last fire's activity to end"))
    if info.problem:
        lines.append(("problem", info.problem))
    from runnerq_cli.cli.words import screen_width, wrap

    width = screen_width()
    for key, value in lines:
        for line in wrap(f"  {key + ':':<11} ", literal(value), " " * 14, width):
            typer.echo(line)
    if not upcoming:
        typer.echo("  next fires: " + ("none while paused" if s.paused else "none left"))
        return
    if d.timezone == "UTC":
        typer.echo("  next fires (UTC):")
        for moment in upcoming:
            typer.echo(f"    {_time(moment)}")
        return
    typer.echo(f"  next fires, in {literal(d.timezone)} then UTC:")
    for moment in upcoming:
        typer.echo(f"    {_time(moment, zone):<26} {_time(moment)}")


def _named_change(ctx: typer.Context, verb: str, name: str, reason: str | None,
                  actor: str | None, output: OutputFormat) -> None:
    check_reason_actor(reason, actor)
    schedules = state(ctx).backend().schedules
    if verb == "remove":
        schedules.remove(name, reason=reason, actor=actor, command=audit_command(ctx))
        changed = True
    else:
        method = schedules.pause if verb == "pause" else schedules.resume
        changed = method(name, reason=reason, actor=actor, command=audit_command(ctx))
    if output is not OutputFormat.TEXT:
        emit(output, {"action": verb, "name": name, "changed": changed})
        return
    past = {"pause": "paused", "resume": "resumed", "remove": "removed"}[verb]
    if changed:
        typer.echo(f"{past} schedule {literal(name)}")
    else:
        was = "already paused" if verb == "pause" else "not paused"
        typer.echo(f"schedule {literal(name)} was {was}: nothing changed")


@schedule_app.command("pause", epilog=examples("schedule pause"))
def pause(
    ctx: typer.Context,
    name: str = typer.Argument(..., metavar="NAME", help="The schedule."),
    reason: str | None = REASON_OPT,
    actor: str | None = ACTOR_OPT,
    output: OutputFormat = output_option(),
) -> None:
    """Stop a schedule's fires (trigger still fires it). Its fires while paused are missed
    fires when it resumes (its --missed policy)."""
    _named_change(ctx, "pause", name, reason, actor, output)


@schedule_app.command("resume", epilog=examples("schedule resume"))
def resume(
    ctx: typer.Context,
    name: str = typer.Argument(..., metavar="NAME", help="The schedule."),
    reason: str | None = REASON_OPT,
    actor: str | None = ACTOR_OPT,
    output: OutputFormat = output_option(),
) -> None:
    """Let a paused schedule fire again."""
    _named_change(ctx, "resume", name, reason, actor, output)


@schedule_app.command("remove", epilog=examples("schedule remove"))
def remove(
    ctx: typer.Context,
    name: str = typer.Argument(..., metavar="NAME", help="The schedule."),
    reason: str | None = REASON_OPT,
    actor: str | None = ACTOR_OPT,
    output: OutputFormat = output_option(),
) -> None:
    """Delete a schedule (its activities stay). Exit code 4 if there is none of that
    name."""
    _named_change(ctx, "remove", name, reason, actor, output)


@schedule_app.command("trigger", epilog=examples("schedule trigger"))
def trigger(
    ctx: typer.Context,
    name: str = typer.Argument(..., metavar="NAME", help="The schedule."),
    reason: str | None = REASON_OPT,
    actor: str | None = ACTOR_OPT,
    output: OutputFormat = output_option(),
) -> None:
    """Fire a schedule now, once (paused or not); its next fire is left as it was."""
    check_reason_actor(reason, actor)
    result = state(ctx).backend().schedules.trigger(name, reason=reason, actor=actor,
                                                    command=audit_command(ctx))
    if output is not OutputFormat.TEXT:
        emit(output, {"name": name, "activity_id": str(result.activity_id),
                      "status": result.status})
        return
    typer.echo(f"triggered schedule {literal(name)}: activity {result.activity_id} "
               f"({result.status})")


def read_schedule_file(path: str) -> list[Any]:
    """`apply`'s YAML file: a list of schedules, or a mapping with `schedules:`. Each
    refusal is one line naming the file (and the entry); nothing is written."""
    from runnerq_cli.backend.domain.schedules import definition_from_data
    data = read_yaml_file(path, "a schedules file")
    if isinstance(data, dict) and set(data) <= {"schedules"}:
        data = data.get("schedules") or []
    if data is None:
        data = []
    if not isinstance(data, list):
        raise InvalidArgument(f"{path}: expected a list of schedules (or schedules: [...])")
    out = []
    for n, entry in enumerate(data, 1):
        label = entry.get("name") if isinstance(entry, dict) else None
        where = f"{path}: schedule {n}" + (f" ({label})" if isinstance(label, str) else "")
        out.append(definition_from_data(entry, where=where))
    return out


@schedule_app.command("apply", epilog=examples("schedule apply"))
def apply(
    ctx: typer.Context,
    path: str = typer.Argument(..., metavar="FILE", help="A YAML file of schedules."),
    prune: bool = typer.Option(False, "--prune", help="Remove the schedules not in FILE."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Show the plan; change nothing."),
    reason: str | None = REASON_OPT,
    actor: str | None = ACTOR_OPT,
    output: OutputFormat = output_option(),
) -> None:
    """Make the queue's schedules those of FILE (schedules as code, at every deploy).
    Idempotent: a second apply changes nothing and says so. Exit code 2 for a file that
    does not read (malformed YAML, not UTF-8, a bad value): nothing written."""
    check_reason_actor(reason, actor)
    definitions = read_schedule_file(path)
    report = state(ctx).backend().schedules.apply(definitions, prune=prune, dry_run=dry_run,
                                                  reason=reason, actor=actor,
                                                  command=audit_command(ctx))
    print_apply(report, output, dry_run, path, "schedule", lambda change: change.name)


def scheduler(
    ctx: typer.Context,
    once: bool = typer.Option(False, "--once", help="Fire what is due once, then exit."),
    interval: str = typer.Option("1s", "--interval", metavar="DURATION",
                                 help="How often to look for due schedules."),
    output: OutputFormat = output_option(),
) -> None:
    """Fire the queue's due schedules, alone (workers also fire them: run this for one
    place of firing). Stops at SIGINT or SIGTERM; a server away is tried again."""
    import signal
    import threading

    from runnerq_cli import times

    every = times.duration(interval, "--interval", minimum=0.05)
    backend = state(ctx).backend()
    stop = threading.Event()

    def stopping(signum: int, frame: Any) -> None:
        stop.set()

    from runnerq_cli.cli.output import warning_line
    from runnerq_cli.errors import Unavailable

    previous = signal.signal(signal.SIGTERM, stopping)
    if not once:  # a line that says it runs: it prints nothing else until a fire
        import sys

        from runnerq_cli.cli.foreground import how_to_stop
        from runnerq_cli.times import format_duration

        sys.stderr.write(f"scheduler for queue {backend.queue}: firing its due "
                         f"schedules every {format_duration(every)}, one line per round "
                         f"that fired. {how_to_stop(sys.stderr)}")
        sys.stderr.flush()
    try:
        while True:
            try:
                counts = backend.schedules.fire_due()
            except Unavailable as exc:
                if once:
                    raise
                # A server away (a fail-over, a restart) stops no loop: try again.
                warning_line(f"{exc}; trying again")
                counts = {}
            if any(counts.values()):
                if output is OutputFormat.TEXT:
                    typer.echo(" ".join(f"{k}={v}" for k, v in counts.items()))
                else:
                    emit(OutputFormat.JSONL, counts)
            if once or stop.wait(every):
                return
    except KeyboardInterrupt:
        return
    finally:
        signal.signal(signal.SIGTERM, previous)


def register(app: typer.Typer) -> None:
    """Add `schedule` (add, list, show, pause, resume, trigger, remove, apply) and
    `scheduler` to the root app."""
    app.add_typer(schedule_app, name="schedule")
    app.command("scheduler", epilog=examples("scheduler"))(scheduler)
