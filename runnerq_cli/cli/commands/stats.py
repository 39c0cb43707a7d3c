"""`runnerq-mongo stats`: a snapshot of the queue, a live view (`--watch`), and `--check`.

All numbers are computed on the server (backend/metrics.py says what each
query costs); this module only formats them.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import typer

from runnerq_cli.cli.choices import STATS_BY, completer
from runnerq_cli.cli.examples import examples
from runnerq_cli.cli.output import OUTPUT_OPTION_HELP

if TYPE_CHECKING:
    from runnerq_cli.backend.snapshots import History, StatsSnapshot


class StatsOutput(StrEnum):
    """`stats -o`: the common formats plus the Prometheus text format."""

    TEXT = "text"
    JSON = "json"
    JSONL = "jsonl"
    OPENMETRICS = "openmetrics"

STATUS_ORDER = ("pending", "scheduled", "processing", "completed", "failed", "dead_letter",
                "cancelled")
STATUS_STYLE = {"pending": "cyan", "scheduled": "blue", "processing": "yellow",
                "completed": "green", "failed": "red", "dead_letter": "bold red",
                "cancelled": "magenta"}


SPARKS = "▁▂▃▄▅▆▇█"
ESTIMATE_MARK = "≈"
HOUR = 3600.0
TYPE_WIDTH = 12  # the history's type column: the rest of an 80-column line is pictures


def _delta(now: int, before: int | None) -> str:
    if before is None or now == before:
        return ""
    return f"[green]+{now - before}[/green]" if now > before else f"[red]{now - before}[/red]"


def _seconds(value: float | None) -> str:
    from runnerq_cli.values import format_duration

    if value is None:
        return "-"
    if value < 1:
        return f"{round(value * 1000)}ms"
    return f"{value:.1f}s" if value < 60 else format_duration(value)


def _shown_time(iso: str) -> str:
    """The snapshot's ISO time in the CLI's one text format (timefmt.stamp)."""
    from datetime import datetime

    from runnerq_cli.cli.timefmt import stamp
    from runnerq_cli.literal import literal

    try:
        return stamp(datetime.fromisoformat(iso.replace("Z", "+00:00")))
    except ValueError:
        return literal(iso)


def sparkline(values: Sequence[float | None]) -> str:
    """One character per value, scaled to the largest: blank where there is no value,
    the lowest bar for 0, at least the second for anything above 0."""
    top = max((v for v in values if v), default=0)

    def bar(value: float | None) -> str:
        if value is None:
            return " "
        if not value or not top:
            return SPARKS[0]
        return SPARKS[1 + round(value / top * (len(SPARKS) - 2))]

    return "".join(bar(v) for v in values)


def _latest(values: list[float | None]) -> float | None:
    return next((v for v in reversed(values) if v is not None), None)


def _history_view(history: History) -> Any:
    """Per type: outcomes per bucket as a sparkline, and the run time's p50/p95 trend."""
    from rich.table import Table
    from rich.text import Text

    from runnerq_cli.literal import rich_text
    from runnerq_cli.values import format_duration

    since = format_duration(history["since_seconds"])
    table = Table(box=None, header_style="bold", pad_edge=False, show_edge=False,
                  title=f"per type, last {since} (oldest left)", title_justify="left")
    table.add_column("type", max_width=TYPE_WIDTH, no_wrap=True, overflow="ellipsis")
    table.add_column("finished", no_wrap=True)
    table.add_column("n", justify="right")
    table.add_column("fail", justify="right")
    table.add_column("p50", justify="right")
    table.add_column("p95", justify="right")
    table.add_column("p95 trend", no_wrap=True)
    for name, per in history["by_type"].items():
        failed = per.get("failed", 0) + per.get("dead_letter", 0)
        table.add_row(rich_text(name, max_length=TYPE_WIDTH),
                      Text(sparkline(per["per_bucket"]), style="green"),
                      str(per.get("completed", 0) + failed), str(failed),
                      _seconds(_latest(per["run_p50"])), _seconds(_latest(per["run_p95"])),
                      Text(sparkline(per["run_p95"]), style="yellow"))
    if not history["by_type"]:
        table.add_row(Text("(nothing finished)", style="dim"), "", "", "", "", "", "")
    return table


