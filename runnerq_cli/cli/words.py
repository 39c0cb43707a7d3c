"""Values in words for people: yes/no, lists, times, pauses (never Python literals).

Text views print `paused: yes` and `types: send_email, resize`, not `True` or
`['send_email']`. Every piece of untrusted text goes through literal().
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from runnerq_cli.literal import literal


def words(value: Any) -> str:
    """`value` for people: yes/no, a comma-separated list, `k v` pairs, one time format."""
    from runnerq_cli.cli.timefmt import stamp

    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, datetime):
        return stamp(value)
    if isinstance(value, dict):
        return ", ".join(f"{literal(k)} {words(v)}" for k, v in value.items()) or "-"
    if isinstance(value, list | tuple | set | frozenset):
        return ", ".join(words(v) for v in value) or "-"
    return literal(value)


def describe_pause(pause: Any) -> str:
    """One line: what is paused, since when, by whom, why (each value escaped)."""
    from runnerq_cli.cli.timefmt import stamp

    text: str = pause.describe(
        shown=lambda value, limit: literal(value, max_length=limit), when=stamp)
    return text


def wrap(first: str, text: str, indent: str, width: int) -> list[str]:
    """`first` + `text` wrapped at word boundaries to `width`, later lines indented.

    A word longer than a line stays whole on a line of its own, and a time keeps
    its date and time together: a value is never split (an id, a type, a URL). A
    no-break space in `text` holds its two words together too (`--max N`).
    """
    import re
    import textwrap

    glued = re.sub(r"(\d{4}-\d\d-\d\d) (\d\d:\d\d)", "\\1\u00a0\\2", text)
    lines = textwrap.wrap(glued, width=max(width, 40), initial_indent=first,
                          subsequent_indent=indent, break_long_words=False,
                          break_on_hyphens=False) or [first.rstrip()]
    return [line.replace("\u00a0", " ") for line in lines]


def screen_width() -> int:
    """The width text is fitted to: the terminal's, else COLUMNS, else wide (console())."""
    from runnerq_cli.cli.screen import console

    return console(markup=False).width


def echo_fitted(text: str, first: str = "", indent: str = "    ", err: bool = False) -> None:
    """A line of text output wrapped between words to the screen (a full id, a type, a
    time never split, later lines indented): whole on a narrow terminal, one line piped
    (at COLUMNS, else 240 wide)."""
    import typer

    for line in wrap(first, text, indent, screen_width()):
        typer.echo(line, err=err)
