"""Diagnosis commands: `doctor`, `explain ID`, `queues`, `metrics serve`.

Thin: parse, call the backend (backend/diagnosis/diagnose.py, backend/views/metrics.py,
exposition.py), print. Heavy modules are imported inside the commands.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

from runnerq_cli.cli.examples import examples
from runnerq_cli.cli.output import OutputFormat, output_option
from runnerq_cli.plural import counted

if TYPE_CHECKING:
    from runnerq_cli.backend.api import RunnerQ
    from runnerq_cli.cli.state import CliState

_LABEL = {"ok": "ok", "warn": "warn", "fail": "FAIL", "not_checked": "n/a"}

QUEUE_HELP = "Check this queue (repeatable; default: the configured queue)."
ALL_QUEUES_HELP = "Every RunnerQ queue in the database (found from collection names)."


def _queues(cli: CliState, backend: RunnerQ, wanted: list[str] | None, all_queues: bool,
            *, must_exist: bool) -> list[str]:
    """The queues a command works on: given, discovered, or the configured one."""
    from runnerq_cli.errors import InvalidArgument

    if wanted and all_queues:
        raise InvalidArgument("give --queue or --all-queues, not both")
    if all_queues:
        return backend.diagnosis.discover_queues()
    names = list(dict.fromkeys(wanted or [cli.settings().queue]))
    if must_exist:
        return backend.diagnosis.require_queues(names)
    from runnerq_cli.backend.domain.naming import validate_queue_name

    return [validate_queue_name(n) for n in names]


_COLOURS = {"FAIL": "red", "warn": "yellow", "ok": "green"}


def _print_checks(checks: list[Any], names: list[str], summary: dict[str, int],
                  strict: bool) -> None:
    """One check per line (wrapped at word boundaries to the screen), each problem's fix."""
    import os
    import sys

    from runnerq_cli.backend.domain.checks import CheckStatus
    from runnerq_cli.cli.words import screen_width
    from runnerq_cli.cli.words import wrap as _wrapped
    from runnerq_cli.literal import literal

    width = screen_width()
    # FAIL red, warn yellow, ok green: on a terminal, unless NO_COLOR is set.
    colour = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
    for check in checks:
        where = f" [{literal(check.queue)}]" if check.queue and len(names) > 1 else ""
        label = _LABEL[check.status.value]
        first = f"{label:<5} "
        for n, line in enumerate(_wrapped(first, f"{literal(check.name)}{where}: "
                                          f"{literal(check.message)}", " " * len(first), width)):
            if n == 0 and colour and label in _COLOURS:
                line = typer.style(label, fg=_COLOURS[label], bold=label == "FAIL") \
                    + line[len(label):]
            typer.echo(line)
        if check.fix and check.status in (CheckStatus.FAIL, CheckStatus.WARN):
            for line in _wrapped("      fix: ", literal(check.fix), " " * 11, width):
                typer.echo(line)
    counts = ", ".join(f"{n} {_LABEL[s]}" for s, n in summary.items() if n)
    typer.echo(f"doctor: {counts}" + (" (strict)" if strict else ""))


