"""The one parser for each kind of value a user can give (docs/input.md).

Every CLI option, NDJSON field, config-file value and `RUNNERQ_*` variable
that takes a number, a duration, a time, JSON, a name, a URI or a path goes
through one function here, so the limits are the same everywhere and a bad
value is always an `InvalidArgument` (exit 2; the config layer turns it into
exit 3 for files and the environment) naming what was wrong, never a crash,
a hang or a silent clamp. Kept free of heavy imports: pymongo/bson are
imported inside the two functions that need them.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from runnerq_cli.backend.domain.sizes import (  # the bounds, defined once (import-free module)
    ACTIVITY_TYPE_MAX,
    BSON_DOCUMENT_MAX,
    IDEMPOTENCY_KEY_MAX_BYTES,
    METADATA_MAX_BYTES,
    METADATA_VALUE_MAX_BYTES,
    PAYLOAD_MAX_BYTES,
    PAYLOAD_TEXT_MAX,
)
from runnerq_cli.errors import InvalidArgument
from runnerq_cli.plural import counted

__all__ = ["BSON_DOCUMENT_MAX", "PAYLOAD_MAX_BYTES", "PAYLOAD_TEXT_MAX"]  # read from here too

INT64_MAX = 2**63 - 1
# Longer than any lease, timeout or retention anyone means; 100 years still fits a datetime.
MAX_DURATION = 100 * 365 * 86400.0
TIME_MIN = datetime(1970, 1, 1, tzinfo=UTC)
TIME_MAX = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)
JSON_MAX_DEPTH = 64  # MongoDB refuses documents nested deeper than 100 levels
NAME_MAX_BYTES = 63  # MongoDB: database names are shorter than 64 bytes
QUEUE_NAME_MAX = 64
SHOWN_MAX = 60  # characters of a rejected value quoted back in a message

_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
# ASCII digits only: Python's \\d, int() and float() also take Arabic-Indic or full-width
# digits ('٤', '２'), which no documentation promises and no other tool reads the same.
_PART = re.compile(r"([0-9]{1,15}(?:\.[0-9]{1,9})?)(ms|s|m|h|d|w)")
_INTEGER = re.compile(r"[+-]?[0-9]+")
_QUEUE_NAME = re.compile(r"[A-Za-z0-9_-]+")
_WORKER_ID = re.compile(r"[A-Za-z0-9._:@-]+")
WORKER_ID_MAX = 128
_DATABASE_FORBIDDEN = set('/\\. "$\x00')


def shown(value: Any) -> str:
    """`repr(value)`, cut to SHOWN_MAX characters: a huge value never fills an error."""
    if isinstance(value, int) and value.bit_length() > 200:
        return f"<a {len(str(abs(value))) if value.bit_length() < 14000 else 'huge'}-digit number>"
    text = repr(value[:SHOWN_MAX] if isinstance(value, str | bytes) else value)
    if len(text) > SHOWN_MAX * 4:  # a huge container: repr is bounded by cutting first
        text = text[:SHOWN_MAX]
    return text if len(text) <= SHOWN_MAX else text[:SHOWN_MAX - 3] + "..."


# ------------------------------------------------------------------ one line of text

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


# ------------------------------------------------------------------ numbers


def number(value: Any, what: str, *, minimum: float | None = None,
           maximum: float | None = None, integer: bool = False) -> Any:
    """A finite number (an int if `integer`) within [minimum, maximum].

    Accepts numbers and their text form; refuses booleans, nan, inf, 1e400
    and integers that do not fit in 64 bits.
    """
    kind = "a whole number" if integer else "a number"
    given = value  # as typed, for the messages (`'1e999'`, not the `inf` it reads as)
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise InvalidArgument(f"{what}: expected {kind}, got {shown(value)}")
    if isinstance(value, str):
        text = value.strip()
        if not text.isascii():  # float('٤') is 4.0: digits are ASCII everywhere here
            raise InvalidArgument(f"{what}: expected {kind}, got {shown(value)}")
        if integer:
            if not _INTEGER.fullmatch(text):
                raise InvalidArgument(f"{what}: expected {kind}, got {shown(value)}")
            if len(text) > 25:  # int() of thousands of digits is slow, and refused below
                raise InvalidArgument(f"{what}: {shown(value)} does not fit in 64 bits")
            value = int(text)
        else:
            try:
                value = float(text) if len(text) <= 40 else math.inf
            except ValueError:
                raise InvalidArgument(f"{what}: expected {kind}, got {shown(value)}") from None
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidArgument(f"{what}: expected a finite number, got {shown(given)}")
        if integer:
            if value != int(value):
                raise InvalidArgument(f"{what}: expected {kind}, got {shown(value)}")
            value = int(value)
    if isinstance(value, int) and not -INT64_MAX - 1 <= value <= INT64_MAX:
        raise InvalidArgument(f"{what}: {shown(value)} does not fit in 64 bits")
    if minimum is not None and value < minimum:
        raise InvalidArgument(f"{what}: expected {kind} of at least {minimum:g}, "
                              f"got {shown(value)}")
    if maximum is not None and value > maximum:
        raise InvalidArgument(f"{what}: expected {kind} of at most {maximum:g}, "
                              f"got {shown(value)}")
    return value


def integer(value: Any, what: str, *, minimum: int | None = None,
            maximum: int | None = INT64_MAX) -> int:
    """A whole number within [minimum, maximum] (64-bit at most)."""
    return int(number(value, what, minimum=minimum, maximum=maximum, integer=True))


# ------------------------------------------------------------------ durations


def duration(value: Any, what: str = "duration", *, minimum: float = 0.0,
             maximum: float = MAX_DURATION, whole: bool = False) -> float:
    """Seconds in "30s", "5m", "1h30m", "250ms" or a bare number of seconds.

    Finite, within [minimum, maximum] (at most 100 years by default), whole
    seconds if `whole`. Negative values are refused.
    """
    expected = f"{what}: expected a duration like 30s, 5m or 2h, got {shown(value)}"
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise InvalidArgument(expected)
    if isinstance(value, str):
        text = value.strip().lower()
        if not text.isascii():  # float('١٠') is 10.0: refused like any other non-duration
            raise InvalidArgument(expected)
        if text.startswith("-"):
            raise InvalidArgument(f"{what} must not be negative, got {shown(value)}")
        if len(text) > 100:
            raise InvalidArgument(expected)
        try:
            seconds = float(text)
        except ValueError:
            pos, seconds = 0, 0.0
            for match in _PART.finditer(text):
                if match.start() != pos:
                    break
                seconds += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
                pos = match.end()
            if pos != len(text) or not text:
                raise InvalidArgument(expected) from None
    else:
        seconds = float(value) if abs(value) < 1e300 else math.inf
    if not math.isfinite(seconds):
        raise InvalidArgument(f"{what}: expected a finite duration, got {shown(value)}")
    if seconds < 0:
        raise InvalidArgument(f"{what} must not be negative, got {shown(value)}")
    if seconds > maximum:
        raise InvalidArgument(f"{what}: at most {_limit(maximum)}, got {shown(value)}")
    if seconds < minimum:
        raise InvalidArgument(f"{what}: must be at least {_limit(minimum)}, "
                              f"got {shown(value)}")
    if whole:
        if seconds != int(seconds):
            raise InvalidArgument(f"{what}: expected whole seconds, got {shown(value)}")
        return int(seconds)
    return seconds


def _limit(seconds: float) -> str:
    """A duration limit for a message: "100 years", "1d", "1h", "10ms" (exact: a limit
    rounded to format_duration's tenths of a second would be another limit, 10ms "0s")."""
    year = 365 * 86400
    if 0 < seconds < 1:
        return f"{round(seconds * 1000, 3):g}ms"
    return counted(seconds / year, "year", number=f"{seconds / year:g}") if seconds >= year \
        else format_duration(seconds)


def format_duration(seconds: float) -> str:
    """Short human form: 45s, 3m20s, 2h5m, 1d3h."""
    seconds = max(0.0, seconds)
    if seconds < 10:
        return f"{seconds:.1f}s".replace(".0s", "s")
    total = round(seconds)
    for unit, size, sub, sub_size in (("d", 86400, "h", 3600), ("h", 3600, "m", 60),
                                      ("m", 60, "s", 1)):
        if total >= size:
            major, rest = divmod(total, size)
            minor = rest // sub_size
            return f"{major}{unit}{minor}{sub}" if minor else f"{major}{unit}"
    return f"{total}s"


# ------------------------------------------------------------------ times


def time(value: Any, what: str = "time", *, relative: bool = True,
         now: datetime | None = None) -> datetime:
    """An aware UTC datetime from ISO-8601 text (naive means UTC) or, if `relative`,
    a duration meaning that long ago. Between 1970 and the end of year 9999 (UTC)."""
    if isinstance(value, datetime):
        parsed = value
    elif isinstance(value, str) and len(value) <= 64 and value.isascii():
        text = value.strip()
        try:
            parsed = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            if not relative:
                raise InvalidArgument(f"{what}: expected an ISO-8601 time like "
                                      f"2030-01-31T09:00:00Z, got {shown(value)}") from None
            try:
                ago = duration(text, what)
            except InvalidArgument as exc:
                if "expected a duration" not in str(exc):
                    raise  # a duration, but out of range: say so
                raise InvalidArgument(f"{what}: expected an ISO-8601 time or a duration "
                                      f"ago like 10m, got {shown(value)}") from None
            # further back than 1970 means "since the start": nothing is older
            parsed = max((now or datetime.now(UTC)) - timedelta(seconds=ago), TIME_MIN)
    else:
        raise InvalidArgument(f"{what}: expected an ISO-8601 time, got {shown(value)}")
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    try:
        parsed = parsed.astimezone(UTC)
    except (OverflowError, ValueError):
        parsed = None  # type: ignore[assignment]
    if parsed is None or not TIME_MIN <= parsed <= TIME_MAX:
        raise InvalidArgument(f"{what}: {shown(value)} is out of range (from "
                              f"1970-01-01T00:00:00Z to 9999-12-31T23:59:59Z)")
    return parsed


def optional_time(value: str | None, what: str, **options: Any) -> datetime | None:
    """`time(value)` for an option that may be absent: None only when it was not given.

    An empty value (`--since ''`, a variable that expanded to nothing) is a malformed
    time like any other, never "no filter": the commands test `is None`, not truth.
    """
    return None if value is None else time(value, what, **options)


# ------------------------------------------------------------------ JSON


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:20]} is out of range")
    return value


