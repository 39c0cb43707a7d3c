"""`runnerq-mongo enqueue`: put one activity (TYPE) or many (`--from FILE`, NDJSON) on a queue.

One activity's input is validated before the server is contacted, so a typo
never writes half an activity and never waits for a server timeout first.
`--from` streams: lines are read, validated and written a batch at a time
(`--strict` validates the whole input in a first pass, spooling standard
input to a temporary file, and writes in a second), and a signal stops it
after the batch in progress (exit 130, rerun with `--skip-lines`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import typer

from runnerq_cli.cli.choices import ON_DUPLICATE, PRIORITIES, completer
from runnerq_cli.cli.examples import examples
from runnerq_cli.cli.output import (
    JsonObjectStream,
    OutputFormat,
    emit,
    output_option,
    print_jsonl,
)
from runnerq_cli.cli.state import state
from runnerq_cli.errors import ExitCode, InvalidArgument

if TYPE_CHECKING:
    from runnerq_cli.backend.api import RunnerQ
    from runnerq_cli.backend.models import EnqueueResult
    from runnerq_cli.backend.queue import ActivitySpec

DEFAULT_BATCH_SIZE = 100


# ------------------------------------------------------------------ parsing


def _read_payload_text(stream: Any, what: str) -> str | bytes:
    """A payload's JSON text from `stream`, refusing text too long for any storable payload."""
    from runnerq_cli import values

    text: str | bytes = stream.read(values.PAYLOAD_TEXT_MAX + 1)
    if len(text) > values.PAYLOAD_TEXT_MAX:
        raise InvalidArgument(f"{what}: more than {values.PAYLOAD_TEXT_MAX} bytes of JSON; a "
                              f"payload may take at most {values.PAYLOAD_MAX_BYTES} bytes "
                              "as BSON (7.5 MiB)")
    return text


def _stdin() -> Any:
    """Standard input as bytes where there are bytes (UTF-8 is checked by the parser)."""
    return getattr(sys.stdin, "buffer", None) or sys.stdin


def read_payload(payload: str | None) -> dict[str, Any]:
    """--payload JSON, --payload @file, --payload @- (stdin); without it, `{}`.

    Standard input is read only when asked for (`-p @-`): inside a shell
    `while read` loop, an implicit read would swallow the loop's own input.
    """
    from runnerq_cli import values

    if payload is None:
        return {}
    if payload.startswith("@"):
        name = payload[1:]
        if name == "-":
            return values.json_object(_read_payload_text(_stdin(), "payload from stdin"),
                                      "payload from stdin")
        values.readable_file(name, "--payload")
        try:
            with open(name, "rb") as handle:
                text = _read_payload_text(handle, f"--payload file {name}")
        except OSError as exc:
            raise InvalidArgument(f"--payload: cannot read {name}: "
                                  f"{exc.strerror or exc}") from None
        return values.json_object(text, f"--payload file {name}")
    return values.json_object(payload, "--payload")


def parse_metadata(items: list[str]) -> dict[str, str]:
    """`k=v` pairs (repeatable --metadata) into a dict; later keys win."""
    from runnerq_cli.backend.models import parse_metadata_pairs
    from runnerq_cli.cli.flags import METADATA

    return parse_metadata_pairs(items, METADATA)


# ------------------------------------------------------------------ one


def _print_one(backend: RunnerQ, result: EnqueueResult, output: OutputFormat,
               quiet: bool) -> None:
    """The id (-q), a sentence (text) or the whole activity (json)."""
    from runnerq_cli.literal import literal

    if quiet:
        typer.echo(str(result.activity_id))
        return
    if output is not OutputFormat.TEXT:
        from runnerq_cli.errors import NotFound

        try:
            doc = backend.get_activity(result.activity_id).to_json()
        except NotFound:  # an idempotency key whose activity is still being inserted
            doc = {"id": str(result.activity_id), "status": result.status}
        emit(output, {**doc, "created": result.created})
        return
    if result.created:
        typer.echo(f"enqueued {result.activity_id} ({literal(result.status)})")
    else:
        typer.echo(f"existing {result.activity_id} ({literal(result.status)}): the "
                   "idempotency key is held by it, nothing enqueued")


# ------------------------------------------------------------------ many


# Rejected lines listed in the text and JSON reports (the rest are counted: a file of
# millions of bad lines must not grow memory; -o jsonl streams every one).
REJECTED_LISTED = 1000


