"""`runnerq-mongo stats`: a snapshot of the queue, a live view (`--watch`), and `--check`.

All numbers are computed on the server (backend/views/metrics.py says what each
query costs); this module only formats them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import typer

from runnerq_cli.cli.choices import STATS_BY, completer
from runnerq_cli.cli.examples import examples
from runnerq_cli.cli.output import OUTPUT_OPTION_HELP
from runnerq_cli.plural import counted

if TYPE_CHECKING:
    from runnerq_cli.backend.api import RunnerQ
    from runnerq_cli.backend.domain.snapshots import History, StatsSnapshot
    from runnerq_cli.cli.stats_checks import Check


class StatsOutput(StrEnum):
    """`stats -o`: the common formats plus a metrics scrape, in the Prometheus text format
    or in OpenMetrics (`metrics serve` answers either, by the Accept header)."""

    TEXT = "text"
    JSON = "json"
    JSONL = "jsonl"
    PROMETHEUS = "prometheus"
    OPENMETRICS = "openmetrics"


# The outputs that are a metrics scrape (what `metrics serve` answers), not a snapshot.
EXPOSITIONS = (StatsOutput.PROMETHEUS, StatsOutput.OPENMETRICS)

STATUS_ORDER = ("pending", "scheduled", "processing", "waiting", "completed", "failed",
                "dead_letter", "cancelled")
STATUS_STYLE = {"pending": "cyan", "scheduled": "blue", "processing": "cyan",
                "waiting": "blue", "completed": "green", "failed": "red", "dead_letter": "bold red",
                "cancelled": "magenta"}


SPARKS = "▁▂▃▄▅▆▇█"
ESTIMATE_MARK = "≈"
HOUR = 3600.0
TYPE_WIDTH = 12  # the history's type column: the rest of an 80-column line is pictures


# What a rise means: more completed (or live workers) is good, more failed or
# dead-lettered is bad; the rest (pending, running, ...) is neither and stays plain.
GOOD_WHEN_UP = frozenset({"completed", "workers"})
BAD_WHEN_UP = frozenset({"failed", "dead_letter"})


def _delta(now: int, before: int | None, what: str = "") -> str:
    """`+3` / `-2`, green when the change is good news, red when bad, plain otherwise."""
    if before is None or now == before:
        return ""
    text = f"+{now - before}" if now > before else str(now - before)
    if what in GOOD_WHEN_UP:
        style = "green" if now > before else "red"
    elif what in BAD_WHEN_UP:
        style = "red" if now > before else "green"
    else:
        return text
    return f"[{style}]{text}[/{style}]"


def _status_style(status: str, n: int) -> str:
    """A status's name: failed and dead-letter red only while there are some."""
    if status in BAD_WHEN_UP and not n:
        return "dim"
    return STATUS_STYLE.get(status, "bold")


def _seconds(value: float | None) -> str:
    from runnerq_cli.times import format_duration

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


def _rate(per_minute: float) -> str:
    """A rate to one decimal, as a person reads it (`148.3`, `30`, `1,204.5`); `<0.1` for
    a rate above 0 that would round to 0. The JSON keeps the exact value."""
    if 0 < per_minute < 0.05:
        return "<0.1"
    return f"{per_minute:,.1f}".removesuffix(".0")


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


def _first(rows: Mapping[str, Any], limit: int | None,
           weight: Callable[[Any], tuple[int, int]]) -> list[tuple[str, Any]]:
    """All rows by name; only `limit` of them (the most failing, then busiest) when cut."""
    if limit is None or len(rows) <= limit:
        return list(rows.items())
    return sorted(rows.items(), key=lambda item: weight(item[1]), reverse=True)[:limit]


def _more(rows: Mapping[str, Any], limit: int | None) -> list[Any]:
    from rich.text import Text

    if limit is None or len(rows) <= limit:
        return []
    return [Text(f"(+{counted(len(rows) - limit, 'more type')}: a taller terminal shows them)",
                 style="dim", no_wrap=True, overflow="ellipsis")]