def json_value(text: str | bytes, what: str) -> Any:
    """A JSON value from UTF-8 text with finite numbers only (no NaN, Infinity or 1e400).

    Nesting is bounded by the decoder; `payload` applies JSON_MAX_DEPTH to payloads.
    """
    import json

    where = f"{what}: " if what else ""  # NDJSON lines are named by their number instead

    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidArgument(f"{where}not UTF-8 text (invalid byte at offset "
                                  f"{exc.start})") from None
    try:
        return json.loads(text, parse_constant=_no_constant, parse_float=_finite_float)
    except RecursionError:  # the decoder's own bound (about 1000 levels), never a crash
        raise InvalidArgument(f"{where}JSON nested deeper than {JSON_MAX_DEPTH} levels") from None
    except json.JSONDecodeError as exc:
        raise InvalidArgument(f"{where}malformed JSON: {exc.msg} at line {exc.lineno} "
                              f"column {exc.colno}") from None
    except ValueError as exc:
        raise InvalidArgument(f"{where}malformed JSON: {' '.join(str(exc).split())[:100]}") \
            from None


def json_object(text: str | bytes, what: str) -> dict[str, Any]:
    """A JSON object (see `json_value`); anything else is refused naming its type."""
    value = json_value(text, what)
    if not isinstance(value, dict):
        kind = type(value).__name__ if value is not None else "null"
        raise InvalidArgument(f"{what}: payload must be a JSON object, got {kind}")
    return value