def render(snap: StatsSnapshot, previous: StatsSnapshot | None = None) -> Any:
    """The text view of a snapshot; with `previous`, what changed since (the Δ column).

    Every string from the database (queue, types, priorities, pause reason, actor,
    ids) is shown as inert text (literal.py); estimates are marked with ≈.
    """
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from runnerq_cli.literal import literal, rich_text

    before = previous["by_status"] if previous is not None else {}
    estimated = set(snap.get("estimated") or ())
    statuses = [s for s in STATUS_ORDER if s in snap["by_status"]] + sorted(
        s for s in snap["by_status"] if s not in STATUS_ORDER)
    # The title is its own line: as a table title it would wrap to the narrow table's width.
    title = Text(f"queue {literal(snap['queue'])}  ({_shown_time(snap['generated_at'])})",
                 style="bold", no_wrap=True, overflow="ellipsis")
    counts = Table(box=None, header_style="bold", pad_edge=False)
    counts.add_column("status")
    counts.add_column("count", justify="right")
    if previous is not None:
        counts.add_column("Δ", justify="right")
    priorities = list(snap["by_priority"])
    for name in priorities:
        counts.add_column(rich_text(name), justify="right", style="dim")

    def shown(status: str, n: int) -> str:
        return f"{ESTIMATE_MARK}{n}" if status in estimated else str(n)

    for status in statuses:
        n = snap["by_status"][status]
        row: list[Any] = [rich_text(status.replace("_", "-"),
                                    style=STATUS_STYLE.get(status, "bold")), shown(status, n)]
        if previous is not None:
            row.append(_delta(n, before.get(status)))
        row += ["" if status in estimated else str(snap["by_priority"][p].get(status, 0))
                for p in priorities]
        counts.add_row(*row)
    total_row: list[Any] = [Text("total", style="bold"), shown("total", snap["total"])]
    if previous is not None:
        total_row.append(_delta(snap["total"], previous.get("total")))
    counts.add_row(*total_row, *[""] * len(priorities))
    parts: list[Any] = [title, counts]
    if estimated:
        parts.append(Text(f"{ESTIMATE_MARK} estimate: the collection's count minus the exact "
                          "counts", style="dim", no_wrap=True, overflow="ellipsis"))

    if snap["by_type"]:
        types = Table(title="by type (exact counts)", box=None, header_style="bold",
                      title_justify="left", pad_edge=False)
        types.add_column("type", overflow="fold")
        shown_statuses = [s for s in STATUS_ORDER if s not in estimated]
        for status in shown_statuses:
            types.add_column(status.replace("_", "-"), justify="right")
        for name, per in snap["by_type"].items():
            types.add_row(rich_text(name), *[str(per.get(s, 0)) for s in shown_statuses])
        parts += [Text(""), types]

    if snap["history"]:
        parts += [Text(""), _history_view(snap["history"])]

    oldest = snap.get("oldest_pending")
    tp, lat, workers = snap["throughput"], snap["latency"], snap["workers"]
    info = Table(box=None, show_header=False, pad_edge=False)
    info.add_column(style="bold")
    info.add_column()
    info.add_row("oldest pending",
                 rich_text(f"{_seconds(oldest['age_seconds'])} ({oldest['activity_id']})")
                 if oldest else "-")
    # Rates over the time the window really covers (not before the queue's first activity).
    covered = tp["covered_seconds"]
    span = (f"{tp['window_minutes']}m" if covered >= tp["window_minutes"] * 60
            else _seconds(covered))
    info.add_row(f"throughput ({span})",
                 f"{tp['completed_per_minute']:g} completed/min, "
                 f"{tp['failed_per_minute']:g} failed/min")
    # "claim to done": from the claim to the finish as recorded (the handler, the worker's
    # queueing of it, the acknowledgement), not the handler's own time (docs/cli.md).
    for label, d in (("queue wait", lat["queue_wait_seconds"]),
                     ("claim to done", lat["run_seconds"])):
        info.add_row(f"{label} ({_seconds(lat['window_seconds'])})",
                     f"p50 {_seconds(d['p50'])}  p95 {_seconds(d['p95'])}  "
                     f"p99 {_seconds(d['p99'])}  (n={d['count']}"
                     f"{', capped' if lat['capped'] else ''})")
    before_workers = previous["workers"]["live"] if previous is not None else None
    info.add_row("workers", f"{workers['live']} live {_delta(workers['live'], before_workers)}"
                 f"  {workers['stale']} stale  {workers['in_flight']} in flight")
    pause = snap.get("pause") or {}
    if pause.get("paused"):
        what = "whole queue" if pause.get("all") else "types " + ", ".join(
            str(t) for t in pause.get("types") or ())
        info.add_row("paused", Text.assemble(
            (literal(what), "bold yellow"),
            literal(f" since {pause.get('at')} by {pause.get('actor') or '?'}"
                    + (f" ({pause['reason']})" if pause.get("reason") else ""))))
    else:
        info.add_row("paused", "no")
    if snap.get("malformed"):
        info.add_row("malformed", rich_text(f"{len(snap['malformed'])} skipped, e.g. "
                                            f"{snap['malformed'][0]}", max_length=200))
    parts += [Text(""), info]
    return Group(*parts)