@dataclass
class BulkSummary:
    """What `enqueue --from` did: counts and the rejected lines.

    The activities written are not kept: each goes to `on_activity` as it is written
    (`-o json` and `-o jsonl` stream them), so memory does not grow with the input.
    Rejected lines go to `on_reject` (-o jsonl streams every one) and the first
    REJECTED_LISTED are kept for the text and JSON reports; the counts are exact.
    """

    lines: int = 0
    rejected: list[dict[str, Any]] = field(default_factory=list)
    rejected_counts: dict[str, int] = field(default_factory=dict)
    written: bool = True
    aborted: str | None = None
    enqueued: int = 0
    existing: int = 0
    skipped_lines: int = 0
    last_line: int = 0
    interrupted: bool = False
    on_activity: Callable[[dict[str, Any]], None] | None = None
    on_reject: Callable[[dict[str, Any]], None] | None = None

    def add(self, activity: dict[str, Any]) -> None:
        if activity["created"]:
            self.enqueued += 1
        else:
            self.existing += 1
        if self.on_activity is not None:
            self.on_activity(activity)

    def reject(self, line: int, kind: str, reason: str) -> None:
        record = {"line": line, "kind": kind, "reason": reason}
        self.rejected_counts[kind] = self.rejected_counts.get(kind, 0) + 1
        if len(self.rejected) < REJECTED_LISTED:
            self.rejected.append(record)
        if self.on_reject is not None:
            self.on_reject(record)

    @property
    def rejected_not_listed(self) -> int:
        """Rejected lines counted but not kept in `rejected`."""
        return self.count() - len(self.rejected)

    def count(self, kind: str | None = None) -> int:
        """Lines rejected as `kind` (invalid, duplicate), or in all."""
        if kind is None:
            return sum(self.rejected_counts.values())
        return self.rejected_counts.get(kind, 0)

    def exit_code(self) -> ExitCode:
        if self.interrupted:
            return ExitCode.INTERRUPTED
        if self.count("invalid"):
            return ExitCode.USAGE
        if self.count("duplicate"):
            return ExitCode.CONFLICT
        return ExitCode.OK

    def to_json(self) -> dict[str, Any]:
        """Every field of the `-o json` summary but `activities` (streamed before them)."""
        return {"lines": self.lines, "enqueued": self.enqueued, "existing": self.existing,
                "duplicates_rejected": self.count("duplicate"),
                "invalid": self.count("invalid"), "written": self.written,
                "aborted": self.aborted, "interrupted": self.interrupted,
                "skipped_lines": self.skipped_lines, "last_line": self.last_line,
                "rejected": self.rejected, "rejected_not_listed": self.rejected_not_listed}

    def text(self) -> list[str]:
        head = (f"enqueued {self.enqueued:,} of the {self.lines:,} lines read before the "
                "interruption" if self.interrupted else f"enqueued {self.enqueued} of "
                f"{self.lines} lines")
        parts = [head]
        if self.existing:
            parts.append(f"{self.existing} existing returned (idempotency key held)")
        if self.count("duplicate"):
            parts.append(f"{self.count('duplicate')} rejected as duplicates")
        if self.count("invalid"):
            parts.append(f"{self.count('invalid')} invalid")
        if not self.written:
            parts.append("nothing written (--strict)")
        lines = ["; ".join(parts)]
        lines += [f"line {r['line']}: {r['kind']}: {r['reason']}" for r in self.rejected]
        return lines + self.not_listed()

    def not_listed(self) -> list[str]:
        """The line saying how many rejected lines the report leaves out, if any."""
        if not self.rejected_not_listed:
            return []
        return [f"... and {self.rejected_not_listed} more rejected lines, not listed "
                "(-o jsonl lists every one)"]

    def interrupted_line(self, total_lines: int | None = None) -> str:
        """How far an interrupted run got: "8,700 of 20,000 lines" when the input's size
        is known (a file), else the lines read; then how to go on."""
        read = self.last_line - self.skipped_lines
        of = f" of {total_lines - self.skipped_lines:,}" if total_lines else ""
        where = f" after the {self.skipped_lines:,} skipped" if self.skipped_lines else ""
        return (f"interrupted: {read:,}{of} lines done{where}, {self.enqueued:,} enqueued; "
                f"last line reached {self.last_line}; run again with --skip-lines "
                f"{self.last_line} to go on")


