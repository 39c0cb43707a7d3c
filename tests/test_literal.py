"""literal(): untrusted text becomes one inert line (runnerq_cli/literal.py)."""

from __future__ import annotations

import pytest

from runnerq_cli.literal import literal, rich_text


@pytest.mark.parametrize(("raw", "shown"), [
    ("send_email", "send_email"),
    ("disk [/] full", "disk [/] full"),
    ("\x1b[2J", "\\x1b[2J"),
    ("\x1b]0;title\x07", "\\x1b]0;title\\x07"),
    ("a\nb\rc\td", "a\\nb\\rc\\td"),
    ("nul\x00", "nul\\x00"),
    ("\x9bcsi", "\\x9bcsi"),
    ("abc\u202eevil", "abc\\u202eevil"),
    ("\u2066iso\u2069", "\\u2066iso\\u2069"),
    ("caf\u00e9 \u65e5\u672c", "caf\u00e9 \u65e5\u672c"),
])
def test_literal_escapes_controls_and_keeps_the_rest(raw: str, shown: str) -> None:
    assert literal(raw) == shown


def test_literal_cuts_long_text_after_escaping() -> None:
    assert literal("x" * 50, max_length=10) == "xxxxxxx..."
    assert literal(12) == "12"


def test_rich_text_is_never_markup() -> None:
    from rich.console import Console

    console = Console(width=80, no_color=True, record=True)
    console.print(rich_text("[link=http://evil.example]see[/link] [/] [red]x"))
    assert console.export_text().strip() == "[link=http://evil.example]see[/link] [/] [red]x"


def test_multiline_keeps_lines_and_tabs_and_escapes_the_rest() -> None:
    assert literal("a\nb\tc\x1b[2J\r\u202e", multiline=True) == "a\nb\tc\\x1b[2J\\r\\u202e"


def test_every_format_character_is_escaped_as_the_console_page_does() -> None:
    """Unicode's Cf (format) characters are invisible or reorder text: `job\\u200b` would
    read as `job`, a tag character hides text. The class, not a list: every Cf code point
    this Python knows is escaped, and nothing else of the letters' planes is."""
    import sys
    import unicodedata

    format_chars = [chr(c) for c in range(sys.maxunicode + 1)
                    if unicodedata.category(chr(c)) == "Cf"]
    assert format_chars and all(literal(ch) != ch for ch in format_chars)
    assert literal("job\u200b") == "job\\u200b"
    assert literal("tag\U000e0041") == "tag\\U000e0041"
    assert literal("soft\u00adhyphen") == "soft\\xadhyphen"
    assert literal("\u200d", multiline=True) == "\\u200d"
    kept = "caf\u00e9 \u65e5\u672c \u0627\u0644 \U0001f600"
    assert literal(kept) == kept
