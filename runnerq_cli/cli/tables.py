"""Text tables that fit the screen without breaking a value (docs/cli.md, "Output conventions").

Rich tables fold a cell over several lines when the screen is narrow (`send_`
over `email`, a date over five lines). These tables never do: every value stays
on its row, whole. When the row is too wide, a column with nothing in it goes
first, then the columns that matter least (each column says whether it may go),
until the others fit beside the one free-text column at FLEX_MIN cells; that
column then takes the room left on the line. A free text (a last error) is cut
where the room ends and ends in `…`, so its start, the part that says what
happened, is kept (`POST https://payments.example.com/v2/char…`, not `POST…`); a
list of names (a worker's types) is cut after its last whole name. Activity ids
are shown as their shortest unique prefix (at least SHORT_ID characters), as git
and docker do; every command that takes an id accepts such a prefix back.

Every cell goes through literal(): values from the database are text, never
markup or control sequences.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

SHORT_ID = 8  # hex digits of an id shown in text views (its first group)
GAP = "  "
ELLIPSIS = "…"
CELL_MAX = 120  # characters of one value: a 5,000-character type never floods a screen
FLEX_MIN = 20  # cells a free-text column needs to say something: other columns go first


def short_id(value: Any) -> str:
    """The first SHORT_ID hex digits of an activity id (any other value: its text)."""
    text = str(value)
    return text[:SHORT_ID] if isinstance(value, uuid.UUID) else text


def unique_prefixes(ids: Sequence[Any]) -> dict[str, str]:
    """Each id's shortest prefix (>= SHORT_ID hex digits) that no other id in `ids` shares."""
    texts = sorted({str(i) for i in ids})
    length = SHORT_ID
    while length < 36 and len({t[:length] for t in texts}) < len(texts):
        length += 1
    if length < 36 and length > SHORT_ID:
        # Never end on the dash of a UUID's text form: one more digit reads better.
        while length < 36 and any(t[length - 1:length] == "-" for t in texts):
            length += 1
    return {t: t[:length] for t in texts}


@dataclass(frozen=True)
class Column:
    """One column: `drop` ranks how readily it is left out on a narrow screen (higher
    goes first, 0 never); `flexible` columns are cut (with …) rather than left out,
    where the room ends, or after a whole name when they list `names`."""

    header: str
    drop: int = 0
    flexible: bool = False
    right: bool = False
    style: str = ""
    names: bool = False


Cell = str | tuple[str, str]  # text, or (text, style)


def _cell(value: Cell) -> tuple[str, str]:
    from runnerq_cli.literal import literal

    text, style = value if isinstance(value, tuple) else (value, "")
    return literal(text, max_length=CELL_MAX), style


def _width(text: str) -> int:
    from rich.cells import cell_len

    return cell_len(text)


def _cut(text: str, width: int, names: bool = False) -> str:
    """`text` in `width` cells: whole, or cut where the room ends, ending in …; a list
    of `names` after the last whole name that fits (inside one only when not even the
    first fits)."""
    from rich.cells import set_cell_size

    if _width(text) <= width:
        return text
    if width <= 0:
        return ""
    head = set_cell_size(text, width - 1)
    if names and text[len(head):len(head) + 1] not in (" ", ","):  # inside a name
        boundary = max(head.rfind(" "), head.rfind(","))
        if boundary > 0:
            head = head[:boundary + (head[boundary] == ",")]
    return head.rstrip() + ELLIPSIS


def _first_name(text: str) -> int:
    """The cells a list's first name takes with `,…` after it (the whole text if one)."""
    head = text.split(",", 1)[0]
    return _width(head) + (2 if len(head) < len(text) else 0)


def layout(columns: Sequence[Column], rows: Iterable[Sequence[Cell]],
           width: int) -> list[list[tuple[str, str]]]:
    """The table as lines of (text, style) pieces, fitted to `width` columns."""
    cells = [[_cell(c) for c in row] for row in rows]
    keep = list(range(len(columns)))
    widths = [max([_width(columns[i].header)] + [_width(r[i][0]) for r in cells])
              for i in range(len(columns))]
    # A free-text column counts at the least it needs while the others are fitted (a
    # list of names: its first name whole, and `,…`).
    least = [min(w, max(FLEX_MIN, _width(c.header),
                        *([_first_name(r[i][0]) for r in cells] if c.names else [])))
             if c.flexible else w
             for i, (c, w) in enumerate(zip(columns, widths, strict=True))]

    def total() -> int:
        return sum(least[i] for i in keep) + len(GAP) * (len(keep) - 1)

    empty = [i for i in keep if not any(r[i][0] for r in cells)]
    droppable = sorted((i for i, c in enumerate(columns) if c.drop),
                       key=lambda i: -columns[i].drop)
    for i in [*empty, *(i for i in droppable if i not in empty)]:
        if total() <= width:
            break
        keep.remove(i)
    for i in [i for i in keep if columns[i].flexible]:  # the room left, up to its own
        widths[i] = max(least[i], min(widths[i], width - (total() - least[i])))
        least[i] = widths[i]
    lines: list[list[tuple[str, str]]] = []
    header = [(c.header, "bold") for c in columns]
    for row in [header, *cells]:
        pieces: list[tuple[str, str]] = []
        for n, i in enumerate(keep):
            text, style = row[i]
            text = _cut(text, widths[i], columns[i].names)
            last = n == len(keep) - 1
            pad = " " * (widths[i] - _width(text))
            if columns[i].right:
                text = pad + text
            elif not last:
                text = text + pad
            pieces.append((text, style or (columns[i].style if row is not header else style)))
            if not last:
                pieces.append((GAP, ""))
        lines.append(pieces)
    return lines


def print_table(columns: Sequence[Column], rows: Iterable[Sequence[Cell]]) -> str:
    """Print the table on stdout at the console's width (COLUMNS off a terminal); returns
    the text printed (a footnote is for what was shown, not for a column left out)."""
    from rich.text import Text

    from runnerq_cli.cli.output import console

    out = console(markup=False)
    shown = []
    for pieces in layout(columns, rows, out.width):
        line = Text(no_wrap=True, overflow="ignore")
        for text, style in pieces:
            line.append(text, style=style)
        line.rstrip()
        out.print(line, soft_wrap=True)
        shown.append(line.plain)
    return "\n".join(shown)
