"""Asking before a change to many activities or indexes: --yes, or a 'y' on a terminal.

Apart from output.py because only the bulk actions (cancel, retry, redrive, purge...)
and `init-indexes --drop-obsolete` ask: every other command, an `enqueue` first, need not
compile it (benchmarks/bench_cli_startup.py part 2)."""

from __future__ import annotations

import sys

import typer

from runnerq_cli.cli.output import fail


def confirm(question: str, yes: bool, preview: list[str] | None = None) -> None:
    """Go on with --yes, or after a 'y' on a terminal; refuse (exit 2) otherwise.

    On a terminal, `preview` (what will be acted on) is shown before the question,
    on stdout with it (stderr is for errors). Declining is exit 2, as without --yes.
    """
    if yes:
        return
    if not sys.stdin.isatty():
        fail(f"{question.rstrip('?')}: refusing without --yes when not on a terminal "
             "(use --dry-run to see what would change)")
    from runnerq_cli.cli.words import echo_fitted
    from runnerq_cli.literal import literal

    for line in preview or []:  # each fitted to the screen, its indent kept
        text = literal(line)
        lead = text[:len(text) - len(text.lstrip(" "))]
        echo_fitted(text.lstrip(" "), lead, lead + "    ")
    if not typer.confirm(literal(question), default=False):
        fail("not confirmed: nothing changed")
