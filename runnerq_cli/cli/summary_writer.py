"""Writes cli/summaries.py, root --help's list of commands, from the live commands (it
imports every command module, which the list exists to spare root --help):

    python -m runnerq_cli.cli.summary_writer --write   # regenerate cli/summaries.py
    python -m runnerq_cli.cli.summary_writer --check   # exit 1 if stale
"""

from __future__ import annotations

import sys
from pathlib import Path

SUMMARIES_FILE = Path(__file__).with_name("summaries.py")


def live() -> tuple[tuple[str, bool, str], ...]:
    """The rows as the registered commands give them (imports every command module)."""
    from runnerq_cli.cli.app import _root_command, build_app

    group = _root_command(build_app())
    rows = []
    for name in group.list_commands(None):
        text, hidden = group._summaries[name]
        first = text.split("\n\n", 1)[0]  # the short help reads the first paragraph only
        rows.append((name, hidden, " ".join(first.split())))
    return tuple(rows)


def _wrapped(text: str, width: int = 80) -> str:
    """`text` as adjacent string literals of at most `width` characters, one a line."""
    pieces, line = [], ""
    for word in text.split(" "):
        if line and len(line) + 1 + len(word) > width:
            pieces.append(line + " ")
            line = word
        else:
            line = f"{line} {word}" if line else word
    pieces.append(line)
    return "\n".join(f"     {piece!r}" for piece in pieces)


def _source(rows: tuple[tuple[str, bool, str], ...]) -> str:
    text = SUMMARIES_FILE.read_text(encoding="utf-8")
    head, rest = text.split("    # generated: begin\n", 1)
    _, tail = rest.split("    # generated: end\n", 1)
    body = "".join(f"    ({name!r}, {hidden!r},\n{_wrapped(help_text)}),\n"
                   for name, hidden, help_text in rows)
    return f"{head}    # generated: begin\n{body}    # generated: end\n{tail}"


def main(argv: list[str] | None = None) -> int:
    """`--write` regenerates summaries.py; `--check` exits 1 when it is stale."""
    args = sys.argv[1:] if argv is None else argv
    wanted = _source(live())
    if args == ["--write"]:
        SUMMARIES_FILE.write_text(wanted, encoding="utf-8")
        return 0
    if args == ["--check"]:
        if SUMMARIES_FILE.read_text(encoding="utf-8") == wanted:
            return 0
        print("runnerq_cli/cli/summaries.py is stale: python -m "
              "runnerq_cli.cli.summary_writer --write", file=sys.stderr)
        return 1
    print("usage: python -m runnerq_cli.cli.summary_writer --write|--check", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
