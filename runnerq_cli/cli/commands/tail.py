"""`runnerq-mongo tail events`: follow lifecycle events (change stream or polling).

The position is an opaque cursor (backend/views/events.py): printed on stderr at
exit (`cursor: ...`) and/or kept in `--cursor-file`; `--resume` continues
from it with no event lost or repeated. The file records each event as its
line goes out (cli/cursorfile.py), so a tail killed by SIGKILL prints again
on resume at most the one event it was printing at the kill, idle or not.
"""

from __future__ import annotations

from typing import Any

import typer

from runnerq_cli.cli.choices import TAIL_MODES, completer
from runnerq_cli.cli.examples import examples
from runnerq_cli.cli.output import OutputFormat, output_option
from runnerq_cli.plural import counted

tail_app = typer.Typer(help="Follow what happens on the queue.", no_args_is_help=True)

CURSOR_MAX_CHARS = 1_000_000  # far above any real cursor; bounds what a wrong file costs


def _split(values: list[str] | None, flag: str) -> tuple[str, ...]:
    """`--type a,b --type c` as (a, b, c); an empty one (`--type ''`, `--type a,,b`) is
    refused: it must not widen the tail to every type."""
    from runnerq_cli.filter_values import filter_terms

    out: list[str] = []
    for value in values or []:
        out.extend(filter_terms((v.strip() for v in value.split(",")), flag))
    return tuple(out)


def _note(message: str) -> None:
    """`note: ...` on stderr: information, not an error (the tail carries on)."""
    import sys

    from runnerq_cli.redaction import redact_uri

    sys.stderr.write(f"note: {' '.join(redact_uri(message).split())}\n")
    sys.stderr.flush()


def _read_cursor_file(path: str) -> str:
    """The cursor kept in `path`; InvalidArgument if it is not UTF-8 text."""
    from runnerq_cli.errors import InvalidArgument

    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read(CURSOR_MAX_CHARS)
    except UnicodeDecodeError:
        raise InvalidArgument(f"--cursor-file: {path} is not a cursor (not UTF-8 text)") from None
    except OSError as exc:
        raise InvalidArgument(f"--cursor-file: cannot read {path}: "
                              f"{exc.strerror or exc}") from None


def _decode_cursor(text: str, what: str) -> object:
    """EventCursor.decode, with a cursor whose times are out of range a usage error too."""
    from runnerq_cli.backend.domain.event_cursor import EventCursor
    from runnerq_cli.errors import InvalidArgument

    try:
        return EventCursor.decode(text[:CURSOR_MAX_CHARS])
    except (OverflowError, RecursionError, MemoryError):
        raise InvalidArgument(f"{what}: invalid event cursor (a time out of range)") from None


