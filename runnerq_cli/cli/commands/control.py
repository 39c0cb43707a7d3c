"""`runnerq-mongo pause` and `resume`: stop and restart claiming, for the whole queue or types.

Stored in the database (backend/ops/control.py): every worker on every host
stops claiming within one poll interval, finishes what it holds, and the
pause outlives restarts. `enqueue` keeps working.
"""

from __future__ import annotations

from typing import Any

import typer

from runnerq_cli.cli.examples import examples
from runnerq_cli.cli.output import OutputFormat, emit, output_option
from runnerq_cli.plural import counted

TYPES_HELP = "Only this activity type (repeatable) [default: the whole queue]."


def _change(ctx: typer.Context, verb: str, types: list[str] | None, reason: str | None,
            actor: str | None, output: OutputFormat, create: bool = False) -> None:
    from runnerq_cli.backend.domain.operator_text import check_text
    from runnerq_cli.cli.commands.actions import command_line, existing_backend

    check_text(reason, "--reason")
    check_text(actor, "--actor")
    # A misspelt queue is refused (exit 4), not created; pausing a new queue needs --create.
    backend = existing_backend(ctx, create=create,
                                create_flag="--create" if verb == "pause" else None)
    before = backend.control.paused()
    method = backend.control.pause if verb == "pause" else backend.control.resume
    paused = method(types or None, reason=reason, actor=actor, command=command_line(ctx))
    if output is not OutputFormat.TEXT:
        emit(output, change_report(verb, before, paused, types or []))
        return
    from runnerq_cli.cli.words import describe_pause, screen_width, wrap

    if verb == "resume":
        typer.echo(resumed_sentence(backend.queue, before, paused, types or []))
    for line in wrap("", f"queue {backend.queue}: {describe_pause(paused)}", "  ",
                     screen_width()):
        typer.echo(line)


def change_report(verb: str, before: Any, after: Any, types: list[str]) -> dict[str, Any]:
    """`pause`/`resume -o json`: what this command changed, by name, then the state it
    left (`pause`: the shape of `stats -o json`'s `pause`). docs/operations.md, "Pause and
    resume". A bare `types` here once held what was still paused after a `resume`, which a
    script read as the types resumed."""
    asked = list(dict.fromkeys(types))
    report: dict[str, Any] = {"action": verb, "whole_queue": not asked}
    if verb == "pause":
        report["paused"] = [t for t in asked if t not in before.types]
        report["already_paused"] = [t for t in asked if t in before.types]
    else:
        report["changed"] = before.active and (not asked or any(t in before.types
                                                                for t in asked))
        report["resumed"] = [t for t in before.types if t not in after.types]
        report["not_paused"] = [t for t in asked if t not in before.types]
        report["still_paused"] = list(after.types)
    report["pause"] = after.to_json()
    return report


def resumed_sentence(queue: str, before: Any, after: Any, types: list[str]) -> str:
    """What `resume` did, in words: "resumed charge", "charge was not paused"."""
    from runnerq_cli.literal import literal

    if not types:
        return (f"resumed queue {literal(queue)}" if before.active
                else f"queue {literal(queue)} was not paused: nothing changed")
    done = [t for t in types if t in before.types and t not in after.types]
    not_paused = [t for t in types if t not in before.types]
    parts = []
    if done:
        parts.append("resumed " + ", ".join(literal(t) for t in done))
    if not_paused:
        were = counted(len(not_paused), "was", number=", ".join(literal(t) for t in not_paused))
        parts.append(f"{were} not paused")
    return "; ".join(parts) + ("" if done else ": nothing changed")


def pause(
    ctx: typer.Context,
    types: list[str] | None = typer.Option(None, "--type", "-t", metavar="TYPE",
                                           help=TYPES_HELP),
    reason: str | None = typer.Option(None, "--reason", metavar="TEXT",
                                      help="Why (recorded, shown by stats and audit)."),
    actor: str | None = typer.Option(None, "--actor", metavar="NAME",
                                     help="Who (recorded) [default: the operating-system "
                                          "user]."),
    create: bool = typer.Option(False, "--create",
                                help="Pause a queue that does not exist yet (no activities "
                                     "collection); without it, that is refused (exit 4)."),
    output: OutputFormat = output_option(),
) -> None:
    """Stop workers claiming from the queue (or these types); running work finishes."""
    _change(ctx, "pause", types, reason, actor, output, create)


def resume(
    ctx: typer.Context,
    types: list[str] | None = typer.Option(None, "--type", "-t", metavar="TYPE",
                                           help="Only this paused type (repeatable) "
                                                "[default: everything]."),
    reason: str | None = typer.Option(None, "--reason", metavar="TEXT", help="Why (recorded)."),
    actor: str | None = typer.Option(None, "--actor", metavar="NAME",
                                     help="Who (recorded) [default: the operating-system "
                                          "user]."),
    output: OutputFormat = output_option(),
) -> None:
    """Let workers claim again (everything, or these paused types). With nothing to resume,
    nothing is written (no audit record).

    Exit codes: 0 resumed, or nothing to resume (a known type that was not paused);
    4 a --type the queue has never seen (no activity, worker or pause of it), or a
    queue that does not exist: nothing written.
    """
    _change(ctx, "resume", types, reason, actor, output)


def register(app: typer.Typer) -> None:
    """Add `pause` and `resume` to the root app."""
    app.command("pause", epilog=examples("pause"))(pause)
    app.command("resume", epilog=examples("resume"))(resume)
