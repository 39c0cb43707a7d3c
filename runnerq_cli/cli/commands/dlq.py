"""`runnerq-mongo dlq export` and `dlq import`: move a dead-letter set out, and replay it.

The line format is `enqueue --from`'s (backend/ops/dlq.py), so an exported file
can be inspected, edited and enqueued anywhere.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

import typer

from runnerq_cli.cli.examples import examples
from runnerq_cli.cli.exits import ExitCode
from runnerq_cli.cli.json_stream import JsonObjectStream
from runnerq_cli.cli.output import (
    OutputFormat,
    emit,
    error_line,
    output_option,
)
from runnerq_cli.cli.state import state
from runnerq_cli.cli.words import echo_fitted
from runnerq_cli.errors import InvalidArgument
from runnerq_cli.plural import counted

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from runnerq_cli.backend.domain.import_lines import ImportLine
    from runnerq_cli.backend.ops.dlq import ImportOutcome, ImportReport

dlq_app = typer.Typer(help="Export and import dead-lettered activities.", no_args_is_help=True)


@dlq_app.command("export", epilog=examples("dlq export"))
def export(
    ctx: typer.Context,
    types: list[str] | None = typer.Option(None, "--type", "-t", metavar="TYPE",
                                           help="Only this activity type (repeatable)."),
    since: str | None = typer.Option(None, "--since", metavar="TIME",
                                     help="Only those dead-lettered at or after TIME "
                                          "(ISO-8601, or a duration ago like 1h)."),
    max_count: int | None = typer.Option(None, "--max", metavar="N", min=1,
                                         help="At most N activities."),
    out_file: str = typer.Option("-", "--output", "-o", metavar="FILE",
                                 help="Write to FILE (replaced only when complete) "
                                      "[default: stdout]."),
) -> None:
    """Write dead-lettered activities as NDJSON lines that `enqueue --from` reads. Changes
    nothing."""
    import contextlib
    import os

    from runnerq_cli import times

    when = times.optional_time(since, "--since")
    backend = state(ctx).backend()
    tmp = None if out_file == "-" else f"{out_file}.tmp"
    count = 0
    try:
        handle = sys.stdout if tmp is None else open(tmp, "w", encoding="utf-8")  # noqa: SIM115
    except OSError as exc:
        raise InvalidArgument(f"--output: cannot write {out_file}: "
                              f"{exc.strerror or exc}") from None
    try:
        for line in backend.dead_letters.dlq_export(types, when, max_count):
            handle.write(json.dumps(line, separators=(",", ":")) + "\n")
            count += 1
        handle.flush()
    except BaseException:
        if tmp is not None:  # an interrupted export leaves no half file behind
            handle.close()
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise
    if tmp is not None:
        handle.close()
        os.replace(tmp, out_file)
    sys.stderr.write(f"exported {counted(count, 'dead-lettered activity')}"
                     + (f" to {out_file}\n" if tmp is not None else "\n"))


def _parse_lines(path: str, should_stop: Callable[[], bool]) -> Iterator[ImportLine]:
    """Each non-blank line: its spec and original id, or why it is refused (lazily). The
    file is opened now: a missing one is refused before anything is written."""
    from runnerq_cli.cli.lines import read_lines

    lines = read_lines(path, "FILE", should_stop)

    def parsed() -> Iterator[ImportLine]:
        from runnerq_cli import values
        from runnerq_cli.backend.domain.import_lines import ImportLine, parse_import_line

        for number, raw in lines:
            if raw is None:
                yield ImportLine(number, error=f"line longer than {values.PAYLOAD_TEXT_MAX} "
                                               "bytes")
            elif raw.strip():
                yield parse_import_line(number, raw)

    return parsed()


def _exit_code(report: ImportReport) -> int:
    kinds = set(report.counts)
    if report.interrupted:
        return int(ExitCode.INTERRUPTED)
    if "invalid" in kinds:
        return int(ExitCode.USAGE)
    if "conflict" in kinds:
        return int(ExitCode.CONFLICT)
    if "not_found" in kinds:
        return int(ExitCode.NOT_FOUND)
    return int(ExitCode.OK)


@dlq_app.command("import", epilog=examples("dlq import"))
def import_(
    ctx: typer.Context,
    path: str = typer.Argument(..., metavar="FILE", help="An export (NDJSON; - for stdin)."),
    redrive: bool = typer.Option(False, "--redrive",
                                 help="Revive the original activities by id (where they are "
                                      "still dead-lettered in this queue) instead of "
                                      "enqueueing copies."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Show what each line would do; "
                                                          "write nothing."),
    reason: str | None = typer.Option(None, "--reason", metavar="TEXT",
                                      help="Why (recorded in the events and the audit)."),
    actor: str | None = typer.Option(None, "--actor", metavar="NAME",
                                     help="Who (recorded) [default: the operating-system "
                                          "user]."),
    create: bool = typer.Option(False, "--create",
                                help="Import into a queue that does not exist yet (no "
                                     "activities collection); without it, that is refused "
                                     "(exit 4)."),
    batch_size: int = typer.Option(500, "--batch-size", metavar="N", min=1, max=10000,
                                   help="Lines per batch, 1 to 10,000 (a few commands each; the "
                                        "audit record is updated after each)."),
    quiet: bool = typer.Option(False, "--quiet", "-q",
                               help="Print only the summary (and the refused lines on "
                                    "stderr); no progress bar."),
    output: OutputFormat = output_option(),
) -> None:
    """Enqueue each exported line as a new activity (linked by metadata redriven_from to the
    original id, which is also its idempotency key: importing twice enqueues nothing twice).

    Exit codes: 0 every line done (or already done), 2 a line was invalid (the
    others were still imported), 4 --redrive: an original is not in this queue,
    or the queue does not exist (without --create), 5 an idempotency conflict,
    130 interrupted (Ctrl-C, SIGTERM, one or more) after the batch in progress:
    what was done is printed and audited; the same command again goes on.
    """
    from runnerq_cli.backend.domain.operator_text import check_text
    from runnerq_cli.cli.commands.actions import command_line, existing_backend
    from runnerq_cli.cli.interrupt import stop_on_signal
    from runnerq_cli.cli.progress import BulkProgress

    check_text(reason, "--reason")
    check_text(actor, "--actor")
    # at_once=False: a second signal too lets the batch being written finish, so the
    # last line named is the last written (cli/interrupt.py).
    with stop_on_signal(at_once=False) as stop, \
            BulkProgress("importing", None, quiet=quiet, unit="lines") as bar:
        items = _parse_lines(path, stop.is_set)  # opens the file: a missing one is refused
        backend = existing_backend(ctx, create=create or dry_run, create_flag="--create")
        # -o json streams the results list as the lines are done (nothing kept per line).
        stream = JsonObjectStream("results") if output is OutputFormat.JSON else None
        show = _outcome_printer(output, quiet, stream)
        report = backend.dead_letters.dlq_import(
            _counting(items, bar), redrive=redrive, dry_run=dry_run, reason=reason,
            actor=actor, should_stop=stop.is_set, on_outcome=show,
            command=command_line(ctx), collect=False, batch_size=batch_size)
        bar.close()
        _summary(report, output, stream)
        code = _exit_code(report)
        _say_what_was_not_done(report, code)
    raise typer.Exit(code)


def _outcome_printer(output: OutputFormat, quiet: bool,
                     stream: JsonObjectStream | None) -> Callable[[ImportOutcome], None]:
    """How each line's outcome is shown as it is done."""
    def show(outcome: ImportOutcome) -> None:
        if stream is not None:
            stream.add(outcome.to_json())
        elif output is OutputFormat.JSONL:
            emit(output, [outcome.to_json()])
        elif output is OutputFormat.TEXT and not quiet:
            echo_fitted(_line_text(outcome))
        elif quiet and outcome.outcome in ("invalid", "conflict", "not_found"):
            echo_fitted(_line_text(outcome), err=True)

    return show


