"""The one parser for each kind of value a user can give (docs/input.md).

Every CLI option, NDJSON field, config-file value and `RUNNERQ_*` variable
that takes a number, JSON, a name or a URI goes through one function here, so
the limits are the same everywhere and a bad value is always an
`InvalidArgument` (exit 2; the config layer turns it into exit 3 for files and
the environment) naming what was wrong, never a crash, a hang or a silent
clamp. Kept free of heavy imports: pymongo/bson are imported inside the
functions that need them.

Here are the parsers every command runs (an `enqueue` too: its payload, the queue,
the database and the URI). Those a plain enqueue never runs are in modules of their
own, with the same rules, so that it need not compile them where byte-code is not
cached (benchmarks/bench_cli_startup.py): times.py (durations and times), texts.py
(one line of free text, worker ids), filter_values.py (a filter's values), paths.py
(a file to write), inputs.py (`json_data`: data read from YAML), and specs.py
(`activity_limits`: the bounds of an ActivitySpec).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from runnerq_cli.backend.domain.sizes import (  # the bounds, defined once (import-free module)
    BSON_DOCUMENT_MAX,
    METADATA_MAX_BYTES,
    METADATA_VALUE_MAX_BYTES,
    PAYLOAD_MAX_BYTES,
    PAYLOAD_TEXT_MAX,
)
from runnerq_cli.errors import InvalidArgument

__all__ = ["BSON_DOCUMENT_MAX", "PAYLOAD_MAX_BYTES", "PAYLOAD_TEXT_MAX"]  # read from here too

INT64_MAX = 2**63 - 1
# Longer than any lease, timeout or retention anyone means; 100 years still fits a datetime.
MAX_DURATION = 100 * 365 * 86400.0
JSON_MAX_DEPTH = 64  # MongoDB refuses documents nested deeper than 100 levels
NAME_MAX_BYTES = 63  # MongoDB: database names are shorter than 64 bytes
QUEUE_NAME_MAX = 64
SHOWN_MAX = 60  # characters of a rejected value quoted back in a message

# ASCII digits only: Python's \\d, int() and float() also take Arabic-Indic or full-width
# digits ('٤', '２'), which no documentation promises and no other tool reads the same.
_INTEGER = re.compile(r"[+-]?[0-9]+")
_QUEUE_NAME = re.compile(r"[A-Za-z0-9_-]+")
_DATABASE_FORBIDDEN = set('/\\. "$\x00')


def shown(value: Any) -> str:
    """`repr(value)`, cut to SHOWN_MAX characters: a huge value never fills an error."""
    if isinstance(value, int) and value.bit_length() > 200:
        return f"<a {len(str(abs(value))) if value.bit_length() < 14000 else 'huge'}-digit number>"
    text = repr(value[:SHOWN_MAX] if isinstance(value, str | bytes) else value)
    if len(text) > SHOWN_MAX * 4:  # a huge container: repr is bounded by cutting first
        text = text[:SHOWN_MAX]
    return text if len(text) <= SHOWN_MAX else text[:SHOWN_MAX - 3] + "..."


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
            f"{what} is {_counted(size, 'byte')} as BSON, more than the limit of "
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
    from pymongo import common

    known = set(common.URI_OPTIONS_VALIDATOR_MAP) | set(common.URI_OPTIONS_ALIAS_MAP) \
        | set(common.URI_OPTIONS_DEPRECATION_MAP)
    query = uri.split("?", 1)[1] if "?" in uri else ""
    names = [part.split("=", 1)[0] for part in query.split("&") if part]
    unknown = [name for name in names if name.lower() not in known]
    if not unknown:
        return ""
    close = closest(unknown[0].lower(), sorted(known))
    return (f"unknown option {shown(unknown[0])}"
            + (f" (did you mean {close}?)" if close else ""))


def closest(name: str, candidates: list[str]) -> str | None:
    """The candidate `name` most likely misspells, or None: every "did you mean" (a
    URI option, a settings key or variable, a queue) judges alike."""
    import difflib

    found = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
    return found[0] if found else None


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
        raise InvalidArgument(f"{what} {shown(value)} is {_counted(len(value), 'character')}, "
                              f"more than the limit of {_counted(max_chars, 'character')}")
    if max_bytes is not None and len(value) > max_bytes:  # at least a byte a character
        raise InvalidArgument(f"{what} {shown(value)} is more than the limit of "
                              f"{_counted(max_bytes, 'byte')} "
                              f"({_counted(len(value), 'character')})")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise InvalidArgument(f"{what} {shown(value)} is not valid UTF-8: an unpaired "
                              f"surrogate at character {exc.start + 1}") from None
    if max_bytes is not None and size > max_bytes:
        raise InvalidArgument(f"{what} {shown(value)} is {_counted(size, 'byte')}, more than "
                              f"the limit of {_counted(max_bytes, 'byte')}")
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
        raise InvalidArgument(f"{what} is {_counted(total, 'byte')} as BSON, more than the "
                              f"limit of {METADATA_MAX_BYTES} bytes")


def _counted(count: int, noun: str) -> str:
    """plural.counted, loaded when a message needs it: only refusals count here, and a
    command whose input is valid need not compile it (benchmarks/unrun_code.py)."""
    from runnerq_cli.plural import counted as counted_noun

    return counted_noun(count, noun)
