"""What the `schedule` and `limit` commands that change a queue's settings share, so that
both take, check and record their operator the same way: the --reason and --actor
options (one wording), their check before the server is asked anything, and the command
line the audit trail records, and the refusal of a queue that does not exist (a misspelt
--queue would otherwise be given settings no worker reads). The operator actions
(cancel, retry, ...) word --reason for their activities' events as well: theirs are in
commands/actions.py."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from runnerq_cli.backend.api import RunnerQ

REASON_HELP = "Why (recorded in the audit trail)."
ACTOR_HELP = "Who (recorded) [default: the operating-system user]."

REASON_OPT = typer.Option(None, "--reason", metavar="TEXT", help=REASON_HELP)
ACTOR_OPT = typer.Option(None, "--actor", metavar="NAME", help=ACTOR_HELP)
CREATE_OPT = typer.Option(False, "--create", help=(
    "Write to a queue that does not exist yet (no activities collection); without it, "
    "that is refused (exit 4)."))


def check_reason_actor(reason: str | None, actor: str | None) -> None:
    """Refuse a --reason or --actor that is not plain text (InvalidArgument, exit 2)
    before anything is read or written (backend/domain/operator_text.py)."""
    from runnerq_cli.backend.domain.operator_text import check_text

    check_text(reason, "--reason")
    check_text(actor, "--actor")


def audit_command(ctx: typer.Context) -> str:
    """The command line as the audit records it: re-runnable, the queue named, never the
    URI (commands/actions.py `command_line`, imported only when a change is made)."""
    from runnerq_cli.cli.commands.actions import command_line

    return command_line(ctx)


def existing_queue(ctx: typer.Context, create: bool | None) -> RunnerQ:
    """The backend, once its queue is known to exist: a misspelt --queue or RUNNERQ_QUEUE
    is refused (exit 4, the closest queue named) rather than given settings no worker
    reads, as every operator write refuses it (docs/operations.md, "The safety rails").
    `create` None: the command has no --create (a removal: a new queue has nothing to
    remove)."""
    from runnerq_cli.cli.commands.actions import existing_backend

    return existing_backend(ctx, create=bool(create),
                            create_flag=None if create is None else "--create")
