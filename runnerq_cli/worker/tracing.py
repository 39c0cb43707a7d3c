"""Each attempt as an OpenTelemetry span, a child of the trace that enqueued it.

Imported only when tracing is on (worker/telemetry.py): it imports the OpenTelemetry API
(`pip install 'runnerq-mongo[otel]'`). The activity's stored `trace_context`
(docs/design.md, "Trace context") is the span's parent, so the handler's span is in
the trace of the web request (or the job) that enqueued it. A child rather than a
link: with only a link the handler would start a trace of its own and the request's
trace would end at the enqueue, the very gap this closes; a link is what a batch of
many producers needs, and an attempt runs one activity. Each attempt (a retry too) is
its own child of the same enqueue. A missing or malformed context starts a new trace.

Span: `process <activity type>`, kind CONSUMER, from the claim to the outcome;
attributes `runnerq.activity.id`, `runnerq.activity.type`, `runnerq.attempt`,
`runnerq.queue`, `runnerq.outcome` (log_attempt's outcome names, or `unacknowledged`)
and `runnerq.fault` (timeout, panic, handler_not_found) when there was one, plus the
messaging conventions' `messaging.system`, `messaging.destination.name`,
`messaging.message.id`. A failure's status is ERROR.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from runnerq_cli.backend.domain.tracecontext import FIELD
from runnerq_cli.backend.domain.traceparent import clean
from runnerq_cli.version import __version__

if TYPE_CHECKING:
    from runnerq_cli.worker.flights import Flight

# The outcomes that are not a failure of the attempt.
OK_OUTCOMES = {"completed", "released"}


class AttemptTracer:
    """Starts and ends the spans of one worker's attempts."""

    def __init__(self, queue: str, tracer_provider: Any = None) -> None:
        self._queue = queue
        self._tracer = trace.get_tracer("runnerq_cli.worker", __version__,
                                        tracer_provider=tracer_provider)
        self._propagator = TraceContextTextMapPropagator()

    def start(self, flight: Flight) -> Any:
        act = flight.claim.activity
        stored = clean(act.extra.get(FIELD))  # a bad one: a new trace (design.md)
        parent = self._propagator.extract(stored) if stored else None
        return self._tracer.start_span(
            f"process {act.activity_type}", context=parent, kind=trace.SpanKind.CONSUMER,
            attributes={"runnerq.activity.id": str(act.id),
                        "runnerq.activity.type": act.activity_type,
                        "runnerq.attempt": act.retry_count + 1,
                        "runnerq.queue": self._queue,
                        "messaging.system": "runnerq",
                        "messaging.destination.name": self._queue,
                        "messaging.message.id": str(act.id)})

    def enter(self, span: Any) -> Any:
        return otel_context.attach(trace.set_span_in_context(span))

    def leave(self, token: Any) -> None:
        otel_context.detach(token)

    def end(self, span: Any, outcome: str, fault: str) -> None:
        span.set_attribute("runnerq.outcome", outcome)
        if fault:
            span.set_attribute("runnerq.fault", fault)
        if outcome not in OK_OUTCOMES:
            span.set_status(trace.Status(trace.StatusCode.ERROR, outcome))
        span.end()