def stats_cmd(
    ctx: typer.Context,
    by: str | None = typer.Option(None, "--by", metavar="type|error",
                                  autocompletion=completer(STATS_BY),
                                  help="type: also count per activity type (exact counts); "
                                       "error: what is failing, by type and error (--since, "
                                       "default 1h)."),
    check: list[str] | None = typer.Option(None, "--check", metavar="EXPR",
                                           help="Exit 7 unless EXPR holds, e.g. "
                                                "'dead_letter == 0', 'oldest_pending < 60s' "
                                                "(repeatable)."),
    watch: bool = typer.Option(False, "--watch", "-w", help="A live view, refreshed in place."),
    interval: str = typer.Option("2s", "--interval", metavar="DURATION",
                                 help="--watch: time between refreshes."),
    window: str = typer.Option("15m", "--window", metavar="DURATION",
                               help="Latency percentiles over activities finished this recently."),
    throughput_minutes: int = typer.Option(5, "--throughput-minutes", min=1, max=1440,
                                           help="Throughput over the last N minutes."),
    since: str | None = typer.Option(None, "--since", metavar="DURATION",
                                     help="Also per type, from the finished activities kept: "
                                          "outcomes and run-time trend over this window "
                                          "(1m to 90d; --watch: 1h)."),
    output: StatsOutput = typer.Option(
        StatsOutput.TEXT, "--output", "-o", case_sensitive=False,
        help=OUTPUT_OPTION_HELP[:-1] + "; openmetrics: the Prometheus text format "
             "(node_exporter's textfile collector)."),
    iterations: int = typer.Option(0, "--iterations", hidden=True, min=0, max=10**6,
                                   help="--watch: stop after N refreshes (tests)."),
) -> None:
    """Counts by status and priority, oldest pending, throughput, latency, workers.

    Counts of pending, scheduled, running, failed, dead-letter and cancelled
    activities are exact; completed (and so the total) is an estimate, marked ≈.
    """
    import sys

    from runnerq_cli import values
    from runnerq_cli.backend.metrics import CHECK_NAMES, check_values
    from runnerq_cli.cli.output import console, emit, error_line
    from runnerq_cli.cli.state import state
    from runnerq_cli.errors import ExitCode, InvalidArgument
    from runnerq_cli.stats_checks import evaluate, parse_check

    if by not in (None, *STATS_BY):
        raise InvalidArgument(f"--by {values.shown(by)}: one of {', '.join(STATS_BY)}")
    history = (values.duration(since, "--since", minimum=60.0, maximum=90 * 86400.0)
               if since is not None else None)
    checks = [parse_check(text, CHECK_NAMES) for text in check or []]
    if watch and (checks or output is not StatsOutput.TEXT):
        raise InvalidArgument("--watch is a view for people: use it without --check and -o")
    pause = values.duration(interval, "--interval", minimum=0.1, maximum=86400.0)
    backend = state(ctx).backend()
    if by == "error":
        if watch or checks or output is StatsOutput.OPENMETRICS:
            raise InvalidArgument("--by error is a view of its own: without --watch, --check "
                                  "and -o openmetrics")
        from runnerq_cli.cli.failing import show_failures

        show_failures(backend, history, output.value)
        return
    latency_window = values.duration(window, "--window")
    history_seconds = history or (HOUR if watch else None)

    def take() -> StatsSnapshot:
        snap = backend.stats_snapshot(by_type=by == "type", throughput_minutes=throughput_minutes,
                                      latency_window_seconds=latency_window,
                                      history_seconds=history_seconds)
        snap["pause"] = backend.paused().to_json()  # pause/resume (control.py)
        return snap

    if watch:
        _watch(take, pause, iterations)
        return
    if output is StatsOutput.OPENMETRICS:
        from runnerq_cli.exposition import render as render_metrics

        sample = backend.metrics_sample(window_seconds=latency_window)
        sys.stdout.write(render_metrics([sample]))
        if not checks:
            return
        snap = take()
    else:
        snap = take()
        if output is StatsOutput.TEXT:
            console().print(render(snap))
        else:
            from runnerq_cli.cli.output import OutputFormat

            emit(OutputFormat(output.value), snap)
    failures = evaluate(checks, check_values(snap))
    for line in failures:
        error_line(line)
    sys.stdout.flush()
    if failures:
        raise typer.Exit(int(ExitCode.CHECK_FAILED))


