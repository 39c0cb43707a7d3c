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
starts a new trace. `clean` (traceparent.py: W3C's rules, loaded only when there is a
context to check, which a plain enqueue has not) drops a malformed `traceparent` (and
so the whole context), and a malformed or oversized `tracestate` alone; readers of the
stored field do the same.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping

FIELD = "trace_context"


def current() -> dict[str, str] | None:
    """The calling thread's current OpenTelemetry trace context, or None (no span, or
    OpenTelemetry not in use: then nothing is imported)."""
    if "opentelemetry.trace" not in sys.modules:
        return None
    try:
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
    except ImportError:  # a partial install: no context rather than no enqueue
        return None
    from runnerq_cli.backend.domain.traceparent import clean

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    return clean(carrier)


def from_environment(environ: Mapping[str, str]) -> dict[str, str] | None:
    """TRACEPARENT (and TRACESTATE) as a shell or a CI job passes them, or None."""
    parent = environ.get("TRACEPARENT")
    if parent is None:
        return None
    from runnerq_cli.backend.domain.traceparent import clean

    return clean({"traceparent": parent.strip(),
                  "tracestate": environ.get("TRACESTATE", "").strip()})
