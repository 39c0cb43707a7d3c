"""What a worker reports about its attempts: metrics to a `MetricsSink`, spans to a tracer.

Two hooks in the engine and nothing else: `attempt(flight)` where an attempt starts
(claiming.py, `_begin`) and `AttemptWatch.ended(outcome)` where its outcome is known
(outcomes.py, `log_attempt`, which every settled attempt goes through, and `_give_up`).
The slot running the handler enters the attempt's span (`enter`/`leave`), so the
handler's own spans and the activities it enqueues continue the trace. The backend's
calls (claims, acknowledgements, the scheduler and reaper passes) are counted and timed
by wrapping the backend (`InstrumentedBackend`), not by hooks in the engine.

With neither metrics nor tracing, the worker makes no `Telemetry` at all: each hook is
one `is None` test (benchmarks/README.md: the cost). Tracing is on when the process
already uses OpenTelemetry (`opentelemetry.trace` imported) unless the caller says
otherwise; worker/tracing.py, which imports OpenTelemetry, is loaded only then.

An asyncio worker can use the same parts: `Telemetry.attempt` for each attempt it
starts, `ended` when its outcome is known, and an `InstrumentedBackend` (or the same
`backend_call` accounting) around its backend.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from runnerq_cli.errors import (
    CheckpointConflict,
    ClaimLost,
    RunnerQError,
    Unavailable,
    WriteUnconfirmed,
)
from runnerq_cli.worker import metrics as m

if TYPE_CHECKING:
    from runnerq_cli.backend.domain.documents import Claim
    from runnerq_cli.backend.traits import WorkerBackend
    from runnerq_cli.worker.flights import Flight
    from runnerq_cli.worker.metrics import MetricsSink
    from runnerq_cli.worker.tracing import AttemptTracer

__all__ = ["AttemptWatch", "InstrumentedBackend", "Telemetry", "tracing_wanted"]

# The outcome names log_attempt is given, as their counters.
OUTCOME_METRICS = {
    "completed": m.ACTIVITY_COMPLETED, "retrying": m.ACTIVITY_RETRY,
    "failed": m.ACTIVITY_FAILED_NON_RETRY, "dead_lettered": m.ACTIVITY_DEAD_LETTERED,
    "claim_lost": m.ACTIVITY_CLAIM_LOST, "released": m.ACTIVITY_RELEASED,
    "unacknowledged": m.ACTIVITY_UNACKNOWLEDGED,
}
# Causes an attempt's handler run records on its flight (execute.py), as their counters.
FAULT_METRICS = {"timeout": m.ACTIVITY_TIMEOUT, "panic": m.ACTIVITY_PANIC,
                 "handler_not_found": m.ACTIVITY_HANDLER_NOT_FOUND}


def tracing_wanted(tracing: bool | None) -> bool:
    """`tracing` as asked; None: on when the process already uses OpenTelemetry."""
    return "opentelemetry.trace" in sys.modules if tracing is None else tracing


def backend_error(exc: BaseException) -> bool:
    """A failure of the backend (the server away, a driver error), not one of the
    domain's answers (ClaimLost, InvalidArgument, DuplicateKey, ...)."""
    return isinstance(exc, Unavailable | WriteUnconfirmed) or not isinstance(exc, RunnerQError)


class Telemetry:
    """One worker's reporting: its sink (or None), its tracer (or None), its queue."""

    def __init__(self, sink: MetricsSink | None, tracer: AttemptTracer | None, *,
                 queue: str, concurrency: int, running: Callable[[], int]) -> None:
        self.sink = sink
        self.tracer = tracer
        self.queue = queue
        self.queue_labels = {"queue": queue}
        self._concurrency = concurrency
        self._running = running

    @classmethod
    def make(cls, sink: MetricsSink | None, tracing: bool | None, tracer_provider: Any, *,
             queue: str, concurrency: int, running: Callable[[], int]) -> Telemetry | None:
        """The worker's telemetry, or None when it reports nothing (no cost at all)."""
        tracer = None
        if tracer_provider is not None or tracing_wanted(tracing):
            from runnerq_cli.worker.tracing import AttemptTracer

            tracer = AttemptTracer(queue, tracer_provider)
        if sink is None and tracer is None:
            return None
        return cls(sink, tracer, queue=queue, concurrency=concurrency, running=running)

    def count(self, name: str, labels: Mapping[str, str], value: int = 1) -> None:
        if self.sink is not None:
            self.sink.inc_counter(name, value, labels)

    def attempt(self, flight: Flight) -> AttemptWatch:
        """An attempt starts: count it, its queue latency, its span; its watch."""
        act = flight.claim.activity
        labels = {"queue": self.queue, "activity_type": act.activity_type}
        sink = self.sink
        if sink is not None:
            sink.inc_counter(m.ACTIVITY_STARTED, 1, labels)
            if act.started_at is not None:
                due = act.scheduled_at or act.created_at
                sink.observe_duration(m.ACTIVITY_QUEUE_LATENCY,
                                      max(0.0, (act.started_at - due).total_seconds()), labels)
            if self._running() >= self._concurrency:
                sink.inc_counter(m.WORKER_CONCURRENCY_SATURATED, 1, self.queue_labels)
        span = self.tracer.start(flight) if self.tracer is not None else None
        return AttemptWatch(self, flight, labels, span)

    def backend(self, backend: WorkerBackend) -> WorkerBackend:
        """The backend, its calls counted and timed (the backend itself without a sink)."""
        if self.sink is None:
            return backend
        return cast("WorkerBackend", InstrumentedBackend(backend, self))