def _watch(take: Any, pause: float, iterations: int) -> None:
    """Redraw in place on a terminal (rich Live); elsewhere print one block per refresh.

    Ctrl-C leaves cleanly (exit 0); SIGTERM too. SIGINT is restored to its default
    Python handler first: a process started with `&` from a non-interactive shell
    inherits it ignored, and Ctrl-C or `kill -INT` would otherwise never stop it.
    """
    import signal
    import threading
    import time

    from rich.live import Live
    from rich.rule import Rule

    from runnerq_cli.cli.output import console

    out = console()
    stop = threading.Event()
    previous_handlers: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        def stop_now(*_: Any) -> None:
            stop.set()

        previous_handlers = {sig: signal.signal(sig, stop_now)
                             for sig in (signal.SIGINT, signal.SIGTERM)}
    prev: StatsSnapshot | None = None
    count = 0
    try:
        live = Live(console=out, auto_refresh=False, transient=False) if out.is_terminal else None
        if live is not None:
            live.start()
        try:
            while not stop.is_set():
                snap = take()
                view = render(snap, prev)
                if live is not None:
                    live.update(view, refresh=True)
                else:
                    out.print(Rule(f"refresh {count + 1}"))
                    out.print(view)
                    out.file.flush()
                prev = snap
                count += 1
                if iterations and count >= iterations:
                    break
                deadline = time.monotonic() + pause
                while not stop.is_set() and time.monotonic() < deadline:
                    time.sleep(min(0.05, pause))
        finally:
            if live is not None:
                live.stop()
    except KeyboardInterrupt:
        pass  # Ctrl-C: the view stays on screen, exit 0
    finally:
        for sig, handler in previous_handlers.items():
            signal.signal(sig, handler)


def register(app: typer.Typer) -> None:
    """Add `stats` to the root app."""
    app.command("stats", epilog=examples("stats"))(stats_cmd)