def _read_lines(source: str, skip_lines: int = 0) -> Iterator[tuple[int, bytes | None]]:
    """The lines of `source` (- is stdin) one at a time, as bytes, after the first
    `skip_lines`: each line's UTF-8 is checked on its own, memory stays bounded.

    A line too long for any payload comes as None (refused alone). The file
    is opened before the first line, so a missing file is refused before
    anything is written.
    """
    from runnerq_cli.cli.commands.dlq import read_lines

    lines = read_lines(source, "--from")

    def after() -> Iterator[tuple[int, bytes | None]]:
        for number, text in lines:
            if number > skip_lines:
                yield number, text

    return after()


def _parse(text: bytes | None, defaults: dict[str, Any]) -> ActivitySpec:
    from runnerq_cli import values
    from runnerq_cli.backend.specs import spec_from_line

    if text is None:
        raise InvalidArgument(f"line longer than {values.PAYLOAD_TEXT_MAX} bytes; a payload "
                              f"may take at most {values.PAYLOAD_MAX_BYTES} bytes as BSON")
    return spec_from_line(text, defaults)


def _validate_all(source: str, defaults: dict[str, Any], summary: BulkSummary,
                  should_stop: Callable[[], bool], skip_lines: int) -> str | None:
    """--strict's first pass: every line checked, nothing written.

    Returns the source of the second pass: the file itself, or (for stdin) a
    temporary copy spooled as the lines go by; None when interrupted.
    """
    import tempfile

    spool: Any = None
    if source == "-":
        spool = tempfile.NamedTemporaryFile(prefix="runnerq-enqueue-", suffix=".ndjson",  # noqa: SIM115
                                            delete=False)
    try:
        for number, text in _read_lines(source, skip_lines):
            if spool is not None:
                spool.write((text or b"") + b"\n")  # an over-long line fails below anyway
            summary.last_line = number
            if text is not None and not text.strip():
                continue
            summary.lines += 1
            try:
                _parse(text, defaults)
            except InvalidArgument as exc:
                summary.reject(number, "invalid", str(exc))
            if should_stop():
                summary.interrupted = True
                break
    except BaseException:
        if spool is not None:
            spool.close()
            os.unlink(spool.name)
        raise
    if spool is None:
        return source
    spool.close()
    return str(spool.name)


def enqueue_bulk(backend_factory: Any, source: str, defaults: dict[str, Any], *,
                 strict: bool, batch_size: int, quiet: bool = False, skip_lines: int = 0,
                 on_activity: Callable[[dict[str, Any]], None] | None = None,
                 on_reject: Callable[[dict[str, Any]], None] | None = None,
                 on_batch: Callable[[list[dict[str, Any]]], None] | None = None,
                 should_stop: Callable[[], bool] | None = None) -> BulkSummary:
    """Read, validate and write the lines a batch at a time (none at all if strict and
    any line is invalid: then a first pass validates, a second writes).

    `should_stop` is polled after each line: the batch in progress is written,
    then reading stops (summary.interrupted, summary.last_line). `on_batch`
    gets each batch's activities as soon as they are written (-q prints them).
    """
    stop = should_stop or (lambda: False)
    summary = BulkSummary(on_activity=on_activity, on_reject=on_reject, skipped_lines=skip_lines,
                          last_line=skip_lines)
    second = source
    if strict:
        checked = _validate_all(source, defaults, summary, stop, skip_lines)
        if summary.interrupted:  # nothing written: a rerun starts where this one did
            summary.written = False
            summary.last_line = skip_lines
            return summary
        if summary.count():
            summary.written = False
            if checked != source and checked is not None:
                os.unlink(checked)
            return summary
        assert checked is not None
        second = checked
        summary.lines = 0
    try:
        if second == source:
            lines = _read_lines(source, skip_lines)
        else:  # the spool holds the lines after the skipped ones: number them as the input
            lines = ((number + skip_lines, text) for number, text in _read_lines(second))
        _write_all(backend_factory, lines, defaults, summary, batch_size=batch_size,
                   quiet=quiet, skip_lines=skip_lines, on_batch=on_batch, stop=stop)
    finally:
        if second != source:
            os.unlink(second)
    return summary


