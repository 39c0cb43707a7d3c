"""The W3C trace context an activity carries from its enqueue to its handler
(docs/design.md, "Trace context").

An enqueue stores the producer's current trace context, `{traceparent, tracestate}`,
in the activity's `trace_context` field; the worker starts each attempt's span as its
child. Capturing needs OpenTelemetry only if the producer uses it: there is no current
span unless the process has imported `opentelemetry.trace`, so `current()` looks in
`sys.modules` and imports nothing otherwise (tests/test_import_cost.py). The CLI takes
the context from TRACEPARENT and TRACESTATE (`from_environment`), with or without
OpenTelemetry.

A bad value is never an error: W3C says a receiver that cannot parse `traceparent`
starts a new trace. `clean` drops a malformed `traceparent` (and so the whole context),
and a malformed or oversized `tracestate` alone; readers of the stored field do the same.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from typing import Any

FIELD = "trace_context"
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


def current() -> dict[str, str] | None:
    """The calling thread's current OpenTelemetry trace context, or None (no span, or
    OpenTelemetry not in use: then nothing is imported)."""
    if "opentelemetry.trace" not in sys.modules:
        return None
    try:
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
    except ImportError:  # a partial install: no context rather than no enqueue
        return None
    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    return clean(carrier)


def from_environment(environ: Mapping[str, str]) -> dict[str, str] | None:
    """TRACEPARENT (and TRACESTATE) as a shell or a CI job passes them, or None."""
    parent = environ.get("TRACEPARENT")
    if parent is None:
        return None
    return clean({"traceparent": parent.strip(),
                  "tracestate": environ.get("TRACESTATE", "").strip()})