def fit(snap: StatsSnapshot, previous: StatsSnapshot | None, console: Any) -> Any:
    """The view that fits the terminal: the per-type rows give way first (fewer, then
    none), so the totals, workers and pause always stay on screen (80x24, 60 columns)."""
    width, height = console.size
    options = console.options.update(width=width, height=None)  # measure, never pad
    history = snap["history"]["by_type"] if snap["history"] else {}
    most = max(len(snap["by_type"] or {}), len(history))
    for limit in (None, *range(most - 1, -1, -1)):
        view = render(snap, previous, max_types=limit)
        if len(console.render_lines(view, options, pad=False)) < height:
            return view
    return view


def _history_view(history: History, max_types: int | None = None) -> Any:
    """Per type: outcomes per bucket as a sparkline, and the run time's p50/p95 trend."""
    from rich.table import Table
    from rich.text import Text

    from runnerq_cli.literal import rich_text
    from runnerq_cli.times import format_duration

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
    rows = _first(history["by_type"], max_types,
                  lambda per: (per["failed"] + per["dead_letter"], sum(per["per_bucket"])))
    for name, per in rows:
        failed = per.get("failed", 0) + per.get("dead_letter", 0)
        table.add_row(rich_text(name, max_length=TYPE_WIDTH),
                      Text(sparkline(per["per_bucket"]), style="green"),
                      str(per.get("completed", 0) + failed), str(failed),
                      _seconds(_latest(per["run_p50"])), _seconds(_latest(per["run_p95"])),
                      Text(sparkline(per["run_p95"]), style="yellow"))
    if not history["by_type"]:
        # A line of its own: in the type column (12 cells) it read "(nothing fi…".
        from rich.console import Group

        return Group(Text(f"per type, last {since}: nothing finished", style="dim",
                          no_wrap=True, overflow="ellipsis"))
    return table


def render(snap: StatsSnapshot, previous: StatsSnapshot | None = None,
           max_types: int | None = None) -> Any:
    """The text view of a snapshot; with `previous`, what changed since (the Δ column).

    The queue's totals, workers and pause come first; the per-type rows (`--by
    type`, the history) last, at most `max_types` of them (--watch fits the
    screen by giving them up first: `fit`).

    Every string from the database (queue, types, priorities, pause reason, actor,
    ids) is shown as inert text (literal.py); estimates are marked with ≈.
    """
    from rich.console import Group
    from rich.text import Text

    from runnerq_cli.literal import literal

    estimated = set(snap.get("estimated") or ())
    # The title is its own line: as a table title it would wrap to the narrow table's width.
    title = Text(f"queue {literal(snap['queue'])}  ({_shown_time(snap['generated_at'])})",
                 style="bold", no_wrap=True, overflow="ellipsis")
    parts: list[Any] = [title, _counts_view(snap, previous, estimated)]
    if estimated:
        parts.append(Text(f"{ESTIMATE_MARK} estimate: the collection's count minus the exact "
                          "counts", style="dim", no_wrap=True, overflow="ellipsis"))
    parts += [Text(""), _info_view(snap, previous)]
    parts += _per_type_views(snap, max_types, estimated)
    return Group(*parts)


def _counts_view(snap: StatsSnapshot, previous: StatsSnapshot | None,
                 estimated: set[str]) -> Any:
    """The count table: a row per status and the total, a column per priority, and the
    Δ column with a `previous`. Apart from `render` so that one reads as the view's
    parts in order, each short enough to check by eye."""
    from rich.table import Table
    from rich.text import Text

    from runnerq_cli.literal import rich_text

    before = previous["by_status"] if previous is not None else {}
    statuses = [s for s in STATUS_ORDER if s in snap["by_status"]] + sorted(
        s for s in snap["by_status"] if s not in STATUS_ORDER)
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
        row: list[Any] = [rich_text(status.replace("_", "-"), style=_status_style(status, n)),
                          shown(status, n)]
        if previous is not None:
            row.append(_delta(n, before.get(status), status))
        row += ["" if status in estimated else str(snap["by_priority"][p].get(status, 0))
                for p in priorities]
        counts.add_row(*row)
    total_row: list[Any] = [Text("total", style="bold"), shown("total", snap["total"])]
    if previous is not None:
        total_row.append(_delta(snap["total"], previous.get("total")))
    counts.add_row(*total_row, *[""] * len(priorities))
    return counts