def doctor_cmd(
    ctx: typer.Context,
    queue: list[str] | None = typer.Option(None, "--queue", metavar="NAME", help=QUEUE_HELP),
    all_queues: bool = typer.Option(False, "--all-queues", help=ALL_QUEUES_HELP),
    strict: bool = typer.Option(False, "--strict", help="Warnings fail too (exit 7)."),
    output: OutputFormat = output_option(),
) -> None:
    """Is this deployment healthy? One check per line, each problem with its fix.

    Exit codes: 0 every check ok (warnings too, unless --strict), 7 a check
    failed, 6 the server is unreachable, 2 bad options.
    """
    from runnerq_cli.backend.domain.checks import Check, CheckStatus, failed
    from runnerq_cli.cli.exits import ExitCode
    from runnerq_cli.cli.output import emit
    from runnerq_cli.cli.state import state
    from runnerq_cli.errors import InvalidArgument, Unavailable

    if queue and all_queues:
        raise InvalidArgument("give --queue or --all-queues, not both")
    cli = state(ctx)
    backend = cli.backend()
    names: list[str] = []
    checks: list[Check] = []
    unreachable: Unavailable | None = None
    try:
        names = _queues(cli, backend, queue, all_queues, must_exist=False)
        for index, name in enumerate(names):
            checks += backend.for_queue(name).diagnosis.doctor(server=index == 0)
        if not names:
            checks = [*backend.diagnosis.server_checks(),
                      Check("queues", CheckStatus.WARN,
                            f"no RunnerQ queue in database {cli.settings().database}",
                            "runnerq-mongo --queue NAME init-indexes")]
    except Unavailable as exc:  # the first check failed; the others cannot run
        unreachable = exc
        checks = [Check("server", CheckStatus.FAIL, str(exc),
                        "check the URI, the network and the credentials "
                        "(runnerq-mongo config show)")]
    bad = failed(checks, strict=strict)
    summary = {s.value: sum(1 for c in checks if c.status is s) for s in CheckStatus}
    if output is OutputFormat.JSON:
        emit(output, {"ok": not bad, "strict": strict, "queues": names, "summary": summary,
                      "checks": [c.to_json() for c in checks]})
    elif output is OutputFormat.JSONL:
        emit(output, [c.to_json() for c in checks])
    else:
        _print_checks(checks, names, summary, strict)
    if unreachable is not None:
        from runnerq_cli.cli.output import error_line

        error_line(str(unreachable))
        raise typer.Exit(int(ExitCode.UNAVAILABLE))
    if bad:
        raise typer.Exit(int(ExitCode.CHECK_FAILED))


def explain_cmd(
    ctx: typer.Context,
    activity_id: str = typer.Argument(..., metavar="ID",
                                      help="The activity's id, or its first 8 or more hex "
                                           "digits (as text views show it)."),
    output: OutputFormat = output_option(),
) -> None:
    """Why isn't this activity running? A sentence, then the facts behind it.

    An id not in the configured queue is looked for in the database's other
    queues (the output names the queue).

    Exit codes: 0 explained, 4 no such activity, 2 a malformed or ambiguous id.
    """
    from runnerq_cli.cli.ids import activity_id as resolve_id
    from runnerq_cli.cli.output import emit
    from runnerq_cli.cli.state import state
    from runnerq_cli.cli.words import screen_width, words
    from runnerq_cli.cli.words import wrap as _wrapped
    from runnerq_cli.literal import literal

    backend = state(ctx).backend()
    # A malformed id fails before connecting; a full UUID needs no query.
    aid = resolve_id(backend, activity_id, any_queue=True)
    found = backend.diagnosis.explain(aid, any_queue=True)
    if output is not OutputFormat.TEXT:
        emit(output, found.to_json())
        return
    width = screen_width()
    for line in _wrapped("", literal(found.sentence), "", width):
        typer.echo(line)
    for line in _wrapped("  ", f"id: {found.activity_id}  queue: {literal(found.queue)}  "
                               f"status: {literal(found.status)}", "    ", width):
        typer.echo(line)
    for key, value in found.facts.items():
        if value is None or value == [] or value == {}:
            continue
        text = _pause_words(value) if key == "pause" else words(value)
        for line in _wrapped(f"  {literal(key).replace('_', ' ')}: ", text, "    ", width):
            typer.echo(line)


def _pause_words(pause: Any) -> str:
    """The pause fact (its JSON form) in words: what, since when (one time format), who, why."""
    from runnerq_cli.backend.domain.pause import PauseState
    from runnerq_cli.cli.words import describe_pause, words

    if not isinstance(pause, dict):
        return words(pause)
    state = PauseState.from_json(pause)
    return describe_pause(state).removeprefix("paused: ")


