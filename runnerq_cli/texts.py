"""Text that people give and that is shown back to people: one line of free text
(`--reason`, `--actor`, a progress message, a flow key) and worker ids.

Each is limited to characters that can neither span lines nor be markup or a control
(docs/input.md). Apart from values.py, whose parsers every command runs, since a plain
`enqueue` checks no such text: it need not compile this where byte-code is not cached
(benchmarks/bench_cli_startup.py).
"""

from __future__ import annotations

import re
from typing import Any

from runnerq_cli.errors import InvalidArgument
from runnerq_cli.plural import counted
from runnerq_cli.values import shown

_WORKER_ID = re.compile(r"[A-Za-z0-9._:@-]+")
WORKER_ID_MAX = 128

# Characters that would let a value span lines, hide or reorder what follows it on a
# screen: C0/C1 controls (Cc), surrogates (undecodable bytes, Cs), line and paragraph
# separators, and the bidirectional embedding, override and isolate marks.
_BIDI_MARKS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def one_line_text(value: Any, what: str, *, max_chars: int) -> str:
    """A recorded free text (`--reason`, `--actor`): one line of printable text.

    Refused (InvalidArgument, exit 2): not valid UTF-8 (an undecodable byte
    reaches Python as a lone surrogate), a control character (newline, tab,
    ESC, NUL, DEL, C1), a line separator or a bidirectional override, and more
    than `max_chars` characters. So a recorded value can never forge a second
    line of `audit` or repaint a terminal.
    """
    import unicodedata

    if not isinstance(value, str):
        raise InvalidArgument(f"{what}: expected text", what)
    if len(value) > max_chars:
        raise InvalidArgument(f"{what}: at most {counted(max_chars, 'character')}, "
                              f"got {len(value)}",
                              what)
    for position, char in enumerate(value):
        category = unicodedata.category(char)
        if category == "Cs":
            raise InvalidArgument(f"{what}: not valid UTF-8 (at character {position + 1})",
                                  what)
        if category in ("Cc", "Zl", "Zp") or char in _BIDI_MARKS:
            raise InvalidArgument(f"{what}: one line of printable text: control character "
                                  f"U+{ord(char):04X} at character {position + 1}", what)
    return value


def worker_id(value: Any) -> str:
    """A worker id: letters, digits and `. _ : @ -`, 1 to 128 characters.

    An id is shown on pages and terminals and written into other programs' pages
    (RunnerQ's console puts it into innerHTML): the characters an id needs, and none
    that could be markup, a quote or a control (docs/design.md, "Workers").
    """
    if not isinstance(value, str) or not value:
        raise InvalidArgument("invalid worker id: it must not be empty")
    if len(value) > WORKER_ID_MAX:
        raise InvalidArgument(
            f"invalid worker id {shown(value[:20])}...: at most {WORKER_ID_MAX} characters")
    if not _WORKER_ID.fullmatch(value):
        raise InvalidArgument(f"invalid worker id {shown(value)}: use only letters, digits "
                              "and '.', '_', ':', '@', '-'")
    return value