def _info_view(snap: StatsSnapshot, previous: StatsSnapshot | None) -> Any:
    """The label/value table under the counts: oldest pending, throughput, latency,
    workers, pause, malformed documents. Apart from `render` to keep each part of the
    view a function of its own that fits on a screen."""
    from rich.table import Table
    from rich.text import Text

    from runnerq_cli.literal import rich_text
    from runnerq_cli.times import format_duration

    oldest = snap.get("oldest_pending")
    tp, lat, workers = snap["throughput"], snap["latency"], snap["workers"]
    info = Table(box=None, show_header=False, pad_edge=False)
    info.add_column(style="bold")
    info.add_column()
    # A wait in the one duration form doctor's backlog check and `queues` print too.
    info.add_row("oldest pending",
                 rich_text(f"{format_duration(oldest['age_seconds'])} "
                           f"({oldest['activity_id']})") if oldest else "-")
    # Rates over the time the window really covers (not before the queue's first activity).
    covered = tp["covered_seconds"]
    span = (f"{tp['window_minutes']}m" if covered >= tp["window_minutes"] * 60
            else _seconds(covered))
    info.add_row(f"throughput ({span})",
                 f"{_rate(tp['completed_per_minute'])} completed/min, "
                 f"{_rate(tp['failed_per_minute'])} failed/min")
    # "claim to done": from the claim to the finish as recorded (the handler, the worker's
    # queueing of it, the acknowledgement), not the handler's own time (docs/cli.md).
    for label, d in (("queue wait", lat["queue_wait_seconds"]),
                     ("claim to done", lat["run_seconds"])):
        info.add_row(f"{label} ({_seconds(lat['window_seconds'])})",
                     f"p50 {_seconds(d['p50'])}  p95 {_seconds(d['p95'])}  "
                     f"p99 {_seconds(d['p99'])}  (n={d['count']}"
                     f"{', capped' if lat['capped'] else ''})")
    before_workers = previous["workers"]["live"] if previous is not None else None
    info.add_row("workers", f"{workers['live']} live "
                 f"{_delta(workers['live'], before_workers, 'workers')}"
                 f"  {workers['stale']} stale  {workers['in_flight']} in flight")
    pause = snap.get("pause") or {}
    if pause.get("paused"):  # each paused type with its own since, by and why
        from runnerq_cli.backend.domain.pause import PauseState
        from runnerq_cli.cli.words import describe_pause

        info.add_row("paused", Text(describe_pause(PauseState.from_json(pause))
                                    .removeprefix("paused: "), style="bold yellow"))
    else:
        info.add_row("paused", "no")
    if snap.get("schedules"):
        info.add_row("schedules", schedules_line(snap["schedules"]))
    if snap.get("limits"):
        info.add_row("limits", limits_line(snap["limits"]))
    if snap.get("malformed"):
        found = len(snap["malformed"])  # skipped by the counts, or set aside
        info.add_row("malformed", rich_text(f"{counted(found, 'document')}, "
                                            f"e.g. {snap['malformed'][0]}", max_length=200))
    return info


def limits_line(limits: Sequence[Mapping[str, Any]]) -> Any:
    """The flow limits in one line: each type's slots in use (of its concurrency) and the
    work it holds back, the held-back ones first, in yellow (`stats`)."""
    from rich.text import Text

    from runnerq_cli.literal import literal

    line = Text(no_wrap=True, overflow="ellipsis")
    for i, row in enumerate(sorted(limits, key=lambda r: (-r["held_back"],
                                                          r["activity_type"]))):
        if i:
            line.append("; ")
        cap = f"/{row['concurrency']}" if row["concurrency"] else ""
        # literal: a Text's content is never markup, but its ESC and newline would act
        line.append(literal(row["activity_type"]))
        line.append(f" {row['in_use']}{cap} in use")
        if row["held_back"]:
            line.append(f", {row['held_back']} held back", style="yellow")
    return line