def nested_deeper_than(value: Mapping[str, Any], limit: int = JSON_MAX_DEPTH) -> bool:
    """True if dicts/lists in `value` nest deeper than `limit` (level by level, no recursion)."""
    level: list[Any] = [dict(value) if isinstance(value, Mapping) else value]
    for _ in range(limit):
        level = [child for item in level
                 for child in (item.values() if isinstance(item, dict) else item)
                 if isinstance(child, dict | list | tuple)]
        if not level:
            return False
    return True


def json_data(value: Any, what: str = "payload") -> None:
    """Raise unless `value` is JSON data: mappings with text keys, lists, text, finite
    numbers, booleans and null. For data from YAML, which also has NaN and infinities
    (`.nan`), bytes (`!!binary`), dates, times and sets, none of them JSON: a payload
    is a JSON object, whatever file it was written in."""
    if nested_deeper_than(value if isinstance(value, Mapping) else {"": value}):
        raise InvalidArgument(f"{what}: nested deeper than {JSON_MAX_DEPTH} levels")
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, Mapping):
            for key in item:
                if not isinstance(key, str):
                    raise InvalidArgument(f"{what}: a key must be text, got {shown(key)}")
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, float) and not math.isfinite(item):
            raise InvalidArgument(f"{what}: numbers must be finite, got {shown(item)}")
        elif not (item is None or isinstance(item, str | int | float)):  # bool is an int
            raise InvalidArgument(f"{what}: {shown(item)} is not JSON (a "
                                  f"{type(item).__name__}); quote it to make it text")