def _say_what_was_not_done(report: ImportReport, code: int) -> None:
    if report.interrupted:
        error_line(f"interrupted: dlq import stopped after line {report.last_line} "
                   f"({counted(report.lines, 'line')} done: {_counts_text(report.counts)}); the "
                   "audit record says so; the same command again goes on without "
                   "importing anything twice")
    elif code:
        bad = sum(n for k, n in report.counts.items()
                  if k in ("invalid", "conflict", "not_found"))
        error_line(f"{bad} of {counted(report.lines, 'line')} not imported")


def _counting(items: Iterator[ImportLine], bar: Any) -> Iterator[ImportLine]:
    """The lines, moving the progress bar (lines read; the total is not known ahead)."""
    for count, item in enumerate(items, start=1):
        if count % 100 == 0:
            bar.update(count)
        yield item


def _line_text(o: ImportOutcome) -> str:
    text = f"line {o.line}: {o.outcome.replace('_', ' ')}"
    if o.id is not None:
        text += f" {o.id}"
    if o.original_id is not None and o.original_id != o.id:
        text += f" (from {o.original_id})"
    if o.reason:
        text += f": {o.reason}"
    return text


def _counts_text(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in sorted(counts.items())) \
        or "nothing to import"


def _summary(report: ImportReport, output: OutputFormat,
             stream: JsonObjectStream | None) -> None:
    if output is OutputFormat.JSONL:
        return
    if stream is not None:  # -o json: the results were streamed; the counts close it
        stream.close({"lines": report.lines, "dry_run": report.dry_run,
                      "counts": report.counts, "interrupted": report.interrupted,
                      "last_line": report.last_line})
        return
    typer.echo(f"{counted(report.lines, 'line')}: "
               f"{_counts_text(report.counts)}"
               + (" (dry run: nothing written)" if report.dry_run else ""))


def register(app: typer.Typer) -> None:
    """Add `dlq` (export, import) to the root app."""
    app.add_typer(dlq_app, name="dlq")
