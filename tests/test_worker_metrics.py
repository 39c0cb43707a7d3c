"""Worker metrics by RunnerQ's names (worker/metrics.py): a real Worker against the test
server, its PrometheusMetrics read back through prometheus_client's own exposition."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from runnerq_cli.worker import metrics as m
from runnerq_cli.worker.engine import Worker, WorkerEnd
from runnerq_cli.worker.metrics import NoopMetrics, PrometheusMetrics
from tests import worker_handlers
from tests.helpers import metric_value as value
from tests.helpers import metrics_parsed as parse


def run(backend, sink, **options) -> Worker:
    options.setdefault("burst", True)
    options.setdefault("poll_interval", 0.2)
    worker = Worker(backend, worker_handlers.registry, metrics=sink, **options)
    worker.run(install_signals=False)
    return worker


def families(sink: PrometheusMetrics):
    return parse(generate_latest(sink.registry).decode())


def test_outcomes_counted_by_queue_and_type_in_the_apps_registry(backend) -> None:
    registry = CollectorRegistry()  # the application's own
    sink = PrometheusMetrics(registry)
    backend.enqueue("echo", {"x": 1})
    backend.enqueue("echo", {"x": 2})
    backend.enqueue("fatal", {})
    backend.enqueue("boom", {}, max_retries=1)  # one attempt: its failure dead-letters it
    backend.enqueue("spawn", {})  # its child (an echo) is enqueued and run in the same burst
    assert run(backend, sink).end is WorkerEnd.STOPPED
    got = parse(generate_latest(registry).decode())
    q = backend.queue

    def count(name: str, **labels: str) -> float:
        return value(got[name.removesuffix("_total")], queue=q, **labels)

    assert count(m.ACTIVITY_STARTED, activity_type="echo") == 3
    assert count(m.ACTIVITY_COMPLETED, activity_type="echo") == 3
    assert count(m.ACTIVITY_FAILED_NON_RETRY, activity_type="fatal") == 1
    assert count(m.ACTIVITY_DEAD_LETTERED, activity_type="boom") == 1
    assert count(m.ACTIVITY_PANIC, activity_type="boom") == 1  # a RuntimeError: unexpected
    assert count(m.ACTIVITY_ENQUEUED, activity_type="echo") == 1
    assert count(m.WORKER_STARTED) == 1 and count(m.WORKER_STOPPED) == 1
    assert count(m.REAPER_TICK) >= 1  # burst mode sweeps once before it ends
    # Histograms: one execution and one queue latency per attempt, buckets as documented.
    execution = got[m.ACTIVITY_EXECUTION_DURATION]
    assert execution.type == "histogram"
    assert value(execution, queue=q, activity_type="echo", le="+Inf") == 3
    bounds = sorted({float(s.labels["le"]) for s in execution.samples if "le" in s.labels})
    assert bounds == [*m.BUCKETS[m.ACTIVITY_EXECUTION_DURATION], float("inf")]
    latency = got[m.ACTIVITY_QUEUE_LATENCY]
    assert value(latency, queue=q, activity_type="fatal", le="+Inf") == 1
    assert next(s for s in latency.samples if s.name.endswith("_sum")
            and s.labels["activity_type"] == "fatal").value >= 0
    dequeue = got[m.DEQUEUE_ROUNDTRIP_DURATION]
    assert value(dequeue, queue=q, le="+Inf") >= 1


def test_every_family_is_exposed_from_the_start_with_help_and_type() -> None:
    text = generate_latest(PrometheusMetrics().registry).decode()
    for name in m.COUNTERS:
        assert f"# TYPE {name} counter" in text, name
        assert f"# HELP {name} " in text, name
    for name in m.HISTOGRAMS:
        assert f"# TYPE {name} histogram" in text, name
    assert set(m.LABELS) == set(m.HELP)


def test_counters_only_go_up_across_runs(backend) -> None:
    sink = PrometheusMetrics()
    backend.enqueue("echo", {})
    run(backend, sink)
    first = value(families(sink)["runnerq_activity_completed"], activity_type="echo")
    backend.enqueue("echo", {})
    backend.enqueue("echo", {})
    run(backend, sink)  # a second worker in the same process, the same sink
    assert value(families(sink)["runnerq_activity_completed"], activity_type="echo") \
        == first + 2 == 3
    assert value(families(sink)["runnerq_worker_started"], queue=backend.queue) == 2
    # Every counter of a type seen starts at 0: sums and ratios have all their series.
    assert value(families(sink)["runnerq_activity_dead_lettered"], activity_type="echo") == 0
    assert value(families(sink)["runnerq_reaper_error"], queue=backend.queue) == 0


def test_timeout_counted_as_a_cause_and_by_its_outcome(backend) -> None:
    sink = PrometheusMetrics()
    backend.enqueue("async_sleep", {"seconds": 30}, timeout_seconds=1, max_retries=2)
    run(backend, sink, max_activities=1)
    got = families(sink)
    assert value(got["runnerq_activity_timeout"], activity_type="async_sleep") == 1
    assert value(got["runnerq_activity_retry"], activity_type="async_sleep") == 1


def test_saturation_and_slot_gauges(backend) -> None:
    sink = PrometheusMetrics()
    for _ in range(2):
        backend.enqueue("echo", {})
    run(backend, sink, concurrency=1)
    got = families(sink)
    assert value(got[m.WORKER_CONCURRENCY_SATURATED.removesuffix("_total")],
                 queue=backend.queue) == 2  # each attempt took the only slot
    # The gauges stop with the run: a worker that ended no longer counts its slots.
    assert got[m.WORKER_CONCURRENCY].samples == []


def test_sinks_by_protocol_the_noop_and_none(backend) -> None:
    class Recording:
        def __init__(self) -> None:
            self.counters: list[tuple[str, int, dict[str, str]]] = []
            self.durations: list[str] = []

        def inc_counter(self, name, value, labels) -> None:
            self.counters.append((name, value, dict(labels)))

        def observe_duration(self, name, seconds, labels) -> None:
            assert seconds >= 0
            self.durations.append(name)

    sink = Recording()
    backend.enqueue("echo", {})
    run(backend, sink)
    names = [name for name, _, _ in sink.counters]
    assert names.count(m.ACTIVITY_STARTED) == 1 and names.count(m.ACTIVITY_COMPLETED) == 1
    assert all(set(labels) == set(m.LABELS[name]) for name, _, labels in sink.counters)
    assert set(sink.durations) == set(m.HISTOGRAMS)
    backend.enqueue("echo", {})
    assert run(backend, NoopMetrics()).counters["succeeded"] == 1
    # No sink, no tracing (tracing=None would trace once the process uses OpenTelemetry,
    # as it does after tests/test_tracing.py): nothing is called.
    worker = Worker(backend, worker_handlers.registry, burst=True, tracing=False)
    assert worker._telemetry is None


@pytest.mark.parametrize("operation", ["dequeue"])
def test_backend_errors_counted_by_operation(backend, operation) -> None:
    from runnerq_cli.errors import Unavailable

    sink = PrometheusMetrics()
    worker = Worker(backend, worker_handlers.registry, metrics=sink, burst=True,
                    poll_interval=0.05)
    real = backend.dequeue
    calls = []

    def failing_once(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise Unavailable("MongoDB at localhost is away")
        return real(*args, **kwargs)

    backend.dequeue = failing_once  # the server away for one claim
    try:
        worker.run(install_signals=False)
    finally:
        del backend.dequeue
    got = families(sink)
    assert value(got["runnerq_backend_error"], queue=backend.queue, operation=operation) == 1
    assert value(got["runnerq_activity_dequeue_error"], queue=backend.queue) == 1


def test_an_applications_own_enqueues_are_counted_through_metered_enqueues(backend) -> None:
    """RunnerQ counts every enqueue through its engine; an application that enqueues
    outside a handler wraps its queue once (worker/metrics.py MeteredEnqueues)."""
    from runnerq_cli import ActivitySpec
    from runnerq_cli.errors import InvalidArgument
    from runnerq_cli.worker.metrics import MeteredEnqueues

    sink = PrometheusMetrics(CollectorRegistry())
    queue = MeteredEnqueues(backend, sink)
    queue.enqueue("mail", {"to": "a"}, idempotency_key="k1")
    queue.enqueue("mail", {"to": "a"}, idempotency_key="k1")  # the same one: not new
    with pytest.raises(InvalidArgument):
        queue.enqueue("mail", {"to": "a"}, priority=9)
    queue.enqueue("sms", {}, idempotency_key="k2")
    answers = queue.enqueue_many([ActivitySpec("sms", {}), ActivitySpec("sms", {}),
                                  ActivitySpec("sms", {}, idempotency_key="k2",
                                               on_duplicate="no-reuse")])  # refused alone
    assert not any(isinstance(a, Exception) for a in answers[:2])
    assert isinstance(answers[2], Exception)
    q = backend.queue

    def count(name: str, kind: str) -> float:
        return sink.registry.get_sample_value(name, {"queue": q, "activity_type": kind}) or 0

    assert count(m.ACTIVITY_ENQUEUED, "mail") == 1
    assert count(m.ACTIVITY_ENQUEUE_ERROR, "mail") == 1
    assert count(m.ACTIVITY_ENQUEUED, "sms") == 3  # k2's, then the two of the batch
    assert count(m.ACTIVITY_ENQUEUE_ERROR, "sms") == 1
    assert queue.get_activity(answers[0].activity_id).activity_type == "sms"  # the queue's own