def _write_all(backend_factory: Any, lines: Iterator[tuple[int, bytes | None]],
               defaults: dict[str, Any],
               summary: BulkSummary, *, batch_size: int, quiet: bool, skip_lines: int,
               on_batch: Callable[[list[dict[str, Any]]], None] | None,
               stop: Callable[[], bool]) -> None:
    from runnerq_cli.cli.progress import BulkProgress
    from runnerq_cli.errors import DuplicateActivity, IdempotencyConflict, RunnerQError

    backend: Any = None
    progress: BulkProgress | None = None
    batch: list[tuple[int, ActivitySpec]] = []
    written = 0

    def flush() -> None:
        nonlocal backend, progress, written
        if not batch:
            return
        if backend is None:
            backend = backend_factory()
            progress = BulkProgress("enqueueing", None, quiet=quiet, unit="lines")
        try:
            results = backend.enqueue_many([spec for _, spec in batch])
        except RunnerQError as exc:
            summary.aborted = (f"stopped at line {batch[0][0]}: {exc}; lines from there "
                               "on may not be written")
            raise _Aborted(exc) from None
        done: list[dict[str, Any]] = []
        for (number, _), result in zip(batch, results, strict=True):
            if isinstance(result, DuplicateActivity | IdempotencyConflict):
                summary.reject(number, "duplicate", str(result))
            elif isinstance(result, Exception):
                summary.reject(number, "invalid", str(result))
            else:
                activity = {"line": number, "id": str(result.activity_id),
                            "created": result.created, "status": result.status}
                summary.add(activity)
                done.append(activity)
        if on_batch is not None:
            on_batch(done)
        written += len(batch)
        batch.clear()
        assert progress is not None
        progress.update(written)

    try:
        reached = skip_lines
        for number, text in lines:
            reached = number
            if text is None or text.strip():
                summary.lines += 1
                try:
                    batch.append((number, _parse(text, defaults)))
                except InvalidArgument as exc:
                    summary.reject(number, "invalid", str(exc))
                if len(batch) >= batch_size:
                    flush()
            if stop():
                flush()
                summary.last_line = number
                summary.interrupted = True
                break
            summary.last_line = number if not batch else summary.last_line
        else:
            flush()
            summary.last_line = reached
    except _Aborted as aborted:
        summary.rejected.sort(key=lambda r: r["line"])
        aborted.summary = summary
        raise
    finally:
        if progress is not None:
            progress.close()
    summary.rejected.sort(key=lambda r: r["line"])


class _Aborted(Exception):
    """The server went away mid-way: the partial summary travels with the error."""

    def __init__(self, cause: Exception) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.summary: BulkSummary | None = None


def _report_bulk(summary: BulkSummary, output: OutputFormat, quiet: bool,
                 stream: JsonObjectStream | None) -> None:
    """The end of the report: -q's rejected lines on stderr, the JSON summary (its
    activities already streamed), or the text; -o jsonl streamed every line already."""
    from runnerq_cli.literal import literal

    if quiet:  # the ids were printed as each batch was written
        # Only the ids on stdout, but which lines were rejected still goes to stderr.
        for rejected in summary.rejected:
            typer.echo(literal(f"line {rejected['line']}: {rejected['kind']}: "
                               f"{rejected['reason']}", max_length=600), err=True)
        for line in summary.not_listed():
            typer.echo(line, err=True)
    elif output is OutputFormat.JSON:
        assert stream is not None  # made for every -o json run that is not -q
        stream.close(summary.to_json())
    elif output is OutputFormat.JSONL:
        return
    else:
        for line in summary.text():  # rejected lines quote the input back: escaped
            typer.echo(literal(line, max_length=600))


# ------------------------------------------------------------------ command