def queues_cmd(
    ctx: typer.Context,
    output: OutputFormat = output_option(),
) -> None:
    """Every RunnerQ queue in the database, with counts, oldest pending age and workers."""
    from runnerq_cli.cli.output import emit
    from runnerq_cli.cli.state import state

    cli = state(ctx)
    backend = cli.backend()
    rows = [_summary(backend.for_queue(name)) for name in backend.diagnosis.discover_queues()]
    if output is OutputFormat.JSON:
        emit(output, {"database": cli.settings().database, "queues": rows})
        return
    if output is OutputFormat.JSONL:
        emit(output, rows)
        return
    if not rows:
        typer.echo(f"no RunnerQ queues in database {cli.settings().database}")
        return
    from runnerq_cli.cli.tables import Column, print_table
    from runnerq_cli.times import format_duration

    # Waiting (parked durable activities) only where some queue has any: a queue without
    # durable work keeps the table it had, and at 80 columns the waiting count stays
    # while the workers column gives way.
    durable = any(row["by_status"].get("waiting", 0) for row in rows)
    statuses = ("pending", "scheduled", "processing", *(("waiting",) if durable else ()),
                "completed", "failed", "dead_letter", "cancelled")
    # What gives way on a narrow screen, first to last (60 columns keep the queue, its
    # pending, running, failed and dead-lettered counts and its pause).
    drops = {"cancelled": 6, "completed": 5, "scheduled": 4, "waiting": 1}
    columns = [Column("queue", style="bold"),
               *(Column(s.replace("processing", "running").replace("_", "-"),
                        drop=drops.get(s, 0), right=True) for s in statuses),
               Column("oldest pending", drop=2, right=True),
               Column("workers", drop=3, right=True),
               Column("schedules", drop=7, right=True),
               Column("limits", drop=8, right=True),
               Column("paused", right=True)]
    table = []
    for row in rows:
        age = row["oldest_pending_age_seconds"]
        workers = row["workers"]
        estimated = set(row.get("estimated") or ())  # metrics.counts: marked with ≈
        table.append([row["queue"], *((("≈" if s in estimated else "")
                                        + str(row["by_status"].get(s, 0))) for s in statuses),
                      format_duration(age) if age is not None else "-",
                      f"{workers['live']} live" + (f", {workers['stale']} stale"
                                                    if workers["stale"] else ""),
                      _schedules_cell(row["schedules"]), _limits_cell(row["limits"]),
                      _paused_cell(row)])
    if "≈" in print_table(columns, table):  # not when the estimated column gave way
        typer.echo("≈ estimated; the other counts are exact")


def _summary(backend: RunnerQ) -> dict[str, Any]:
    """One queue's row: the diagnosis summary and its schedules' (ScheduleViews.summary)."""
    return {**backend.diagnosis.summary(), "schedules": backend.schedule_views.summary(),
            "limits": [i.brief() for i in backend.limits.summary()]}


def _limits_cell(limits: list[dict[str, Any]]) -> str:
    """`5 in use, 12 held`: the slots in use under every flow limit of the queue and the
    pending work they hold back; `-` for a queue without limits."""
    if not limits:
        return "-"
    in_use = sum(row["in_use"] for row in limits)
    held = sum(row["held_back"] for row in limits)
    return f"{in_use} in use" + (f", {held} held" if held else "")


def _schedules_cell(summary: dict[str, Any]) -> str:
    """`3`, or `3, 1 late` when fires are overdue past their grace (doctor says more),
    `3, 1 bad` when one is malformed; `-` for none."""
    if not summary["count"]:
        return "-"
    cell = str(summary["count"])
    for key, word in (("late", "late"), ("problems", "bad")):
        if summary[key]:
            cell += f", {summary[key]} {word}"
    return cell