class AttemptWatch:
    """One attempt's labels and span, until its outcome is known (`ended`, once)."""

    __slots__ = ("_flight", "_labels", "_span", "_telemetry", "done")

    def __init__(self, telemetry: Telemetry, flight: Flight, labels: dict[str, str],
                 span: Any) -> None:
        self._telemetry = telemetry
        self._flight = flight
        self._labels = labels
        self._span = span
        self.done = False

    def enter(self) -> Any:
        """Make the attempt's span current in this thread (the handler's); for `leave`."""
        tracer = self._telemetry.tracer
        return None if tracer is None or self._span is None else tracer.enter(self._span)

    def leave(self, token: Any) -> None:
        tracer = self._telemetry.tracer
        if tracer is not None and token is not None:
            tracer.leave(token)

    def ended(self, outcome: str) -> None:
        """The attempt's outcome (log_attempt's names, or "unacknowledged")."""
        if self.done:
            return
        self.done = True
        flight = self._flight
        sink = self._telemetry.sink
        if sink is not None:
            name = OUTCOME_METRICS.get(outcome)
            if name is not None:
                sink.inc_counter(name, 1, self._labels)
            fault = FAULT_METRICS.get(flight.fault)
            if fault is not None:
                sink.inc_counter(fault, 1, self._labels)
            took = (flight.finished or time.monotonic()) - flight.started
            sink.observe_duration(m.ACTIVITY_EXECUTION_DURATION, max(0.0, took), self._labels)
        tracer = self._telemetry.tracer
        if tracer is not None and self._span is not None:
            tracer.end(self._span, outcome, flight.fault)


class InstrumentedBackend:
    """A worker's backend with its calls counted: claims timed, failures counted by
    operation, the scheduler's and reaper's passes, results the server refused. Every
    other attribute is the backend's own."""

    def __init__(self, backend: WorkerBackend, telemetry: Telemetry) -> None:
        self._backend = backend
        self._t = telemetry
        # ctx.enqueue counted as an application's own enqueues are (metrics.py), when
        # there is a sink (telemetry may be tracing alone)
        self._enqueues: Any = backend if telemetry.sink is None else m.MeteredEnqueues(
            backend, telemetry.sink)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    def _failed(self, operation: str, exc: BaseException) -> None:
        if backend_error(exc):
            self._t.count(m.BACKEND_ERROR, {"queue": self._t.queue, "operation": operation})

    def dequeue(self, worker_id: str, **kwargs: Any) -> list[Claim]:
        started = time.perf_counter()
        try:
            claims = self._backend.dequeue(worker_id, **kwargs)
        except BaseException as exc:
            self._t.count(m.ACTIVITY_DEQUEUE_ERROR, self._t.queue_labels)
            self._failed("dequeue", exc)
            raise
        sink = self._t.sink
        if sink is not None:
            sink.observe_duration(m.DEQUEUE_ROUNDTRIP_DURATION, time.perf_counter() - started,
                                  self._t.queue_labels)
            for kind, n in self._backend.flow_throttled().items():  # no command: counted
                sink.inc_counter(m.ACTIVITY_THROTTLED, n,
                                 {"queue": self._t.queue, "activity_type": kind})
        return claims

    def ack_success_many(self, acks: Sequence[tuple[Claim, Any]]) -> list[Any]:
        try:
            answers: list[Any] = self._backend.ack_success_many(acks)
        except BaseException as exc:
            self._failed("ack_success_many", exc)
            raise
        for (claim, _result), answer in zip(acks, answers, strict=False):
            if not isinstance(answer, Exception):
                continue
            if backend_error(answer):
                self._failed("ack_success_many", answer)
            elif not isinstance(answer, ClaimLost | CheckpointConflict):
                self._t.count(m.RESULT_STORE_ERROR, {
                    "queue": self._t.queue, "activity_type": claim.activity.activity_type})
        return answers

    def _call(self, operation: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except BaseException as exc:
            self._failed(operation, exc)
            raise

    # Passed through as called: the backend's own defaults stay the defaults.
    def ack_failure(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("ack_failure", self._backend.ack_failure, *args, **kwargs)

    def extend_lease(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("extend_lease", self._backend.extend_lease, *args, **kwargs)

    def release(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("release", self._backend.release, *args, **kwargs)

    def flush_outbox(self) -> Any:
        return self._call("flush_outbox", self._backend.flush_outbox)

    def enqueue(self, activity_type: Any, payload: Mapping[str, Any] | None = None,
                **options: Any) -> Any:
        """ctx.enqueue: a handler's follow-up activity, counted (MeteredEnqueues)."""
        try:
            return self._enqueues.enqueue(activity_type, payload, **options)
        except BaseException as exc:
            self._failed("enqueue", exc)
            raise

    def process_scheduled(self, *args: Any, **kwargs: Any) -> Any:
        return self._tick("process_scheduled", m.SCHEDULER_TICK, m.SCHEDULER_POLL_ERROR,
                          self._backend.process_scheduled, *args, **kwargs)

    def requeue_expired(self, *args: Any, **kwargs: Any) -> Any:
        return self._tick("requeue_expired", m.REAPER_TICK, m.REAPER_ERROR,
                          self._backend.requeue_expired, *args, **kwargs)

    def _tick(self, operation: str, tick: str, error: str, fn: Callable[..., Any],
              *args: Any, **kwargs: Any) -> Any:
        try:
            out = fn(*args, **kwargs)
        except BaseException as exc:
            self._t.count(error, self._t.queue_labels)
            self._failed(operation, exc)
            raise
        self._t.count(tick, self._t.queue_labels)
        return out

