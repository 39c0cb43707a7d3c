"""What a failed run's error line adds after the error: the hint that says what to do
(a server to start or point at, a primary to wait for, a batch size for a slow server, a
queue that may be the wrong one, a shell's quoting).

Apart from app.py because only a failed run says it: a run that succeeds (one enqueue)
need not compile it (benchmarks/bench_cli_startup.py part 2)."""

from __future__ import annotations

from runnerq_cli.errors import (
    MemberUnreachable,
    NoPrimary,
    NotFound,
    RunnerQError,
    TimedOut,
    Unavailable,
)

SERVER_HINT = ("start a local one with `runnerq-mongo dev-server`, or point --uri or "
               "RUNNERQ_MONGO_URI at your server")


NO_PRIMARY_HINT = ("try again in a few seconds, once the new primary is elected "
                   "(long-running commands wait for it)")
SHUTTING_DOWN_HINT = "try again once it is back (long-running commands wait for it)"
MEMBER_HINT = ("try again in a few seconds (long-running commands wait for it); if it "
               "lasts, the deployment's own network is at fault")


SLOW_SERVER_HINT = ("a slow server (the dev server) may need a smaller --batch-size for bulk "
                    "actions and imports, or a longer socket_timeout (RUNNERQ_SOCKET_TIMEOUT); "
                    "docs/operations.md, \"In batches\"")


def usage_hint(message: str, argv: list[str]) -> str:
    """A hint for the usage errors a shell makes out of unquoted input."""
    if "extra argument" in message and any(c in arg for arg in argv for c in "{}[]"):
        return (" (quote a JSON payload so the shell passes it as one word: "
                "-p '{\"key\": \"value\"}')")
    return ""


def error_hint(exc: RunnerQError) -> str:
    """The hint the error line of `exc` ends with ("" when there is none)."""
    hint = f": {SERVER_HINT}" if isinstance(exc, Unavailable) and not exc.reachable else ""
    if isinstance(exc, TimedOut):
        hint = f"; {SLOW_SERVER_HINT}"
    elif isinstance(exc, NoPrimary):
        hint = f"; {SHUTTING_DOWN_HINT if exc.shutting_down else NO_PRIMARY_HINT}"
    elif isinstance(exc, MemberUnreachable):
        hint = f"; {MEMBER_HINT}"
    elif isinstance(exc, NotFound) and " database " not in str(exc):
        from runnerq_cli.cli.state import missing_queue

        missing = missing_queue()  # no such activity: perhaps not that queue
        hint = f"; {missing}" if missing else ""
    return hint