def payload(value: Any, what: str = "payload") -> None:
    """Raise unless `value` can be stored as an activity payload in MongoDB.

    A mapping, nested at most JSON_MAX_DEPTH levels, encodable as BSON (no NUL
    in keys, integers within 64 bits, valid text) and at most PAYLOAD_MAX_BYTES:
    checked before anything is sent, so the server never refuses half a batch.
    """
    if not isinstance(value, Mapping):
        raise InvalidArgument(f"{what} must be a JSON object")
    if nested_deeper_than(value):
        raise InvalidArgument(f"{what}: nested deeper than {JSON_MAX_DEPTH} levels")
    import bson

    try:
        size = len(bson.encode(value))
    except (bson.errors.InvalidDocument, OverflowError, TypeError, ValueError,
            RecursionError) as exc:
        raise InvalidArgument(f"{what} cannot be stored in MongoDB: "
                              f"{shown(' '.join(str(exc).split()))}") from None
    if size > PAYLOAD_MAX_BYTES:
        raise InvalidArgument(
            f"{what} is {counted(size, 'byte')} as BSON, more than the limit of "
            f"{PAYLOAD_MAX_BYTES} "
            f"bytes (7.5 MiB: the activity document, which also carries the result, must "
            f"stay within MongoDB's 16 MiB)")


# ------------------------------------------------------------------ names


def queue_name(value: Any) -> str:
    """A queue name: letters, digits, `_` and `-`, at most 64 characters.

    Anything else could escape the `runnerq_{queue}_` collection prefix or
    exceed MongoDB's limits.
    """
    if not isinstance(value, str) or not value:
        raise InvalidArgument("invalid queue name: it must not be empty")
    if len(value) > QUEUE_NAME_MAX:
        raise InvalidArgument(
            f"invalid queue name {shown(value[:20])}...: at most {QUEUE_NAME_MAX} characters")
    if not _QUEUE_NAME.fullmatch(value):
        raise InvalidArgument(
            f"invalid queue name {shown(value)}: use only letters, digits, '_' and '-'")
    return value


# ------------------------------------------------------------------ filters


def filter_term(value: Any, what: str, hint: str = " (leave it out to mean any)") -> Any:
    """A filter's value as given (None: the option was left out), refusing an empty or
    blank one. `--type "$TYPE"` with TYPE unset must not widen an action, a listing or
    a tail to every type: an empty value names nothing, and is never "no filter"."""
    if isinstance(value, str) and not value.strip():
        raise InvalidArgument(f"{what} must not be empty{hint}", what)
    return value


def filter_terms(items: Iterable[Any] | None, what: str) -> tuple[Any, ...]:
    """Each of a filter's values (`--type a --type b`), as filter_term does one."""
    return tuple(filter_term(item, what) for item in items or ())


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


def database_name(value: Any) -> str:
    """A MongoDB database name: 1-63 bytes, none of / \\ . " $, space or NUL."""
    if not isinstance(value, str) or not value:
        raise InvalidArgument("invalid database name: it must not be empty")
    bad = sorted(set(value) & _DATABASE_FORBIDDEN)
    if bad:
        listed = " ".join("space" if c == " " else "NUL" if c == "\x00" else c for c in bad)
        raise InvalidArgument(f"invalid database name {shown(value)}: it must not contain "
                              f"{listed} (forbidden: / \\ . \" $ space NUL)")
    if len(value.encode("utf-8", "surrogatepass")) > NAME_MAX_BYTES:
        raise InvalidArgument(f"invalid database name {shown(value)}: at most "
                              f"{NAME_MAX_BYTES} bytes")
    return value


