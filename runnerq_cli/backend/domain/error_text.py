"""Error texts as stored: valid UTF-8, at most ERROR_TEXT_MAX_BYTES, from anything.

A failure's text is written up to four times in one activity update (`last_error`,
the failure's event, its Err result, the dead-letter record), beside a payload of up
to 7.5 MiB: a handler's 20 MB message made that update too large for MongoDB and the
outcome was lost. And the text comes from code nobody checked: an exception whose
`__str__` returns a non-string or raises killed the thread that described it. So
every error text is made here, by `error_text` (cut, unencodable characters escaped)
and `describe` (an exception's class and message, never raising, never unbounded).
"""

from __future__ import annotations

from collections.abc import Callable

from runnerq_cli.backend.domain.sizes import ERROR_TEXT_MAX_BYTES

CUT_MARK = "… [cut: {} characters in all]"
# Characters of a message looked at: more than any bound keeps, so a 20 MB message is
# never copied whole (split, joined, encoded) only to be cut.
_LOOKED_AT = ERROR_TEXT_MAX_BYTES * 2


def error_text(text: str, limit: int = ERROR_TEXT_MAX_BYTES, *, length: int | None = None,
               ) -> str:
    """`text` as an exact `str` of at most `limit` UTF-8 bytes: characters that cannot
    be encoded (lone surrogates) escaped as `\\udcxx`, the end cut off with a mark that
    says how long it was (`length`: the text's whole length, when `text` is already
    a part of it)."""
    text = str.__str__(text)  # a str subclass's own methods are not called below
    length = len(text) if length is None else length
    data = text[:limit].encode("utf-8", "backslashreplace")
    if length <= limit and len(data) <= limit:
        return data.decode("utf-8")
    mark = CUT_MARK.format(length)
    return data[:max(0, limit - len(mark.encode()))].decode("utf-8", "ignore") + mark


def _text_of(call: Callable[[], object]) -> str | None:
    """What `str(x)` or `repr(x)` of a hostile object gives: its text, or None if it
    raises or returns no string."""
    try:
        text = call()
    except BaseException:  # a raising __str__ is what is being described here
        return None
    return str.__str__(text) if isinstance(text, str) else None


def message(exc: BaseException, limit: int = ERROR_TEXT_MAX_BYTES) -> str:
    """The exception's message on one line (its `str`, else its `repr`, else a
    placeholder), at most `limit` bytes: never raises."""
    text = _text_of(lambda: str(exc))
    if text is None:
        text = _text_of(lambda: repr(exc))
    if text is None:
        return "(its message could not be read)"
    return error_text(" ".join(text[:_LOOKED_AT].split()), limit, length=len(text))


def describe(exc: BaseException, *, with_class: bool = True) -> str:
    """`Class: message` (the class alone for an empty message), bounded, never raising.

    `with_class=False` gives the message alone (the class when it is empty): what a
    handler's `RetryableError`/`NonRetryableError` asks to be recorded.
    """
    name = error_text(_text_of(lambda: type(exc).__name__) or "Exception", 200)
    prefix = f"{name}: " if with_class else ""
    text = message(exc, ERROR_TEXT_MAX_BYTES - len(prefix.encode()))
    return prefix + text if text else name