def schedules_line(summary: Mapping[str, Any]) -> Any:
    """The schedules in one short line: how many, paused, the next fire and in how long,
    the missed fires, and the overdue or malformed ones in red (`stats`, `queues`)."""
    from rich.text import Text

    from runnerq_cli.literal import literal
    from runnerq_cli.times import format_duration

    if not summary["count"]:
        return Text("none", style="dim")
    line = Text(f"{summary['count']}")
    if summary["paused"]:
        line.append(f", {summary['paused']} paused")
    upcoming = summary.get("next_fire")
    if upcoming is not None:
        seconds = upcoming["in_seconds"]
        line.append(", next ")
        line.append(literal(upcoming["name"]))  # as text: see limits_line
        line.append(f" in {format_duration(seconds)}" if seconds > 0 else " due now")
    if summary["missed_fires"]:
        line.append(f", {summary['missed_fires']} missed")
    for key, word in (("late", "overdue"), ("problems", "malformed"), ("ended", "ended")):
        if summary[key]:
            line.append(f", {summary[key]} {word}", style="red" if key != "ended" else "")
    return line


def _per_type_views(snap: StatsSnapshot, max_types: int | None,
                    estimated: set[str]) -> list[Any]:
    """The view's last parts: the `--by type` table and the history, each cut to
    `max_types` rows, or one dim line instead when `fit` left no room for rows. Apart
    from `render` because this is the part whose size `fit` trades against the screen."""
    from rich.table import Table
    from rich.text import Text

    from runnerq_cli.literal import rich_text

    parts: list[Any] = []
    if max_types == 0 and (snap["by_type"] or snap["history"]):
        parts += [Text(""), Text("(per-type rows: a taller terminal, or stats --since)",
                                 style="dim", no_wrap=True, overflow="ellipsis")]
    elif snap["by_type"]:
        types = Table(title="by type (exact counts)", box=None, header_style="bold",
                      title_justify="left", pad_edge=False)
        types.add_column("type", overflow="fold")
        shown_statuses = [s for s in STATUS_ORDER if s not in estimated]
        for status in shown_statuses:
            types.add_column(status.replace("_", "-"), justify="right")
        rows = _first(snap["by_type"], max_types,
                      lambda per: (per.get("failed", 0) + per.get("dead_letter", 0),
                                   sum(per.values())))
        for name, per in rows:
            types.add_row(rich_text(name), *[str(per.get(s, 0)) for s in shown_statuses])
        parts += [Text(""), types, *_more(snap["by_type"], max_types)]

    if snap["history"] and max_types != 0:
        history = snap["history"]
        parts += [Text(""), _history_view(history, max_types),
                  *_more(history["by_type"], max_types)]
    return parts


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
    watch: bool = typer.Option(False, "--watch", "-w",
                               help="A live view, refreshed in place (q or Ctrl-C quits)."),
    interval: str = typer.Option("2s", "--interval", metavar="DURATION",
                                 help="--watch: time between refreshes."),
    window: str = typer.Option("15m", "--window", metavar="DURATION",
                               help="Latency percentiles over activities finished this recently."),
    throughput_minutes: int = typer.Option(5, "--throughput-minutes", min=1, max=1440,
                                           help="Throughput over the last N minutes (1 to 1,440)."),
    since: str | None = typer.Option(None, "--since", metavar="DURATION",
                                     help="Also per type, from the finished activities kept: "
                                          "outcomes and run-time trend over this window "
                                          "(1m to 90d; --watch: 1h)."),
    output: StatsOutput = typer.Option(
        StatsOutput.TEXT, "--output", "-o", case_sensitive=False,
        help=OUTPUT_OPTION_HELP[:-1] + "; prometheus: the Prometheus text format "
             "(node_exporter's textfile collector); openmetrics: OpenMetrics 1.0 text "
             "(ends with # EOF)."),
    iterations: int = typer.Option(0, "--iterations", hidden=True, min=0, max=10**6,
                                   help="--watch: stop after N refreshes (tests)."),
) -> None:
    """Counts by status and priority, oldest pending, throughput, latency, workers.

    Counts of pending, scheduled, running, failed, dead-letter and cancelled
    activities are exact; completed (and so the total) is an estimate, marked ≈.
    """
    from runnerq_cli import times, values
    from runnerq_cli.backend.domain.snapshots import CHECK_DURATIONS, CHECK_NAMES
    from runnerq_cli.cli.state import state, warn_if_missing
    from runnerq_cli.cli.stats_checks import parse_check
    from runnerq_cli.errors import InvalidArgument

    if by not in (None, *STATS_BY):
        raise InvalidArgument(f"--by {values.shown(by)}: one of {', '.join(STATS_BY)}")
    history = (times.duration(since, "--since", minimum=60.0, maximum=90 * 86400.0)
               if since is not None else None)
    checks = [parse_check(text, CHECK_NAMES, CHECK_DURATIONS) for text in check or []]
    if watch and (checks or output is not StatsOutput.TEXT):
        raise InvalidArgument("--watch is a view for people: use it without --check and -o")
    pause = times.duration(interval, "--interval", minimum=0.1, maximum=86400.0)
    backend = state(ctx).backend()
    if by == "error":
        if watch or checks or output in EXPOSITIONS:
            raise InvalidArgument("--by error is a view of its own: without --watch, --check "
                                  "and -o prometheus or openmetrics")
        from runnerq_cli.cli.failing import show_failures

        show_failures(backend, history, output.value)
        return
    latency_window = times.duration(window, "--window")
    history_seconds = history or (HOUR if watch else None)

    def take() -> StatsSnapshot:
        snap = backend.inspector.stats_snapshot(by_type=by == "type",
                                                throughput_minutes=throughput_minutes,
                                                latency_window_seconds=latency_window,
                                                history_seconds=history_seconds)
        snap["pause"] = backend.control.paused().to_json()  # pause/resume (control.py)
        snap["schedules"] = backend.schedule_views.summary()  # one read of the schedules
        snap["limits"] = [i.brief() for i in backend.limits.summary()]  # flow limits
        return snap

    if watch:
        warn_if_missing(backend)  # a live view of zeros: perhaps not that queue
        _watch(take, pause, iterations)
        return
    _print_once(backend, take, output, checks, latency_window)


