"""Diagnosis commands: `doctor`, `explain ID`, `queues`, `metrics serve`.

Thin: parse, call the backend (backend/diagnose.py, backend/metrics.py,
exposition.py), print. Heavy modules are imported inside the commands.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from runnerq_cli.cli.examples import examples
from runnerq_cli.cli.output import OutputFormat, output_option

if TYPE_CHECKING:
    from runnerq_cli.backend.api import RunnerQ
    from runnerq_cli.cli.state import CliState

_LABEL = {"ok": "ok", "warn": "warn", "fail": "FAIL", "not_checked": "n/a"}

QUEUE_HELP = "Check this queue (repeatable; default: the configured queue)."
ALL_QUEUES_HELP = "Every RunnerQ queue in the database (found from collection names)."


def _queues(cli: CliState, backend: RunnerQ, wanted: list[str] | None, all_queues: bool,
            *, must_exist: bool) -> list[str]:
    """The queues a command works on: given, discovered, or the configured one."""
    from runnerq_cli.backend.diagnose import require_queues
    from runnerq_cli.errors import InvalidArgument

    if wanted and all_queues:
        raise InvalidArgument("give --queue or --all-queues, not both")
    if all_queues:
        return backend.discover_queues()
    names = list(dict.fromkeys(wanted or [cli.settings().queue]))
    if must_exist:
        return require_queues(backend.db, cli.settings().database, names)
    from runnerq_cli.backend.naming import validate_queue_name

    return [validate_queue_name(n) for n in names]


def doctor_cmd(
    ctx: typer.Context,
    queue: list[str] | None = typer.Option(None, "--queue", "-q", metavar="NAME",
                                           help=QUEUE_HELP),
    all_queues: bool = typer.Option(False, "--all-queues", help=ALL_QUEUES_HELP),
    strict: bool = typer.Option(False, "--strict", help="Warnings fail too (exit 7)."),
    output: OutputFormat = output_option(),
) -> None:
    """Is this deployment healthy? One check per line, each problem with its fix.

    Exit codes: 0 every check ok (warnings too, unless --strict), 7 a check
    failed, 6 the server is unreachable, 2 bad options.
    """
    from runnerq_cli.backend.diagnose import Check, CheckStatus, failed, server_checks
    from runnerq_cli.cli.output import emit
    from runnerq_cli.cli.state import state
    from runnerq_cli.errors import ExitCode, InvalidArgument, Unavailable

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
            checks += backend.for_queue(name).doctor(server=index == 0)
        if not names:
            checks = [*server_checks(backend),
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
        for check in checks:
            where = f" [{check.queue}]" if check.queue and len(names) > 1 else ""
            typer.echo(f"{_LABEL[check.status.value]:<5} {check.name}{where}: {check.message}")
            if check.fix and check.status in (CheckStatus.FAIL, CheckStatus.WARN):
                typer.echo(f"      fix: {check.fix}")
        counts = ", ".join(f"{n} {_LABEL[s]}" for s, n in summary.items() if n)
        typer.echo(f"doctor: {counts}" + (" (strict)" if strict else ""))
    if unreachable is not None:
        from runnerq_cli.cli.output import error_line

        error_line(str(unreachable))
        raise typer.Exit(int(ExitCode.UNAVAILABLE))
    if bad:
        raise typer.Exit(int(ExitCode.CHECK_FAILED))


def explain_cmd(
    ctx: typer.Context,
    activity_id: str = typer.Argument(..., metavar="ID", help="The activity's id (a UUID)."),
    output: OutputFormat = output_option(),
) -> None:
    """Why isn't this activity running? A sentence, then the facts behind it.

    An id not in the configured queue is looked for in the database's other
    queues (the output names the queue).

    Exit codes: 0 explained, 4 no such activity, 2 a malformed id.
    """
    from runnerq_cli.backend.models import parse_activity_id, to_jsonable
    from runnerq_cli.cli.output import emit
    from runnerq_cli.cli.state import state

    aid = parse_activity_id(activity_id)  # a malformed id fails before connecting
    backend = state(ctx).backend()
    found = backend.explain(aid, any_queue=True)
    if output is not OutputFormat.TEXT:
        emit(output, found.to_json())
        return
    typer.echo(found.sentence)
    typer.echo(f"  id: {found.activity_id}  queue: {found.queue}  status: {found.status}")
    for key, value in to_jsonable(found.facts).items():
        if value is None or value == [] or value == {}:
            continue
        if isinstance(value, dict):
            value = ", ".join(f"{k} {v}" for k, v in value.items())
        elif isinstance(value, list):
            value = ", ".join(str(v) for v in value)
        typer.echo(f"  {key.replace('_', ' ')}: {value}")


def queues_cmd(
    ctx: typer.Context,
    output: OutputFormat = output_option(),
) -> None:
    """Every RunnerQ queue in the database, with counts, oldest pending age and workers."""
    from runnerq_cli.cli.output import console, emit
    from runnerq_cli.cli.state import state

    cli = state(ctx)
    backend = cli.backend()
    rows = [backend.for_queue(name).queue_summary() for name in backend.discover_queues()]
    if output is OutputFormat.JSON:
        emit(output, {"database": cli.settings().database, "queues": rows})
        return
    if output is OutputFormat.JSONL:
        emit(output, rows)
        return
    if not rows:
        typer.echo(f"no RunnerQ queues in database {cli.settings().database}")
        return
    from rich.table import Table

    from runnerq_cli.values import format_duration

    table = Table(box=None, header_style="bold", pad_edge=False)
    statuses = ("pending", "scheduled", "processing", "completed", "failed", "dead_letter",
                "cancelled")
    for column in ("queue", *(s.replace("processing", "running").replace("_", "-")
                              for s in statuses), "oldest pending", "workers", "paused"):
        table.add_column(column, justify="left" if column == "queue" else "right")
    for row in rows:
        age = row["oldest_pending_age_seconds"]
        workers = row["workers"]
        table.add_row(row["queue"], *(str(row["by_status"].get(s, 0)) for s in statuses),
                      format_duration(age) if age is not None else "-",
                      f"{workers['live']} live" + (f", {workers['stale']} stale"
                                                    if workers["stale"] else ""),
                      "yes" if row["paused"] else "no")
    console().print(table)


metrics_app = typer.Typer(name="metrics", help="Queue metrics for Prometheus.",
                          no_args_is_help=True, rich_markup_mode=None)


@metrics_app.command("serve", epilog=examples("metrics serve"))
def metrics_serve(
    ctx: typer.Context,
    port: int = typer.Option(9464, "--port", min=0, max=65535,
                             help="TCP port (0: any free port; the URL is printed)."),
    host: str = typer.Option("127.0.0.1", "--host", metavar="ADDRESS",
                             help="Address to listen on (0.0.0.0 for every interface)."),
    queue: list[str] | None = typer.Option(None, "--queue", "-q", metavar="NAME",
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
    queue, 6 the server is unreachable at start, 15 the address is in use.
    """
    import errno
    import signal
    import sys
    import threading

    from runnerq_cli import values
    from runnerq_cli.cli.state import state
    from runnerq_cli.errors import AddressInUse, InvalidArgument

    interval = values.duration(min_interval, "--min-interval")
    window_seconds = values.duration(window, "--window")
    if window_seconds < 1:
        raise InvalidArgument("--window must be at least 1s")
    cli = state(ctx)
    backend = cli.backend()
    if all_queues and queue:
        raise InvalidArgument("give --queue or --all-queues, not both")
    fixed = None if all_queues else _queues(cli, backend, queue, False, must_exist=True)

    from runnerq_cli.exposition import QueueCollector, log_error, serve

    collector = QueueCollector(
        (lambda: list(fixed)) if fixed is not None else backend.discover_queues,
        backend.for_queue, min_interval=interval, window_seconds=window_seconds,
        on_error=log_error)
    try:
        server, url = serve(collector, host, port)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise AddressInUse(f"cannot listen on {host}:{port}: the address is in use") \
                from None
        raise InvalidArgument(f"cannot listen on {host}:{port}: "
                              f"{exc.strerror or exc}") from None
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
