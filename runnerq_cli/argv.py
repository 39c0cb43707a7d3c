"""Which subcommand a command line runs, read before any CLI library is imported.

The entry point uses it twice: a worker records SIGTERM/SIGINT from its first
instant (worker/startup.py), and the CLI loads only the module of the command
it runs (cli/app.py). Anything unsure (no word, `--` first) answers None, and
the caller then does the general thing.
"""

from __future__ import annotations

from collections.abc import Sequence

# The root command's options that take a value (cli/app.py; tests/test_worker_startup.py
# checks this list against the real root command).
ROOT_OPTIONS_WITH_VALUE = frozenset({"--config", "-c", "--uri", "--database", "--db",
                                     "--queue"})


def command_word(argv: Sequence[str]) -> str | None:
    """The subcommand `argv` (without the program name) runs: its first word that is
    neither a root option nor a root option's value."""
    expect_value = False
    for word in argv:
        if expect_value:
            expect_value = False
        elif word == "--":
            return None
        elif word.startswith("-"):
            expect_value = word in ROOT_OPTIONS_WITH_VALUE
        else:
            return word
    return None