# ------------------------------------------------------------------ URIs


def mongo_uri(value: Any) -> str:
    """A mongodb:// or mongodb+srv:// URI whose hosts and options pymongo accepts.

    pymongo itself drops an invalid option with a warning and goes on with
    its default (a 30 s wait instead of the configured bound): refused here.
    Never resolves DNS. Errors never show the password.
    """
    from runnerq_cli.redaction import redact_uri

    if not isinstance(value, str) or not value.strip():
        raise InvalidArgument("expected a mongodb:// URI")
    if not value.startswith(("mongodb://", "mongodb+srv://")):
        raise InvalidArgument(f"invalid MongoDB URI {shown(redact_uri(value))}: it must "
                              "start with mongodb:// or mongodb+srv://")
    import warnings

    from pymongo import uri_parser
    from pymongo.errors import ConfigurationError, InvalidURI

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            if value.startswith("mongodb+srv://"):
                query = value.split("?", 1)[1] if "?" in value else ""
                if query:
                    uri_parser.split_options(query, validate=True, warn=False)
            else:
                uri_parser.parse_uri(value, validate=True, warn=False)
    except (ConfigurationError, InvalidURI, ValueError, TypeError, UserWarning) as exc:
        detail = redact_uri(" ".join(str(exc).split()))
        if detail.startswith("Unknown option"):
            detail = _unknown_uri_options(value) or detail
        raise InvalidArgument(f"invalid MongoDB URI {shown(redact_uri(value))}: "
                              f"{detail[:200]}") from None
    if _unacknowledged(value):
        raise InvalidArgument(
            f"invalid MongoDB URI {shown(redact_uri(value))}: w=0 (unacknowledged writes) "
            "is not supported: idempotency keys, claims and fenced acknowledgements need "
            "the server's answer to each write; use w=1 or w=majority")
    return value


def _unacknowledged(uri: str) -> bool:
    """True if the URI's options ask for w=0 (the driver then answers no write)."""
    from pymongo import uri_parser

    query = uri.split("?", 1)[1] if "?" in uri else ""
    options = uri_parser.split_options(query, validate=True, warn=False) if query else {}
    return options.get("w") == 0


def _unknown_uri_options(uri: str) -> str:
    """'unknown option(s) ...' naming the URI's options pymongo does not know."""
    import difflib

    from pymongo import common

    known = set(common.URI_OPTIONS_VALIDATOR_MAP) | set(common.URI_OPTIONS_ALIAS_MAP) \
        | set(common.URI_OPTIONS_DEPRECATION_MAP)
    query = uri.split("?", 1)[1] if "?" in uri else ""
    names = [part.split("=", 1)[0] for part in query.split("&") if part]
    unknown = [name for name in names if name.lower() not in known]
    if not unknown:
        return ""
    close = difflib.get_close_matches(unknown[0].lower(), sorted(known), n=1)
    return (f"unknown option {shown(unknown[0])}"
            + (f" (did you mean {close[0]}?)" if close else ""))


# ------------------------------------------------------------------ paths


def writable_file(value: str, what: str) -> str:
    """A path where a regular file can be created or replaced (its directory exists, is
    writable); returns the path to write, a symlink's target (written through: replacing
    the link itself would leave its target stale and the link gone).

    An existing FIFO, socket or device is refused: opening one blocks or reads nothing
    a cursor could be made of, so the command would hang instead of answering.
    """
    import stat

    if not value:
        raise InvalidArgument(f"{what}: the path must not be empty")
    value = os.path.realpath(value)
    if os.path.exists(value) and not os.path.isdir(value) \
            and not stat.S_ISREG(os.stat(value).st_mode):
        raise InvalidArgument(f"{what}: {shown(value)} is not a regular file (a FIFO, "
                              "socket or device)")
    if os.path.isdir(value):
        raise InvalidArgument(f"{what}: {shown(value)} is a directory, not a file")
    parent = os.path.dirname(os.path.abspath(value))
    if not os.path.exists(parent):
        raise InvalidArgument(f"{what}: the directory of {shown(value)} does not exist")
    if not os.path.isdir(parent):
        raise InvalidArgument(f"{what}: {shown(value)} is under a file, not a directory")
    if os.path.exists(value) and not os.access(value, os.W_OK):
        raise InvalidArgument(f"{what}: {shown(value)} is not writable")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InvalidArgument(f"{what}: cannot create files in the directory of "
                              f"{shown(value)} (permission denied)")
    return value