def enqueue(
    ctx: typer.Context,
    activity_type: str | None = typer.Argument(None, metavar="TYPE",
                                               help="Activity type (omit with --from)."),
    payload: str | None = typer.Option(
        None, "--payload", "-p", metavar="JSON|@FILE",
        help="Payload: a JSON object, @FILE, or @- to read standard input (never read "
             "otherwise). Default: {}."),
    priority: str | None = typer.Option(None, "--priority", metavar="PRIORITY",
                                        autocompletion=completer(PRIORITIES),
                                        help="low, normal, high, critical or 1-4 "
                                             "[default: normal]."),
    delay: str | None = typer.Option(None, "--delay", metavar="DURATION",
                                     help="Run after this long: 30s, 5m, 2h."),
    at: str | None = typer.Option(None, "--at", metavar="TIME",
                                  help="Run at this ISO-8601 time (UTC unless it has a zone)."),
    max_retries: int | None = typer.Option(None, "--max-retries", metavar="N",
                                           help="Total attempts allowed, 0 = unlimited "
                                                "[default: 3]."),
    timeout: str | None = typer.Option(None, "--timeout", metavar="DURATION",
                                       help="Handler timeout [default: 5m]."),
    retry_delay: str | None = typer.Option(None, "--retry-delay", metavar="DURATION",
                                           help="Base of the exponential back-off [default: 1s]."),
    metadata: list[str] = typer.Option([], "--metadata", "-m", metavar="KEY=VALUE",
                                       help="A string tag; repeatable."),
    idempotency_key: str | None = typer.Option(None, "--idempotency-key", metavar="KEY",
                                               help="Enqueue at most once per key and type."),
    on_duplicate: str | None = typer.Option(
        None, "--on-duplicate", metavar="BEHAVIOUR", autocompletion=completer(ON_DUPLICATE),
        help="When the key is held: allow-reuse, return-existing (default), "
             "allow-reuse-on-failure, no-reuse."),
    from_file: str | None = typer.Option(None, "--from", metavar="FILE",
                                         help="Enqueue many: NDJSON, one activity per line "
                                              "(- for stdin)."),
    strict: bool = typer.Option(False, "--strict",
                                help="With --from: write nothing if any line is invalid."),
    batch_size: int = typer.Option(DEFAULT_BATCH_SIZE, "--batch-size", min=1, max=10000,
                                   help="With --from: activities per write."),
    skip_lines: int = typer.Option(0, "--skip-lines", min=0, max=2**63 - 1, metavar="N",
                                   help="With --from: skip the first N lines (go on after "
                                        "an interrupted run: it prints N)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print only the activity id(s)."),
    wait: bool = typer.Option(False, "--wait", help="Block until the activity is terminal, "
                                                    "print its result, exit like `wait`."),
    wait_timeout: str | None = typer.Option(None, "--wait-timeout", metavar="DURATION",
                                            help="With --wait: give up after this long "
                                                 "(exit 13)."),
    output: OutputFormat = output_option(),
) -> None:
    """Enqueue one activity of TYPE, or many from an NDJSON file with --from.

    With --from the input is read line by line and written a batch at a time
    (memory stays bounded). Ctrl-C or SIGTERM finishes the batch in progress,
    prints the last line reached and exits 130: rerun with --skip-lines N.

    Exit codes: 0 enqueued (or an existing activity returned), 2 invalid input
    (with --from: any line rejected as invalid), 3 bad config, 5 idempotency
    key held (no-reuse / allow-reuse-on-failure), 6 server unreachable,
    130 interrupted (--from).
    """
    cli = state(ctx)
    if (wait or wait_timeout) and from_file is not None:
        raise InvalidArgument("--wait applies to one activity, not to --from")
    if wait_timeout is not None and not wait:
        raise InvalidArgument("--wait-timeout needs --wait")
    from runnerq_cli import values
    from runnerq_cli.backend.specs import spec_options
    from runnerq_cli.cli.flags import flag as flag_name

    wait_seconds = values.duration(wait_timeout, "--wait-timeout") if wait_timeout else None
    if from_file is not None:
        if activity_type is not None:
            raise InvalidArgument("give an activity TYPE or --from FILE, not both")
        for flag, value in (("--payload", payload), ("--idempotency-key", idempotency_key)):
            if value is not None:
                raise InvalidArgument(f"{flag} does not apply to --from (set it on each line)")
        defaults = spec_options(priority=priority, delay=delay, at=at, max_retries=max_retries,
                                timeout=timeout, retry_delay=retry_delay,
                                metadata=parse_metadata(metadata), on_duplicate=on_duplicate,
                                name=flag_name)
        cli.settings()  # config and queue name are checked before any line is written
        _enqueue_from(cli, from_file, defaults, strict=strict, batch_size=batch_size,
                      output=output, quiet=quiet, skip_lines=skip_lines)
        return

    if activity_type is None:
        raise InvalidArgument("missing activity TYPE (or --from FILE to enqueue many)")
    if strict:
        raise InvalidArgument("--strict applies only to --from")
    if skip_lines:
        raise InvalidArgument("--skip-lines applies only to --from")
    spec = _spec_of_flags(activity_type, payload, spec_options(
        priority=priority, delay=delay, at=at, max_retries=max_retries, timeout=timeout,
        retry_delay=retry_delay, metadata=parse_metadata(metadata),
        idempotency_key=idempotency_key, on_duplicate=on_duplicate, name=flag_name))
    cli.settings()  # config errors before connecting
    _enqueue_one(cli.backend(), spec, output=output, quiet=quiet, wait=wait,
                 wait_seconds=wait_seconds)