def _print_once(backend: RunnerQ, take: Callable[[], StatsSnapshot], output: StatsOutput,
                checks: list[Check], latency_window: float) -> None:
    """Without --watch: one snapshot printed in `output`'s format, then the `--check`s
    (exit 7 when one fails). Apart from `stats_cmd`, which parses and checks the options,
    so each of the two stays short enough to read at once."""
    import sys

    from runnerq_cli.backend.domain.snapshots import check_values
    from runnerq_cli.cli.exits import ExitCode
    from runnerq_cli.cli.output import console, emit, error_line
    from runnerq_cli.cli.state import warn_if_missing
    from runnerq_cli.cli.stats_checks import evaluate

    if output in EXPOSITIONS:
        from runnerq_cli.cli.exposition import render as render_metrics

        sample = backend.inspector.metrics_sample(window_seconds=latency_window)
        sample["schedules"] = backend.schedule_views.series()
        sample["limits"] = [i.brief() for i in backend.limits.summary()]
        sys.stdout.write(render_metrics([sample],
                                        openmetrics=output is StatsOutput.OPENMETRICS))
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
    if not snap.get("total"):
        warn_if_missing(backend)  # all zero: an empty queue, or not that queue?
    failures = evaluate(checks, check_values(snap))
    for line in failures:
        error_line(line)
    sys.stdout.flush()
    if failures:
        raise typer.Exit(int(ExitCode.CHECK_FAILED))


def _stop_on_signals(stop: threading.Event) -> dict[int, Any]:
    """SIGINT and SIGTERM set `stop` (in the main thread only: elsewhere no handler can
    be set); the handlers they replaced, for `_restore_signals`."""
    import signal

    if threading.current_thread() is not threading.main_thread():
        return {}

    def stop_now(*_: Any) -> None:
        stop.set()

    return {sig: signal.signal(sig, stop_now) for sig in (signal.SIGINT, signal.SIGTERM)}


def _restore_signals(previous_handlers: dict[int, Any]) -> None:
    import signal

    for sig, handler in previous_handlers.items():
        signal.signal(sig, handler)


