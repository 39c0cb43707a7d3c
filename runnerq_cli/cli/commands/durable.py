"""Durable activities' commands: `signal` (an operator's signal, audited) and `tree` (an
activity's whole tree with every member's state, steps and wait).

Thin: the checks and writes are the backend's (ops/signals.py), the reads a view
(views/trees.py); here are the arguments, the payload's text and the printing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

from runnerq_cli.cli.examples import examples
from runnerq_cli.cli.output import OutputFormat, output_option
from runnerq_cli.errors import InvalidArgument
from runnerq_cli.plural import counted

if TYPE_CHECKING:
    from runnerq_cli.backend.views.trees import Member, Tree

ID_HELP = "The activity's id, or its first 8 or more hex digits (as text views show it)."
# Read at most this much payload text: a signal's payload is at most 1 MiB as BSON, and
# its JSON text is never much longer than that (a little for escapes).
SIGNAL_TEXT_MAX = 2 * 1024 * 1024


def _utf8(text: str, what: str) -> str:
    """`text` from the command line, refused when its bytes were not UTF-8 (Python
    hands them over as lone surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArgument(f"{what}: not UTF-8 text (invalid byte at character "
                              f"{exc.start + 1})") from None
    return text


def read_signal_payload(text: str | None) -> Any:
    """--payload JSON (any JSON value), @FILE or @- (standard input); without it, null."""
    import sys

    from runnerq_cli import values

    if text is None:
        return None
    if not text.startswith("@"):
        return values.json_value(_utf8(text, "--payload"), "--payload")
    name = text[1:]
    what = "--payload from stdin" if name == "-" else f"--payload file {name}"
    if name == "-":
        data: Any = (getattr(sys.stdin, "buffer", None) or sys.stdin).read(
            SIGNAL_TEXT_MAX + 1)
    else:
        from runnerq_cli.inputs import Unreadable, open_input

        with open_input(name, "--payload") as handle:
            try:
                data = handle.read(SIGNAL_TEXT_MAX + 1)
            except OSError as exc:
                raise Unreadable("--payload", name, exc.strerror or str(exc)) from None
    if len(data) > SIGNAL_TEXT_MAX:
        raise InvalidArgument(f"{what}: more than {SIGNAL_TEXT_MAX:,} bytes; a signal's "
                              "payload is at most 1 MiB as BSON")
    return values.json_value(data, what)


def signal(
    ctx: typer.Context,
    activity_id: str = typer.Argument(..., metavar="ID", help=ID_HELP),
    name: str = typer.Argument(..., metavar="NAME",
                               help="The signal's name, as the handler waits for it "
                                    "(1 to 200 characters)."),
    payload: str | None = typer.Option(
        None, "--payload", "-p", metavar="JSON",
        help="The signal's value: JSON (any value), @FILE or @- (stdin); at most 1 MiB "
             "[default: null]."),
    reason: str | None = typer.Option(None, "--reason", metavar="TEXT",
                                      help="Why: recorded with the actor in the audit."),
    actor: str | None = typer.Option(None, "--actor", metavar="NAME",
                                     help="Who acts (recorded) [default: the "
                                          "operating-system user]."),
    output: OutputFormat = output_option(),
) -> None:
    """Send a signal to a running or waiting durable activity (a waiting one wakes)."""
    from runnerq_cli.backend.domain.checkpoints import checked_name
    from runnerq_cli.backend.domain.operator_text import check_text
    from runnerq_cli.cli.commands.actions import command_line, existing_backend
    from runnerq_cli.cli.ids import activity_id as resolve_id
    from runnerq_cli.cli.output import emit
    from runnerq_cli.literal import literal

    checked_name(_utf8(name, "NAME"), "NAME")  # before the server: bad input at once
    check_text(reason, "--reason")
    check_text(actor, "--actor")
    value = read_signal_payload(payload)
    backend = existing_backend(ctx)
    aid = resolve_id(backend, activity_id)
    sent = backend.signals.send(aid, name, value, reason=reason, actor=actor,
                                command=command_line(ctx))
    if output is not OutputFormat.TEXT:
        emit(output, sent.to_json())
        return
    what = "woke it" if sent.woke else (
        "it reads the signal at its next wait" if sent.status == "processing"
        else f"it is {sent.status}: its next run reads it")
    typer.echo(f"signalled {sent.activity_id} ({literal(sent.activity_type)}) "
               f"{literal(name)}: {what}")


def tree(
    ctx: typer.Context,
    activity_id: str = typer.Argument(..., metavar="ID",
                                      help=ID_HELP + " Any member: its root's tree is shown."),
    output: OutputFormat = output_option(),
) -> None:
    """An activity's whole tree: every member's state, steps and what it waits for."""
    from runnerq_cli.cli.ids import activity_id as resolve_id
    from runnerq_cli.cli.output import emit
    from runnerq_cli.cli.state import state

    backend = state(ctx).backend()
    found = backend.trees.tree(resolve_id(backend, activity_id))
    if output is OutputFormat.JSONL:
        emit(output, [m.to_json() for m in found.members])
    elif output is OutputFormat.JSON:
        emit(output, found.to_json())
    else:
        _print_tree(found)


def member_lines(member: Member, prefix: str, asked: bool) -> list[tuple[str, str]]:
    """One member as (indentation, text) lines: its own line (id, state, type; `*` marks
    the one asked for), then its wait, its error and its steps, indented by its depth."""
    from runnerq_cli.cli.timefmt import stamp
    from runnerq_cli.literal import literal

    pad = "  " * member.depth
    inner = pad + "    "
    mark = "*" if asked else " "
    lines = [(pad, f"{mark}{prefix}  {member.status}  "
                   f"{literal(str(member.doc.get('activity_type')))}")]
    if member.wait is not None:  # its names and worker are another program's text
        lines.append((inner, literal(member.wait.describe(stamp))))
    error = member.doc.get("last_error")
    if member.status in ("failed", "dead_letter") and error:
        lines.append((inner, f"error: {literal(str(error))}"))
    for step in member.steps:
        state = "ok" if step.state == "Ok" else "err"
        lines.append((inner, f"{step.kind} {literal(step.name)}: {state} "
                             f"{stamp(step.created_at)}"))
    return lines


def _print_tree(found: Tree) -> None:
    """The tree as text: each line wrapped between words to the screen's width, its
    continuation indented under it (a time or an id never split)."""
    from runnerq_cli.cli.tables import unique_prefixes
    from runnerq_cli.cli.words import echo_fitted

    prefixes = unique_prefixes([m.id for m in found.members])
    for member in found.members:
        for pad, text in member_lines(member, prefixes[str(member.id)],
                                      member.id == found.asked):
            echo_fitted(text, first=pad, indent=pad + "      ")
    count = len(found.members)
    tail = f" (the first {count:,}: the tree is larger)" if found.truncated else ""
    echo_fitted(f"{counted(count, 'activity', number=f'{count:,}')} in the tree of "
                f"{found.root_id}{tail}")


COMMANDS = (("signal", signal), ("tree", tree))


def register(app: typer.Typer) -> None:
    """Add `signal` and `tree` to the root app."""
    for name, function in COMMANDS:
        app.command(name, epilog=examples(name))(function)