@tail_app.command("events", epilog=examples("tail events"))
def tail_events(
    ctx: typer.Context,
    since: str | None = typer.Option(None, "--since", metavar="TIME",
                                     help="Start with history: events at or after TIME "
                                          "(ISO-8601, or a duration ago like 10m)."),
    resume: str | None = typer.Option(None, "--resume", metavar="CURSOR",
                                      help="Continue after the cursor printed on exit."),
    cursor_file: str | None = typer.Option(None, "--cursor-file", metavar="PATH",
                                           help="Resume from this file if it exists, and keep "
                                                "the cursor in it."),
    mode: str = typer.Option("auto", "--mode", metavar="auto|change-stream|poll",
                             autocompletion=completer(TAIL_MODES),
                             help="auto: change streams when the server offers them."),
    activity_type: list[str] | None = typer.Option(None, "--type", metavar="TYPE",
                                                   help="Only these activity types "
                                                        "(repeat or comma-separate)."),
    event_type: list[str] | None = typer.Option(None, "--event", metavar="EVENT",
                                                help="Only these event types, e.g. "
                                                     "Completed,DeadLetter."),
    activity: str | None = typer.Option(None, "--activity", metavar="ID",
                                        help="Only this activity's events."),
    worker: str | None = typer.Option(None, "--worker", metavar="WORKER_ID",
                                      help="Only events of this worker."),
    follow: bool = typer.Option(True, "--follow/--no-follow",
                                help="Keep following (default), or print what exists and exit."),
    output: OutputFormat = output_option(),
    poll_interval: float = typer.Option(0.5, "--poll-interval", hidden=True),
    settle: float = typer.Option(5.0, "--settle", hidden=True,  # events.DEFAULT_SETTLE_SECONDS
                                 help="Seconds a write may take on the server between its "
                                      "stamp and becoming visible."),
    max_events: int = typer.Option(0, "--max-events", hidden=True, min=0, max=10**9,
                                   help="Stop after this many events (tests, scripts)."),
) -> None:
    """Print lifecycle events as they happen; Ctrl-C stops and prints the resume cursor.

    -o jsonl: one JSON object per event, as it happens. -o json: one JSON array of
    all events, printed when the tail stops (at the end with --no-follow, else on
    Ctrl-C/SIGTERM), as Temporal's CLI does; --cursor-file is then written once, after it.
    """
    import os

    from runnerq_cli import filter_values, paths, times
    from runnerq_cli.cli.state import state
    from runnerq_cli.errors import InvalidArgument

    if mode not in ("auto", "change-stream", "poll"):
        raise InvalidArgument(f"--mode {mode!r}: use auto, change-stream or poll")
    # `--resume "$CURSOR"` or `--activity "$ID"` with the variable unset: refused, never
    # the whole history or every activity's events
    filter_values.filter_term(resume, "--resume", "")
    filter_values.filter_term(cursor_file, "--cursor-file", "")
    filter_values.filter_term(activity, "--activity")
    filter_values.filter_term(worker, "--worker")
    if since is not None and (resume or (cursor_file and os.path.exists(cursor_file))):
        raise InvalidArgument("give --since or a cursor to resume from, not both")
    if activity:  # a full id, or a prefix as text views print it (one query)
        from runnerq_cli.cli.ids import activity_id

        activity = str(activity_id(state(ctx).backend(), activity))
    filters = _filters(event_type, activity_type, activity, worker)
    start = times.optional_time(since, "--since")
    times.duration(poll_interval, "--poll-interval", minimum=0.01, maximum=3600.0)
    times.duration(settle, "--settle", maximum=3600.0)
    if cursor_file:
        cursor_file = paths.writable_file(cursor_file, "--cursor-file")
    backend = state(ctx).backend()
    cursor = _start_cursor(backend, resume, cursor_file, start, follow)
    stream = backend.event_stream(cursor=cursor, filters=filters, mode=mode, follow=follow,
                                  poll_interval=poll_interval)
    stream.settle = settle
    stream.outage = _outage_notes()
    stream.on_reconnect = lambda exc: None if stream.outage and stream.outage.away else _note(
        f"connection lost, resuming from the cursor ({type(exc).__name__})")
    _print_events(backend, stream, output, cursor_file, max_events, follow)


def _outage_notes() -> Any:
    """The tail's outage notes (cli/outage_notes.py, as every long-running command's):
    `note: connection lost, resuming from the cursor: the server is away since ...`."""
    from runnerq_cli.cli.outage_notes import note, note_back, watch

    return watch(on_away=lambda o: note(f"connection lost, resuming from the cursor: "
                                        f"{o.away_line()}"), on_back=note_back)


def _filters(event_type: list[str] | None, activity_type: list[str] | None,
             activity: str | None, worker: str | None) -> Any:
    """The EventFilter of the options; an unknown event type is a warning (shown, not
    refused: other programs may write their own)."""
    from runnerq_cli.backend.domain.event_cursor import EventFilter
    from runnerq_cli.backend.domain.event_types import EventType
    from runnerq_cli.backend.domain.models import parse_activity_id
    from runnerq_cli.cli.output import warning_line

    events = _split(event_type, "--event")
    known = {e.value for e in EventType}
    unknown = [e for e in events if e not in known]
    if unknown:
        warning_line(f"unknown event type(s) {', '.join(unknown)[:200]} "
                     f"(known: {', '.join(sorted(known))})")
    return EventFilter(activity_id=parse_activity_id(activity) if activity else None,
                       event_types=events, activity_types=_split(activity_type, "--type"),
                       worker_id=worker)


