"""Worker metrics by RunnerQ's names: the `MetricsSink` protocol, a no-op and Prometheus.

RunnerQ's engine (the Rust crate `runner_q`, src/runner/runner.rs) reports through a
`MetricsSink` trait of two methods, `inc_counter(name, value)` and
`observe_duration(name, duration)`, and names its metrics in src/runner/metrics.rs
(`runnerq_activity_completed_total`, ...). Ours has the same two methods and the same
names, plus the labels Prometheus needs to tell queues and activity types apart:
`inc_counter(name, value, labels)`, `observe_duration(name, seconds, labels)`. Which
labels each metric carries is `LABELS`; the names RunnerQ has no counterpart for
(`runnerq_activity_claim_lost_total`, ...) follow its pattern.

An application passes any object with those two methods as `Worker(metrics=...)`;
`PrometheusMetrics(registry)` is the ready one, registered in the application's own
`CollectorRegistry` (`prometheus_client`, imported only when one is made), and
`worker --metrics-port` serves one of its own. The default is no sink at all: nothing is
called, nothing costs (worker/telemetry.py). Counters count per process from 0 and only
go up; `rate()` and `increase()` handle a restart. The attempts' outcome counters
(completed, retry, failed_non_retry, dead_lettered, claim_lost, released,
unacknowledged) partition the attempts that ended; timeout, panic and
handler_not_found count a cause, and the same attempt is counted by its outcome too.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from prometheus_client.registry import CollectorRegistry

    from runnerq_cli.backend.domain.models import EnqueueResult
    from runnerq_cli.backend.domain.specs import ActivitySpec
    from runnerq_cli.backend.traits import QueueBackend

__all__ = ["BUCKETS", "LABELS", "MeteredEnqueues", "MetricsSink", "NoopMetrics",
           "PrometheusMetrics"]

# ------------------------------------------------- RunnerQ's names (src/runner/metrics.rs)

ACTIVITY_ENQUEUED = "runnerq_activity_enqueued_total"
ACTIVITY_STARTED = "runnerq_activity_started_total"
ACTIVITY_COMPLETED = "runnerq_activity_completed_total"
ACTIVITY_RETRY = "runnerq_activity_retry_total"
ACTIVITY_FAILED_NON_RETRY = "runnerq_activity_failed_non_retry_total"
ACTIVITY_TIMEOUT = "runnerq_activity_timeout_total"
ACTIVITY_DEAD_LETTERED = "runnerq_activity_dead_lettered_total"
ACTIVITY_PANIC = "runnerq_activity_panic_total"
ACTIVITY_HANDLER_NOT_FOUND = "runnerq_activity_handler_not_found_total"
ACTIVITY_ENQUEUE_ERROR = "runnerq_activity_enqueue_error_total"
ACTIVITY_DEQUEUE_ERROR = "runnerq_activity_dequeue_error_total"
RESULT_STORE_ERROR = "runnerq_activity_result_store_error_total"
BACKEND_ERROR = "runnerq_backend_error_total"
WORKER_STARTED = "runnerq_worker_started_total"
WORKER_STOPPED = "runnerq_worker_stopped_total"
WORKER_CONCURRENCY_SATURATED = "runnerq_worker_concurrency_saturated_total"
SCHEDULER_TICK = "runnerq_scheduler_tick_total"
SCHEDULER_POLL_ERROR = "runnerq_scheduler_poll_error_total"
REAPER_TICK = "runnerq_reaper_tick_total"
REAPER_ERROR = "runnerq_reaper_error_total"
ACTIVITY_EXECUTION_DURATION = "runnerq_activity_execution_seconds"
ACTIVITY_QUEUE_LATENCY = "runnerq_activity_queue_latency_seconds"
DEQUEUE_ROUNDTRIP_DURATION = "runnerq_dequeue_roundtrip_seconds"

# ------------------------------------------- ours: outcomes RunnerQ's engine does not have

ACTIVITY_CLAIM_LOST = "runnerq_activity_claim_lost_total"
ACTIVITY_RELEASED = "runnerq_activity_released_total"
ACTIVITY_UNACKNOWLEDGED = "runnerq_activity_unacknowledged_total"
ACTIVITY_THROTTLED = "runnerq_activity_throttled_total"
# Gauges read at scrape time (PrometheusMetrics.track): no cost per activity.
WORKER_IN_FLIGHT = "runnerq_worker_in_flight"
WORKER_CONCURRENCY = "runnerq_worker_concurrency"

ACTIVITY = ("queue", "activity_type")
QUEUE = ("queue",)
# Each metric's labels, in order. `operation` is the backend call that failed (dequeue,
# ack_success_many, ack_failure, extend_lease, release, process_scheduled, ...).
LABELS: dict[str, tuple[str, ...]] = {
    ACTIVITY_ENQUEUED: ACTIVITY, ACTIVITY_STARTED: ACTIVITY, ACTIVITY_COMPLETED: ACTIVITY,
    ACTIVITY_RETRY: ACTIVITY, ACTIVITY_FAILED_NON_RETRY: ACTIVITY, ACTIVITY_TIMEOUT: ACTIVITY,
    ACTIVITY_DEAD_LETTERED: ACTIVITY, ACTIVITY_PANIC: ACTIVITY,
    ACTIVITY_HANDLER_NOT_FOUND: ACTIVITY, ACTIVITY_ENQUEUE_ERROR: ACTIVITY,
    ACTIVITY_CLAIM_LOST: ACTIVITY, ACTIVITY_RELEASED: ACTIVITY,
    ACTIVITY_UNACKNOWLEDGED: ACTIVITY, RESULT_STORE_ERROR: ACTIVITY, ACTIVITY_THROTTLED: ACTIVITY,
    ACTIVITY_DEQUEUE_ERROR: QUEUE, BACKEND_ERROR: ("queue", "operation"),
    WORKER_STARTED: QUEUE, WORKER_STOPPED: QUEUE, WORKER_CONCURRENCY_SATURATED: QUEUE,
    SCHEDULER_TICK: QUEUE, SCHEDULER_POLL_ERROR: QUEUE, REAPER_TICK: QUEUE, REAPER_ERROR: QUEUE,
    ACTIVITY_EXECUTION_DURATION: ACTIVITY, ACTIVITY_QUEUE_LATENCY: ACTIVITY,
    DEQUEUE_ROUNDTRIP_DURATION: QUEUE,
}
HISTOGRAMS = (ACTIVITY_EXECUTION_DURATION, ACTIVITY_QUEUE_LATENCY, DEQUEUE_ROUNDTRIP_DURATION)
COUNTERS = tuple(name for name in LABELS if name not in HISTOGRAMS)

# Histogram buckets (upper bounds, seconds; +Inf is added). Execution: an activity's
# default timeout is 300 s and most run well under a second. Queue latency: from due to
# claimed, milliseconds on an idle queue, hours in a backlog. Dequeue: one claim command.
BUCKETS: dict[str, tuple[float, ...]] = {
    ACTIVITY_EXECUTION_DURATION: (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                                  10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0),
    ACTIVITY_QUEUE_LATENCY: (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                             60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 21600.0, 86400.0),
    DEQUEUE_ROUNDTRIP_DURATION: (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                 1.0, 2.5, 5.0, 10.0),
}

HELP = {
    ACTIVITY_ENQUEUED: "Activities enqueued (new ones, not an idempotency key's repeat) by "
                       "handlers through ctx.enqueue, and by the application through "
                       "MeteredEnqueues.",
    ACTIVITY_STARTED: "Attempts started (claimed and handed to a handler).",
    ACTIVITY_COMPLETED: "Attempts that completed their activity.",
    ACTIVITY_RETRY: "Attempts that failed and left the activity to be retried.",
    ACTIVITY_FAILED_NON_RETRY: "Attempts that failed their activity for good "
                               "(non-retryable).",
    ACTIVITY_TIMEOUT: "Attempts that ran past the activity's timeout (also counted by "
                      "outcome).",
    ACTIVITY_DEAD_LETTERED: "Attempts whose failure dead-lettered the activity (no "
                            "attempts left).",
    ACTIVITY_PANIC: "Attempts whose handler raised an unexpected exception (neither "
                    "RetryableError nor NonRetryableError; also counted by outcome).",
    ACTIVITY_HANDLER_NOT_FOUND: "Attempts of a type without a handler (also counted by "
                                "outcome).",
    ACTIVITY_ENQUEUE_ERROR: "Enqueues that raised or were refused (ctx.enqueue, "
                            "MeteredEnqueues).",
    ACTIVITY_DEQUEUE_ERROR: "Claims (dequeue) that failed.",
    RESULT_STORE_ERROR: "Results the server refused to store (the attempt then fails "
                        "non-retryably, saying why).",
    BACKEND_ERROR: "Backend calls that failed (server away, driver errors), by operation.",
    WORKER_STARTED: "Worker runs started in this process.",
    WORKER_STOPPED: "Worker runs ended in this process.",
    WORKER_CONCURRENCY_SATURATED: "Times every slot became busy (an attempt took the last "
                                  "free one).",
    SCHEDULER_TICK: "Scheduler passes (scheduled activities made due) run by this worker.",
    SCHEDULER_POLL_ERROR: "Scheduler passes that failed.",
    REAPER_TICK: "Reaper passes (expired leases requeued) run by this worker.",
    REAPER_ERROR: "Reaper passes that failed.",
    ACTIVITY_CLAIM_LOST: "Attempts whose claim was lost (another worker holds the "
                         "activity; the outcome was dropped).",
    ACTIVITY_RELEASED: "Attempts handed back at shutdown.",
    ACTIVITY_UNACKNOWLEDGED: "Attempts whose outcome could not be written (the reaper "
                             "requeues them when the lease runs out).",
    ACTIVITY_THROTTLED: "Claims of a limited type put off by its flow limit: the type's "
                        "concurrency or rate, or a key's, was full (docs/design.md, "
                        "\"Flow control\").",
    ACTIVITY_EXECUTION_DURATION: "Time from claim to outcome known, per attempt.",
    ACTIVITY_QUEUE_LATENCY: "Time from due to claimed (server's clock: started_at minus "
                            "scheduled_at, else created_at), per attempt.",
    DEQUEUE_ROUNDTRIP_DURATION: "Time one claim command (dequeue) took.",
}

Labels = Mapping[str, str]


class MetricsSink(Protocol):
    """RunnerQ's `MetricsSink`, with labels: what a worker reports, and where.

    Called from the worker's threads, concurrently: an implementation must be
    thread-safe, and quick (it runs on the attempt's path). `name` is one of `LABELS`'s;
    `labels` maps each of that metric's label names to its value.
    """

    def inc_counter(self, name: str, value: int, labels: Labels) -> None:
        """Add `value` to the counter `name`."""

    def observe_duration(self, name: str, seconds: float, labels: Labels) -> None:
        """Record a duration in the histogram `name`."""


class NoopMetrics:
    """Discards everything (RunnerQ's `NoopMetrics`). A worker without a sink calls
    nothing at all; this is for code that wants a sink object anyway."""

    def inc_counter(self, name: str, value: int, labels: Labels) -> None:
        pass

    def observe_duration(self, name: str, seconds: float, labels: Labels) -> None:
        pass


class PrometheusMetrics:
    """Every worker metric as a `prometheus_client` Counter or Histogram in `registry`
    (default: a registry of its own, `self.registry`), created at once so each family
    is exposed from the first scrape (its series appear with their first labels).

    `track(worker)` adds the worker's in-flight and concurrency gauges, read at scrape
    time. Register it in your application's registry:

        from prometheus_client import CollectorRegistry
        registry = CollectorRegistry()
        metrics = PrometheusMetrics(registry)
        Worker(backend, handlers, metrics=metrics)
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        from prometheus_client import Counter, Histogram
        from prometheus_client.registry import CollectorRegistry

        self.registry = registry if registry is not None else CollectorRegistry()
        self._metrics: dict[str, Any] = {}
        for name in COUNTERS:
            # prometheus_client adds `_total` itself: it is given the name without it.
            self._metrics[name] = Counter(name.removesuffix("_total"), HELP[name],
                                          LABELS[name], registry=self.registry)
        for name in HISTOGRAMS:
            self._metrics[name] = Histogram(name, HELP[name], LABELS[name],
                                            buckets=BUCKETS[name], registry=self.registry)
        self._children: dict[tuple[str, tuple[str, ...]], Any] = {}
        self._lock = threading.Lock()
        self._tracked: list[tuple[str, Callable[[], int], int]] = []
        self._gauges_registered = False

    def _child(self, name: str, labels: Labels) -> Any:
        values = tuple(map(labels.__getitem__, LABELS[name]))  # no generator: the hot path
        child = self._children.get((name, values))
        if child is None:
            with self._lock:
                self._first_seen(LABELS[name], values)
                child = self._metrics[name].labels(*values)
                self._children[(name, values)] = child
        return child

    def _first_seen(self, keys: tuple[str, ...], values: tuple[str, ...]) -> None:
        """A queue (or a queue's activity type) seen for the first time: every counter of
        the same labels starts at 0 now, so sums and ratios of several counters
        (docs/diagnose.md's alerts) have each of their series from the start."""
        for name in COUNTERS:
            if LABELS[name] == keys and (name, values) not in self._children:
                self._children[(name, values)] = self._metrics[name].labels(*values)

    def inc_counter(self, name: str, value: int, labels: Labels) -> None:
        self._child(name, labels).inc(value)

    def observe_duration(self, name: str, seconds: float, labels: Labels) -> None:
        self._child(name, labels).observe(seconds)

    def track(self, queue: str, in_flight: Callable[[], int],
              concurrency: int) -> Callable[[], None]:
        """Expose `runnerq_worker_in_flight` and `runnerq_worker_concurrency` for a worker
        of `queue` (summed over the workers tracked): saturation is their ratio. Returns
        the function that stops tracking it (the worker calls it when its run ends)."""
        entry = (queue, in_flight, concurrency)
        with self._lock:
            first = not self._gauges_registered
            self._gauges_registered = True
            self._tracked.append(entry)
        if first:
            self.registry.register(_WorkerGauges(self._tracked))

        def untrack() -> None:
            with self._lock:
                if entry in self._tracked:
                    self._tracked.remove(entry)

        return untrack


class _WorkerGauges:
    """The tracked workers' slots, at scrape time."""

    def __init__(self, tracked: list[tuple[str, Callable[[], int], int]]) -> None:
        self._tracked = tracked

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        busy = GaugeMetricFamily(WORKER_IN_FLIGHT, "Attempts running now in this process.",
                                 labels=["queue"])
        slots = GaugeMetricFamily(WORKER_CONCURRENCY, "Handler slots (concurrency) in this "
                                  "process.", labels=["queue"])
        totals: dict[str, list[int]] = {}
        for queue, in_flight, concurrency in list(self._tracked):
            total = totals.setdefault(queue, [0, 0])
            total[0] += in_flight()
            total[1] += concurrency
        for queue, (running, size) in sorted(totals.items()):
            busy.add_metric([queue], running)
            slots.add_metric([queue], size)
        yield busy
        yield slots

    def describe(self) -> Iterator[Any]:
        return iter(())


class MeteredEnqueues:
    """An application's own enqueues, counted as a worker counts its handlers' (RunnerQ
    counts every enqueue through its engine): `runnerq_activity_enqueued_total` for each
    new activity, `runnerq_activity_enqueue_error_total` for each one that raised or that
    `enqueue_many` answered with an error. A web process that only enqueues wraps its queue
    once, `MeteredEnqueues(connect(...), PrometheusMetrics(registry))`, and calls
    `enqueue` and `enqueue_many` on it; anything else is the queue's own attribute."""

    def __init__(self, queue: QueueBackend, metrics: MetricsSink) -> None:
        self._queue = queue
        self._metrics = metrics
        self._queue_name = queue.queue

    def __getattr__(self, name: str) -> Any:
        return getattr(self._queue, name)

    def _count(self, name: str, spec: str | ActivitySpec) -> None:
        kind = getattr(spec, "activity_type", spec)
        self._metrics.inc_counter(name, 1, {"queue": self._queue_name,
                                            "activity_type": str(kind)})

    def enqueue(self, activity_type: str | ActivitySpec,
                payload: Mapping[str, Any] | None = None, **options: Any) -> EnqueueResult:
        try:
            result = self._queue.enqueue(activity_type, payload, **options)
        except BaseException:  # whatever stopped it (as the worker's ctx.enqueue counted)
            self._count(ACTIVITY_ENQUEUE_ERROR, activity_type)
            raise
        if result.created:
            self._count(ACTIVITY_ENQUEUED, activity_type)
        return result

    def enqueue_many(self, specs: Sequence[ActivitySpec]) -> list[EnqueueResult | Exception]:
        specs = list(specs)
        try:
            results = self._queue.enqueue_many(specs)
        except BaseException:
            for spec in specs:
                self._count(ACTIVITY_ENQUEUE_ERROR, spec)
            raise
        for spec, result in zip(specs, results, strict=True):
            if isinstance(result, Exception):
                self._count(ACTIVITY_ENQUEUE_ERROR, spec)
            elif result.created:
                self._count(ACTIVITY_ENQUEUED, spec)
        return results