# ------------------------------------------------------------------ activities


def stored_text(value: Any, what: str, *, max_bytes: int | None = None,
                max_chars: int | None = None) -> str:
    """Non-empty text MongoDB can store, within its bound (backend/domain/sizes.py).

    Refused, naming `what` and quoting at most SHOWN_MAX characters of the value:
    not text, empty, an unpaired surrogate (a JSON `"\\ud800"` escape: not UTF-8, so
    BSON cannot encode it), more than `max_chars` characters or `max_bytes` bytes
    of UTF-8. A 17 MB value is measured, never copied into the message.
    """
    if not isinstance(value, str):
        raise InvalidArgument(f"{what}: expected text, got {type(value).__name__}")
    if not value.strip():
        raise InvalidArgument(f"{what}: must not be empty")
    if max_chars is not None and len(value) > max_chars:
        raise InvalidArgument(f"{what} {shown(value)} is {counted(len(value), 'character')}, "
                              f"more than the limit of {counted(max_chars, 'character')}")
    if max_bytes is not None and len(value) > max_bytes:  # at least a byte a character
        raise InvalidArgument(f"{what} {shown(value)} is more than the limit of "
                              f"{counted(max_bytes, 'byte')} "
                              f"({counted(len(value), 'character')})")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise InvalidArgument(f"{what} {shown(value)} is not valid UTF-8: an unpaired "
                              f"surrogate at character {exc.start + 1}") from None
    if max_bytes is not None and size > max_bytes:
        raise InvalidArgument(f"{what} {shown(value)} is {counted(size, 'byte')}, more than "
                              f"the limit of {counted(max_bytes, 'byte')}")
    return value


def metadata(value: Mapping[str, Any], what: str = "metadata") -> None:
    """Raise unless `value` is storable metadata: string values within
    METADATA_VALUE_MAX_BYTES each (empty allowed), METADATA_MAX_BYTES in all (keys are
    checked by models.check_metadata_key)."""
    total = 5  # a BSON document's frame
    for key, tag in value.items():
        if not isinstance(tag, str):
            raise InvalidArgument(f"{what} {shown(key)}: expected a string value, got "
                                  f"{type(tag).__name__}")
        if tag:
            stored_text(tag, f"{what} value of {shown(key)}", max_bytes=METADATA_VALUE_MAX_BYTES)
        total += len(key.encode("utf-8", "surrogatepass")) + len(tag.encode("utf-8")) + 7
    if total > METADATA_MAX_BYTES:
        raise InvalidArgument(f"{what} is {counted(total, 'byte')} as BSON, more than the limit of "
                              f"{METADATA_MAX_BYTES} bytes")


def activity_limits(spec: Any) -> None:
    """The bounds of an ActivitySpec (backend/queue/enqueueing.py) that its type checks do not
    cover: text that can be stored within its bound (backend/domain/sizes.py), a storable
    payload, and numbers and times MongoDB and datetime arithmetic can hold. Errors
    name the parameter (activity_type, metadata, idempotency_key, payload)."""
    stored_text(spec.activity_type, "activity_type", max_chars=ACTIVITY_TYPE_MAX)
    if spec.idempotency_key is not None:
        stored_text(spec.idempotency_key, "idempotency_key",
                    max_bytes=IDEMPOTENCY_KEY_MAX_BYTES)
    metadata(spec.metadata)
    payload(spec.payload)
    for name in ("max_retries", "timeout_seconds", "retry_delay_seconds"):
        value = getattr(spec, name)
        if isinstance(value, int) and not isinstance(value, bool):
            integer(value, name, maximum=INT64_MAX if name == "max_retries"
                    else int(MAX_DURATION))
    if isinstance(spec.delay_seconds, int | float) and not isinstance(spec.delay_seconds, bool):
        duration(spec.delay_seconds, "delay")
    if isinstance(spec.scheduled_at, datetime) and spec.scheduled_at.tzinfo is not None:
        time(spec.scheduled_at, "scheduled_at", relative=False)
