"""`enqueue --from FILE`: many activities from NDJSON, a batch at a time.

The loop is the backend's (backend/queue/intake.py: it reads, validates and writes the
lines, refusing a bad line alone); this module reads the input (cli/lines.py: a signal
is heard on a silent pipe), prints each batch and the report, and maps it to an exit
code. A signal stops it after the batch in progress (exit 130, rerun with
`--skip-lines`); so does a second one: a batch cut half-way would leave lines written
past the one the report names, and the rerun would write them twice (cli/interrupt.py).

Apart from the enqueue command (cli/commands/enqueue.py) so that enqueueing one
activity, the common call in a CI script, does not compile the report's code
(benchmarks/bench_cli_startup.py part 2).
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

import typer

from runnerq_cli.cli.exits import ExitCode, exit_code_of
from runnerq_cli.cli.interrupt import stop_on_signal
from runnerq_cli.cli.json_stream import JsonObjectStream
from runnerq_cli.cli.lines import read_lines
from runnerq_cli.cli.output import OutputFormat, error_line, fail, print_jsonl
from runnerq_cli.cli.progress import BulkProgress
from runnerq_cli.literal import literal
from runnerq_cli.plural import counted

if TYPE_CHECKING:
    from runnerq_cli.backend.queue.intake import EnqueueReport
    from runnerq_cli.cli.state import CliState


def _report_json(report: EnqueueReport) -> dict[str, Any]:
    """Every field of the `-o json` summary but `activities` (streamed before them)."""
    aborted = None if report.aborted is None else _aborted_text(report)
    return {"lines": report.lines, "enqueued": report.enqueued, "existing": report.existing,
            "duplicates_rejected": report.count("duplicate"),
            "invalid": report.count("invalid"), "written": report.written,
            "aborted": aborted, "interrupted": report.interrupted,
            "skipped_lines": report.skipped_lines, "last_line": report.last_line,
            "rejected": report.rejected, "rejected_not_listed": report.rejected_not_listed}


def _report_text(report: EnqueueReport) -> list[str]:
    read = counted(report.lines, "line", number=f"{report.lines:,}")
    parts = [f"enqueued {report.enqueued:,} of the {read} read before the interruption"
             if report.interrupted
             else f"enqueued {report.enqueued} of {counted(report.lines, 'line')}"]
    if report.existing:
        parts.append(f"{report.existing} existing returned (idempotency key held)")
    if report.count("duplicate"):
        parts.append(f"{report.count('duplicate')} rejected as duplicates")
    if report.count("invalid"):
        parts.append(f"{report.count('invalid')} invalid")
    if not report.written:
        parts.append("nothing written (--strict)")
    if report.skipped_lines and report.last_line <= report.skipped_lines:
        parts.append(f"--skip-lines {report.skipped_lines} is past the last line, "
                     f"{report.last_line}")
    lines = ["; ".join(parts)]
    lines += [f"line {r['line']}: {r['kind']}: {r['reason']}" for r in report.rejected]
    return lines + _not_listed(report)


def _not_listed(report: EnqueueReport) -> list[str]:
    """The line saying how many rejected lines the report leaves out, if any."""
    if not report.rejected_not_listed:
        return []
    return [f"... and {counted(report.rejected_not_listed, 'more rejected line')}, not listed "
            "(-o jsonl lists every one)"]


def _interrupted_text(report: EnqueueReport, total_lines: int | None = None) -> str:
    """How far an interrupted run got: "8,700 of 20,000 lines" when the input's size
    is known (a file), else the lines read; then how to go on."""
    read = report.last_line - report.skipped_lines
    of = f" of {total_lines - report.skipped_lines:,}" if total_lines else ""
    where = f" after the {report.skipped_lines:,} skipped" if report.skipped_lines else ""
    done = counted(total_lines - report.skipped_lines if total_lines else read, "line",
                   number=f"{read:,}{of}")
    return (f"interrupted: {done} done{where}, {report.enqueued:,} enqueued; "
            f"last line reached {report.last_line}; run again with --skip-lines "
            f"{report.last_line} to go on")


def _aborted_text(report: EnqueueReport) -> str:
    return (f"stopped at line {report.last_line + 1}: {report.aborted}; lines from there on "
            "may not be written")


def _exit_code(report: EnqueueReport) -> ExitCode:
    if report.interrupted:
        return ExitCode.INTERRUPTED
    if report.count("invalid"):
        return ExitCode.USAGE
    if report.count("duplicate"):
        return ExitCode.CONFLICT
    return ExitCode.OK


def _report_bulk(report: EnqueueReport, output: OutputFormat, quiet: bool,
                 stream: JsonObjectStream | None) -> None:
    """The end of the report: -q's rejected lines on stderr, the JSON summary (its
    activities already streamed), or the text; -o jsonl streamed every line already."""
    if quiet:  # the ids were printed as each batch was written
        # Only the ids on stdout, but which lines were rejected still goes to stderr.
        for rejected in report.rejected:
            typer.echo(literal(f"line {rejected['line']}: {rejected['kind']}: "
                               f"{rejected['reason']}", max_length=600), err=True)
        for line in _not_listed(report):
            typer.echo(line, err=True)
    elif output is OutputFormat.JSON:
        assert stream is not None  # made for every -o json run that is not -q
        stream.close(_report_json(report))
    elif output is OutputFormat.JSONL:
        return
    else:
        for line in _report_text(report):  # rejected lines quote the input back: escaped
            typer.echo(literal(line, max_length=600))




def enqueue_from(cli: CliState, source: str, defaults: dict[str, Any], *, strict: bool,
                  batch_size: int, output: OutputFormat, quiet: bool,
                  skip_lines: int = 0) -> None:
    """`enqueue --from`: the backend writes the lines; this prints each batch as it is
    written and the report, and exits like the docs say."""
    cli.settings()  # config and queue name are checked before any line is written
    # Machine output streams each activity as it is written (nothing kept per line):
    # -o jsonl one object per line, -o json the `activities` list of one object.
    stream = JsonObjectStream("activities") if output is OutputFormat.JSON and not quiet \
        else None
    streamed = {"on_activity": stream.add} if stream is not None else (
        {"on_activity": print_jsonl, "on_reject": print_jsonl}
        if output is OutputFormat.JSONL and not quiet else {})

    def batch_done(report: EnqueueReport, activities: list[dict[str, Any]]) -> None:
        if quiet:
            for activity in activities:
                typer.echo(activity["id"])
        sys.stdout.flush()  # a reader sees each batch as soon as it is written
        progress.update(report.lines)

    backend = cli.backend()
    # at_once=False: a second signal too lets the batch being written finish.
    with stop_on_signal(at_once=False) as signalled:
        lines = read_lines(source, "--from", should_stop=signalled.is_set)
        # A file's size gives the share done (its bytes read); --strict reads the whole
        # file before writing, so its share would say nothing of the writes.
        share = None if strict else lines.fraction
        progress = BulkProgress("enqueueing", None, quiet=quiet, unit="lines", share=share)
        try:
            report = backend.intake.enqueue_lines(
                lines, defaults, batch_size=batch_size, skip_lines=skip_lines, strict=strict,
                should_stop=signalled.is_set, on_batch=batch_done, **streamed)
        finally:
            progress.close()
        _finish_bulk(report, output, quiet, stream, _lines_in(source))


def _finish_bulk(report: EnqueueReport, output: OutputFormat, quiet: bool,
                 stream: JsonObjectStream | None, total_lines: int | None) -> None:
    """Print the report and exit with the code it calls for (docs/cli.md)."""
    if report.aborted is not None and not (report.enqueued or report.existing):
        raise report.aborted  # nothing written yet: the plain error (exit 6)
    _report_bulk(report, output, quiet, stream)
    if report.aborted is not None:
        fail(_aborted_text(report), exit_code_of(report.aborted))
    if report.interrupted:
        error_line(_interrupted_text(report, total_lines)
                   + ("; nothing written (--strict)" if not report.written else ""))
        raise typer.Exit(int(ExitCode.INTERRUPTED))
    code = _exit_code(report)
    if code:
        fail(f"{report.count()} of {counted(report.lines, 'line')} rejected"
             + ("; nothing written (--strict)" if not report.written else ""), code)


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