def _paused_cell(row: dict[str, Any]) -> str:
    """`queue` (the whole queue paused), `2 types` (only some: which ones are in
    `-o json`, `stats` and `doctor`; their names would not keep the table in 60 columns),
    or `no`."""
    if row["paused"]:
        return "queue"
    types = len(row.get("paused_types") or [])
    return counted(types, "type") if types else "no"


metrics_app = typer.Typer(name="metrics", help="Queue metrics for Prometheus.",
                          no_args_is_help=True, rich_markup_mode=None)


@metrics_app.command("serve", epilog=examples("metrics serve"))
def metrics_serve(
    ctx: typer.Context,
    port: int = typer.Option(9464, "--port", min=0, max=65535,
                             help="TCP port (0: any free port; the URL is printed)."),
    host: str = typer.Option("127.0.0.1", "--host", metavar="ADDRESS",
                             help="Address to listen on (0.0.0.0 for every interface)."),
    queue: list[str] | None = typer.Option(None, "--queue", metavar="NAME",
                                           help="Expose this queue (repeatable; default: the "
                                                "configured queue)."),
    all_queues: bool = typer.Option(False, "--all-queues",
                                    help="Every RunnerQ queue, re-discovered at each scrape."),
    min_interval: str = typer.Option("5s", "--min-interval", metavar="DURATION",
                                     help="A scrape sooner than this after the last one is "
                                          "answered from it (limits the load on the server)."),
    window: str = typer.Option("5m", "--window", metavar="DURATION",
                               help="Outcomes and latency percentiles over this window."),
) -> None:
    """Serve the queues' metrics on http://HOST:PORT/metrics for Prometheus to scrape.

    Exit codes: 0 stopped by Ctrl-C or SIGTERM, 2 bad options, 4 an unknown
    queue, 6 the server is unreachable at start, 15 the address is in use. A server
    that goes away later is noted on stderr (since when) and each scrape tries again.
    """
    import signal
    import sys
    import threading

    from runnerq_cli import times
    from runnerq_cli.cli.state import state
    from runnerq_cli.errors import InvalidArgument

    interval = times.duration(min_interval, "--min-interval")
    window_seconds = times.duration(window, "--window")
    if window_seconds < 1:
        raise InvalidArgument("--window must be at least 1s")
    cli = state(ctx)
    backend = cli.backend()
    if all_queues and queue:
        raise InvalidArgument("give --queue or --all-queues, not both")
    fixed = None if all_queues else _queues(cli, backend, queue, False, must_exist=True)

    from runnerq_cli.cli.exposition import QueueCollector, listen, log_error, registry_for
    from runnerq_cli.cli.outage_notes import watch

    # The server away between scrapes: noted (since when; each scrape tries again) and
    # answered runnerq_scrape_success 0, until it is back (domain/outage.py).
    collector = QueueCollector(
        (lambda: list(fixed)) if fixed is not None else backend.diagnosis.discover_queues,
        backend.for_queue, min_interval=interval, window_seconds=window_seconds,
        on_error=log_error, outage=watch(answered=True))
    server, url = listen(registry_for(collector), host, port)
    stop = threading.Event()

    def stop_now(*_: object) -> None:
        stop.set()

    # SIGINT too: started with `&` from a non-interactive shell it is inherited ignored.
    previous = {sig: signal.signal(sig, stop_now) for sig in (signal.SIGINT, signal.SIGTERM)}
    what = "every queue" if fixed is None else ", ".join(fixed)
    sys.stdout.write(f"serving metrics of {what} on {url}\n")
    sys.stdout.flush()
    try:
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        server.shutdown()
        server.server_close()


def register(app: typer.Typer) -> None:
    """Add `doctor`, `explain`, `queues` and `metrics serve` to the root app."""
    app.command("doctor", epilog=examples("doctor"))(doctor_cmd)
    app.command("explain", epilog=examples("explain"))(explain_cmd)
    app.command("queues", epilog=examples("queues"))(queues_cmd)
    app.add_typer(metrics_app)
