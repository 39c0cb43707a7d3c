"""W3C Trace Context level 1's rules for the context an activity carries
(docs/design.md, "Trace context"): which `traceparent` is valid, and the stored form
of a context (`clean`), which drops what is malformed rather than refusing it.

Apart from tracecontext.py (the field, and where a context comes from) since a plain
enqueue has no context to check: it need not compile this, nor its patterns, where
byte-code is not cached (benchmarks/bench_cli_startup.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

TRACEPARENT_MAX = 256  # version 00 is 55 characters; a later version may be longer
TRACESTATE_MAX = 512  # W3C: a vendor should propagate at least 512 characters
# version-traceid-parentid-flags (lowercase hex); a later version may append "-..." fields.
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")
_TRACESTATE = re.compile(r"[\x20-\x7e]*")  # printable ASCII (list members, commas, spaces)


def valid_traceparent(value: Any) -> bool:
    """W3C Trace Context level 1: version ff and all-zero ids are invalid; version 00
    has exactly four fields."""
    if not isinstance(value, str) or len(value) > TRACEPARENT_MAX:
        return False
    match = _TRACEPARENT.fullmatch(value)
    if match is None:
        return False
    version, trace_id, span_id, _flags, rest = match.groups()
    if version == "ff" or trace_id == "0" * 32 or span_id == "0" * 16:
        return False
    return not (version == "00" and rest)


def clean(value: Any) -> dict[str, str] | None:
    """The stored form of a trace context, or None when there is none worth storing."""
    if not isinstance(value, Mapping):
        return None
    parent = value.get("traceparent")
    if not valid_traceparent(parent):
        return None
    out = {"traceparent": str(parent)}
    state = value.get("tracestate")
    if (isinstance(state, str) and state.strip() and len(state) <= TRACESTATE_MAX
            and _TRACESTATE.fullmatch(state)):
        out["tracestate"] = state
    return out
