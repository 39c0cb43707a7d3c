"""`runnerq-mongo dlq export` and `dlq import`: move a dead-letter set out, and replay it.

The line format is `enqueue --from`'s (backend/dlq.py), so an exported file
can be inspected, edited and enqueued anywhere.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

import typer

from runnerq_cli.cli.examples import examples
from runnerq_cli.cli.output import OutputFormat, emit, error_line, output_option
from runnerq_cli.cli.state import state
from runnerq_cli.errors import ExitCode, InvalidArgument

if TYPE_CHECKING:
    from runnerq_cli.backend.dlq import ImportLine, ImportOutcome

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

    from runnerq_cli import values

    when = values.time(since, "--since") if since else None
    backend = state(ctx).backend()
    tmp = None if out_file == "-" else f"{out_file}.tmp"
    count = 0
    try:
        handle = sys.stdout if tmp is None else open(tmp, "w", encoding="utf-8")  # noqa: SIM115
    except OSError as exc:
        raise InvalidArgument(f"--output: cannot write {out_file}: "
                              f"{exc.strerror or exc}") from None
    try:
        for line in backend.dlq_export(types, when, max_count):
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
    sys.stderr.write(f"exported {count} dead-lettered activities"
                     + (f" to {out_file}\n" if tmp is not None else "\n"))


def _parse_lines(path: str) -> list[ImportLine]:
    """Each non-blank line: its spec and original id, or why it is invalid."""
    from runnerq_cli.backend.dlq import ImportLine
    from runnerq_cli.backend.models import parse_activity_id
    from runnerq_cli.backend.specs import spec_from_line

    try:
        if path == "-":
            texts = sys.stdin.read().splitlines()
        else:
            with open(path, encoding="utf-8") as handle:
                texts = handle.read().splitlines()
    except OSError as exc:
        raise InvalidArgument(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise InvalidArgument(f"{path} is not UTF-8 text") from None
    items: list[ImportLine] = []
    for number, text in enumerate(texts, start=1):
        if not text.strip():
            continue
        original = None
        try:
            data = json.loads(text)
            if isinstance(data, dict) and data.get("original_id") is not None:
                original = parse_activity_id(str(data["original_id"]))
            items.append(ImportLine(number, original, spec_from_line(text, {})))
        except (InvalidArgument, json.JSONDecodeError) as exc:
            reason = f"malformed JSON: {exc.msg}" if isinstance(exc, json.JSONDecodeError) \
                else str(exc)
            items.append(ImportLine(number, original, error=reason))
    return items


def _exit_code(outcomes: list[ImportOutcome]) -> int:
    kinds = {o.outcome for o in outcomes}
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
    output: OutputFormat = output_option(),
) -> None:
    """Enqueue each exported line as a new activity (linked by metadata redriven_from to the
    original id, which is also its idempotency key: importing twice enqueues nothing twice).

    Exit codes: 0 every line done (or already done), 2 a line was invalid (the
    others were still imported), 4 --redrive: an original is not in this queue,
    5 an idempotency conflict.
    """
    from runnerq_cli.backend.audit import check_text

    check_text(reason, "--reason")
    check_text(actor, "--actor")
    items = _parse_lines(path)
    backend = state(ctx).backend()
    outcomes = backend.dlq_import(items, redrive=redrive, dry_run=dry_run, reason=reason,
                                  actor=actor)
    _print(outcomes, output, dry_run)
    code = _exit_code(outcomes)
    if code:
        bad = sum(1 for o in outcomes if o.outcome in ("invalid", "conflict", "not_found"))
        error_line(f"{bad} of {len(outcomes)} lines not imported")
    raise typer.Exit(code)


def _print(outcomes: list[ImportOutcome], output: OutputFormat, dry_run: bool) -> None:
    counts: dict[str, int] = {}
    for outcome in outcomes:
        counts[outcome.outcome] = counts.get(outcome.outcome, 0) + 1
    rows: list[dict[str, Any]] = [o.to_json() for o in outcomes]
    if output is OutputFormat.JSONL:
        emit(output, rows)
        return
    if output is OutputFormat.JSON:
        emit(output, {"lines": len(outcomes), "dry_run": dry_run, "counts": counts,
                      "results": rows})
        return
    for o in outcomes:
        text = f"line {o.line}: {o.outcome.replace('_', ' ')}"
        if o.id is not None:
            text += f" {o.id}"
        if o.original_id is not None and o.original_id != o.id:
            text += f" (from {o.original_id})"
        if o.reason:
            text += f": {o.reason}"
        typer.echo(text)
    summary = ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in sorted(counts.items()))
    typer.echo(f"{len(outcomes)} lines: {summary or 'nothing to import'}"
               + (" (dry run: nothing written)" if dry_run else ""))


def register(app: typer.Typer) -> None:
    """Add `dlq` (export, import) to the root app."""
    app.add_typer(dlq_app, name="dlq")