def _spec_of_flags(activity_type: str, payload: str | None, options: dict[str, Any]) -> Any:
    from runnerq_cli.backend.queue import ActivitySpec

    return ActivitySpec(activity_type, read_payload(payload), **options)


def _enqueue_one(backend: RunnerQ, spec: Any, *, output: OutputFormat, quiet: bool,
                 wait: bool, wait_seconds: float | None) -> None:
    """Enqueue one activity; with --wait, block until it is terminal and exit like `wait`."""
    result = backend.enqueue(spec)
    if not wait or output is OutputFormat.TEXT:  # with --wait, JSON is one document
        _print_one(backend, result, output, quiet)
    if wait:  # shared with `runnerq-mongo wait` (cli/waiting.py)
        from runnerq_cli.cli.waiting import report

        outcome = backend.wait(result.activity_id, wait_seconds)
        raise typer.Exit(report(outcome, output, extra={"created": result.created}))


def _enqueue_from(cli: Any, source: str, defaults: dict[str, Any], *, strict: bool,
                  batch_size: int, output: OutputFormat, quiet: bool,
                  skip_lines: int = 0) -> None:
    """`enqueue --from`: write the lines, report each rejected one, exit like the docs say."""
    from runnerq_cli.cli.interrupt import stop_on_signal
    from runnerq_cli.cli.output import error_line, fail

    def print_ids(activities: list[dict[str, Any]]) -> None:
        for activity in activities:
            typer.echo(activity["id"])

    def batch_out(activities: list[dict[str, Any]]) -> None:
        sys.stdout.flush()  # a reader sees each batch as soon as it is written

    # Machine output streams each activity as it is written (nothing kept per line):
    # -o jsonl one object per line, -o json the `activities` list of one object.
    stream = JsonObjectStream("activities") if output is OutputFormat.JSON and not quiet \
        else None
    streamed = {"on_activity": stream.add} if stream is not None else (
        {"on_activity": print_jsonl, "on_reject": print_jsonl}
        if output is OutputFormat.JSONL and not quiet else {})
    try:
        with stop_on_signal() as signalled:
            summary = enqueue_bulk(cli.backend, source, defaults, strict=strict,
                                   batch_size=batch_size, quiet=quiet, skip_lines=skip_lines,
                                   on_batch=print_ids if quiet else batch_out,
                                   should_stop=signalled.is_set, **streamed)
    except _Aborted as stop:
        if stop.summary is not None and not (stop.summary.enqueued or stop.summary.existing):
            raise stop.cause from None  # nothing written yet: the plain error (exit 6)
        if stop.summary is not None:
            _report_bulk(stop.summary, output, quiet, stream)
        cause = stop.cause
        fail(stop.summary.aborted if stop.summary and stop.summary.aborted else str(cause),
             getattr(cause, "exit_code", ExitCode.FAILURE))
    _report_bulk(summary, output, quiet, stream)
    if summary.interrupted:
        error_line(summary.interrupted_line(_lines_in(source))
                   + ("; nothing written (--strict)" if not summary.written else ""))
        raise typer.Exit(int(ExitCode.INTERRUPTED))
    code = summary.exit_code()
    if code:
        fail(f"{summary.count()} of {summary.lines} lines rejected"
             + ("; nothing written (--strict)" if not summary.written else ""), code)


def _lines_in(source: str) -> int | None:
    """How many lines a regular file holds (for "8,700 of 20,000 lines"); None for
    standard input or anything that is not a readable regular file."""
    if source == "-" or not os.path.isfile(source):
        return None
    count, last = 0, b"\n"
    try:
        with open(source, "rb") as handle:
            while chunk := handle.read(1 << 20):
                count += chunk.count(b"\n")
                last = chunk[-1:]
    except OSError:
        return None
    return count + (last != b"\n")


def register(app: typer.Typer) -> None:
    """Add `enqueue` to the root app."""
    app.command("enqueue", epilog=examples("enqueue"))(enqueue)
