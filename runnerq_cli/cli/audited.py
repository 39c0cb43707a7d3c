"""What the `schedule` and `limit` commands that change a queue's settings share, so that
both take, check and record their operator the same way: the --reason and --actor
options (one wording), their check before the server is asked anything, and the command
line the audit trail records. The operator actions (cancel, retry, ...) word --reason
for their activities' events as well: theirs are in commands/actions.py."""

from __future__ import annotations

import typer

REASON_HELP = "Why (recorded in the audit trail)."
ACTOR_HELP = "Who (recorded) [default: the operating-system user]."

REASON_OPT = typer.Option(None, "--reason", metavar="TEXT", help=REASON_HELP)
ACTOR_OPT = typer.Option(None, "--actor", metavar="NAME", help=ACTOR_HELP)


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