def _show(out: Any, live: Any, snap: StatsSnapshot, prev: StatsSnapshot | None,
          count: int) -> Any:
    """One refresh of the view: redrawn in place (live), else printed under a rule; the
    view shown."""
    from rich.rule import Rule

    view = fit(snap, prev, out) if live is not None else render(snap, prev)
    if live is not None:
        live.update(view, refresh=True)
    else:
        out.print(Rule(f"refresh {count + 1}"))
        out.print(view)
        out.file.flush()
    return view


def _watch(take: Any, pause: float, iterations: int) -> None:
    """Redraw in place on a terminal (rich Live); elsewhere print one block per refresh.

    Ctrl-C leaves cleanly (exit 0); SIGTERM too. SIGINT is restored to its default
    Python handler first: a process started with `&` from a non-interactive shell
    inherits it ignored, and Ctrl-C or `kill -INT` would otherwise never stop it.
    A server that goes away after the first view is waited for (domain/outage.py): the
    view says since when, and carries on when it is back; away at start is exit 6.
    """
    import time

    from rich.console import Group
    from rich.live import Live
    from rich.text import Text

    from runnerq_cli.cli.outage_notes import note_away, note_back, watch
    from runnerq_cli.cli.output import console

    out = console()
    stop = threading.Event()
    previous_handlers = _stop_on_signals(stop)
    prev: StatsSnapshot | None = None
    count = 0
    keys = QuitKey()
    shown: list[Any] = []  # the view on screen (the away line goes under it)

    def paused_for(seconds: float) -> bool:
        """Wait `seconds` (q and the signals heard meanwhile); True when stopped."""
        deadline = time.monotonic() + seconds
        while not stop.is_set() and time.monotonic() < deadline:
            if keys.pressed(min(0.05, seconds)):
                stop.set()
        return stop.is_set()

    try:
        live = Live(console=out, auto_refresh=False, transient=False) if out.is_terminal else None

        def away(outage: Any) -> None:
            if live is None:
                note_away(outage)
            else:
                line = Text(f"⚠ {outage.away_line()}", style="bold yellow")
                live.update(Group(*shown, line), refresh=True)

        def back(outage: Any) -> None:
            if live is None:
                note_back(outage)

        # The retries' back-off hears q and the signals too.
        ride = watch(on_away=away, on_back=back, sleep=paused_for)
        if live is not None:
            live.start()
            keys.start()
        try:
            while not stop.is_set():
                snap = ride.call(take)
                if snap is None:  # stopped while the server was away
                    break
                shown[:] = [_show(out, live, snap, prev, count)]
                prev = snap
                count += 1
                if iterations and count >= iterations:
                    break
                paused_for(pause)
        finally:
            keys.stop()
            if live is not None:
                live.stop()
    except KeyboardInterrupt:
        pass  # Ctrl-C: the view stays on screen, exit 0
    finally:
        _restore_signals(previous_handlers)


class QuitKey:
    """`q` (or Q) on the terminal leaves `stats --watch`, as in top and less.

    Standard input is put in cbreak mode (keys arrive one by one, unechoed) while
    the view runs and restored after; off a terminal it does nothing.
    """

    def __init__(self) -> None:
        self._saved: Any = None

    def start(self) -> None:
        import sys
        import termios
        import tty

        try:
            if sys.stdin.isatty():
                self._saved = termios.tcgetattr(sys.stdin.fileno())
                tty.setcbreak(sys.stdin.fileno())
        except (termios.error, OSError, ValueError):
            self._saved = None

    def pressed(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds; True when q was pressed."""
        import os
        import select
        import sys
        import time

        if self._saved is None:
            time.sleep(timeout)
            return False
        ready, _, _ = select.select([sys.stdin], [], [], timeout)
        return bool(ready) and os.read(sys.stdin.fileno(), 1) in (b"q", b"Q")

    def stop(self) -> None:
        import sys
        import termios

        if self._saved is not None:
            termios.tcsetattr(sys.stdin.fileno(), termios.TCSADRAIN, self._saved)
            self._saved = None


def register(app: typer.Typer) -> None:
    """Add `stats` to the root app."""
    app.command("stats", epilog=examples("stats"))(stats_cmd)
