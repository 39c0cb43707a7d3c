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

# C0 controls (tab included: it shifts columns), DEL, C1 controls, line and paragraph
# separators (U+2028, U+2029 break lines on some terminals), and every format character
# (Unicode's category Cf, as of Unicode 15.1: the bidirectional embeddings, overrides,
# isolates and marks that reverse what follows, and the invisible ones, zero-width space
# and joiners, word joiner, BOM, soft hyphen, tags, by which `job\u200b` reads as `job`).
# The console's page escapes the same set (\p{Cf}, console/static/index.html).
_FORMAT = ("\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u180e\u200b-\u200f"
           "\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd"
           "\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001"
           "\U000e0020-\U000e007f")
_UNSAFE = re.compile(f"[\x00-\x1f\x7f-\x9f\u2028\u2029{_FORMAT}]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


_UNSAFE_MULTILINE = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029{_FORMAT}]")


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