def _start_cursor(backend: Any, resume: str | None, cursor_file: str | None,
                  start: Any, follow: bool) -> Any:
    """Where to start: --resume, the cursor file, --since, else the end (following) or
    the beginning (--no-follow). The server is asked first: unreachable at start is
    exit 6 at once (reconnecting is for later)."""
    import os

    from runnerq_cli.backend.domain.event_cursor import EventCursor

    cursor: Any = None
    if resume:
        cursor = _decode_cursor(resume, "--resume")
    elif cursor_file and os.path.exists(cursor_file):
        from runnerq_cli.cli.cursorfile import read_cursor_file

        snapshot, journal = read_cursor_file(_read_cursor_file(cursor_file))
        cursor = _decode_cursor(snapshot, "--cursor-file")
        for event_id, position in journal:  # printed after the snapshot was written
            if position >= cursor.mark:
                cursor.seen[event_id] = position
    elif start is not None:
        cursor = EventCursor.starting_at(start)
    backend.ping()
    if cursor is None:
        cursor = backend.inspector.event_cursor_at_end() if follow else EventCursor()
    return cursor


def _print_events(backend: Any, stream: Any, output: OutputFormat, cursor_file: str | None,
                  max_events: int, follow: bool) -> None:
    """Print the stream until it ends or is stopped (SIGINT/SIGTERM), keeping the cursor
    file, then the resume cursor on stderr."""
    import contextlib
    import signal
    import sys
    import threading

    from runnerq_cli.cli.cursorfile import CursorFileSaver
    from runnerq_cli.cli.eventfmt import event_line, event_record
    from runnerq_cli.cli.output import console, print_json, print_jsonl

    out = console()
    text = output is OutputFormat.TEXT
    # -o json: the events gathered into one array, printed when the tail stops.
    gathered: list[dict[str, object]] | None = [] if output is OutputFormat.JSON else None
    saver = CursorFileSaver(cursor_file, lambda: stream.cursor) if cursor_file else None
    if saver:
        saver.start()  # a write error is a clean exit 2, before anything is printed
    output_lock = saver.output_lock if saver else contextlib.nullcontext()
    previous: dict[int, object] = {}
    if threading.current_thread() is threading.main_thread():
        for stop_signal in (signal.SIGINT, signal.SIGTERM):
            previous[stop_signal] = signal.signal(stop_signal, lambda *_: stream.stop())
    count, finished = 0, False
    try:
        for event in stream:
            with output_lock:
                if text:
                    out.print(event_line(event))
                elif gathered is not None:
                    gathered.append(event_record(event))
                else:
                    print_jsonl(event_record(event))
                if saver and gathered is None:  # -o json prints (and saves) at the end
                    saver.printed(event)  # flushed, and recorded in the file's journal
            count += 1
            if saver:
                saver.check()
            if max_events and count >= max_events:
                break
        finished = True
    finally:
        for signum, handler in previous.items():
            with contextlib.suppress(Exception):
                signal.signal(signum, handler)  # type: ignore[arg-type]
        if gathered is not None:
            with contextlib.suppress(BrokenPipeError, ValueError):
                print_json(gathered)
            if saver:
                saver.printed()  # the array is out: its last event is the position
        with contextlib.suppress(BrokenPipeError, ValueError):
            sys.stdout.flush()
        if saver:
            saver.close()  # the position of the last event printed
        if finished:  # an error is one line on stderr (the cursor file still holds the place)
            encoded = (saver.last if saver else stream.cursor).encode()
            sys.stderr.write(f"cursor: {encoded}\n")
            if follow and text:
                sys.stderr.write(f"({counted(count, 'event')}, mode {stream.mode}; resume with "
                                 f"--resume CURSOR)\n")
            sys.stderr.flush()
    if saver:
        saver.check()


def register(app: typer.Typer) -> None:
    """Add `tail` (with `tail events`) to the root app."""
    app.add_typer(tail_app, name="tail")
