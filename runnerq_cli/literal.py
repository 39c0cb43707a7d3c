"""Untrusted text shown as text: one place that makes any string safe to print.

Activity types, reasons, actors, errors, metadata, worker ids and queue names come
from the database or the command line, so from anyone who can write to either. On a
terminal they must never act: no rich markup (`[red]`, `[link=...]`), no ESC
sequences (CSI clears the screen, OSC retitles it), no carriage return or newline
that forges a second line, no bidirectional override that reverses what follows.

`literal()` escapes every such character visibly (`\\x1b`, `\\n`, `\\u202e`) and
leaves all other text as it is; `rich_text()` wraps the result so that rich prints
it without reading markup. JSON output needs neither: JSON escapes on its own.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.text import Text

# C0 controls (tab included: it shifts columns), DEL, C1 controls, and the
# bidirectional embeddings, overrides and isolates (U+202A-U+202E, U+2066-U+2069)
# plus the invisible marks that steer them (U+200E, U+200F, U+061C). Line and
# paragraph separators (U+2028, U+2029) break lines on some terminals.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


_UNSAFE_MULTILINE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def literal(value: object, *, max_length: int | None = None, multiline: bool = False) -> str:
    """`value` as one line of inert text (see the module's docstring).

    With `max_length`, longer text is cut and ends in "..." (a huge value never
    floods a screen); the cut is made after escaping, so it never splits an escape
    in a way that hides it. With `multiline`, newlines and tabs are kept (a text
    result printed as the value it is); every other control is still escaped.
    """
    pattern = _UNSAFE_MULTILINE if multiline else _UNSAFE
    text = pattern.sub(_escape, value if isinstance(value, str) else str(value))
    if max_length is not None and len(text) > max_length:
        text = text[: max(0, max_length - 3)] + "..."
    return text


def rich_text(value: object, *, style: str = "", max_length: int | None = None) -> Text:
    """`literal(value)` as a rich Text: printed as written, never read as markup."""
    from rich.text import Text

    return Text(literal(value, max_length=max_length), style=style)
