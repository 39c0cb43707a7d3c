"""Trace context from enqueue to handler (docs/design.md, "Trace context"): the
OpenTelemetry SDK's in-memory exporter sees each attempt's span in the trace that
enqueued it; a bad stored context is ignored, never an error; without OpenTelemetry
nothing of it is imported."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from runnerq_cli.backend.domain import tracecontext, traceparent
from runnerq_cli.backend.domain.models import Status
from runnerq_cli.worker.engine import Worker
from runnerq_cli.worker.handlers import HandlerRegistry
from tests import worker_handlers

trace = pytest.importorskip("opentelemetry.trace")  # the [otel] extra (in [test])
sdk_trace = pytest.importorskip("opentelemetry.sdk.trace")
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture
def spans():
    """A tracer provider of the test's own (the global one is left alone) and its spans."""
    exporter = InMemorySpanExporter()
    provider = sdk_trace.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def run(backend, provider, registry=None) -> Worker:
    worker = Worker(backend, registry or worker_handlers.registry, burst=True,
                    poll_interval=0.2, tracer_provider=provider)
    worker.run(install_signals=False)
    return worker


def stored(backend, aid):
    return backend.db[backend.context.names.activities].find_one({"_id": aid}).get(
        tracecontext.FIELD)


def test_the_handlers_span_is_in_the_trace_that_enqueued_it(backend, spans) -> None:
    provider, exporter = spans
    tracer = provider.get_tracer("the web app")
    inner = []
    registry = HandlerRegistry()

    @registry.handler("resize")
    def resize(payload, ctx):
        with trace.get_tracer("handler code").start_as_current_span("inside"):
            inner.append(1)
        return {"ok": True}

    with tracer.start_as_current_span("POST /images") as request:
        aid = backend.enqueue("resize", {}).activity_id
    request_ctx = request.get_span_context()
    context = stored(backend, aid)
    assert context["traceparent"] == (f"00-{request_ctx.trace_id:032x}-"
                                      f"{request_ctx.span_id:016x}-"
                                      f"{int(request_ctx.trace_flags):02x}")
    # The handler's own spans go to the global provider (a no-op here); the attempt's span
    # is the current one while it runs, so they would nest under it.
    run(backend, provider, registry)
    assert backend.get_activity(aid).status == Status.COMPLETED and inner
    [attempt] = [s for s in exporter.get_finished_spans() if s.name == "process resize"]
    assert attempt.context.trace_id == request_ctx.trace_id
    assert attempt.parent.span_id == request_ctx.span_id  # a child of the enqueue's span
    assert attempt.kind is trace.SpanKind.CONSUMER
    assert dict(attempt.attributes) == {
        "runnerq.activity.id": str(aid), "runnerq.activity.type": "resize",
        "runnerq.attempt": 1, "runnerq.queue": backend.queue, "runnerq.outcome": "completed",
        "messaging.system": "runnerq", "messaging.destination.name": backend.queue,
        "messaging.message.id": str(aid)}
    assert attempt.status.is_ok


def test_follow_up_work_and_failures_stay_in_the_trace(backend, spans) -> None:
    provider, exporter = spans
    with provider.get_tracer("app").start_as_current_span("job") as job:
        backend.enqueue("spawn", {})  # its handler enqueues an echo through ctx.enqueue
        backend.enqueue("fatal", {})
    run(backend, provider)
    by_name = {s.name: s for s in exporter.get_finished_spans()}
    trace_id = job.get_span_context().trace_id
    assert {by_name[n].context.trace_id for n in
            ("process spawn", "process echo", "process fatal")} == {trace_id}
    # The child activity's parent is the attempt that enqueued it.
    assert by_name["process echo"].parent.span_id == by_name["process spawn"].context.span_id
    fatal = by_name["process fatal"]
    assert fatal.attributes["runnerq.outcome"] == "failed"
    assert fatal.status.status_code is trace.StatusCode.ERROR


def test_a_shell_handler_gets_the_attempts_traceparent(backend, spans) -> None:
    from runnerq_cli.worker.api import build_registry

    provider, exporter = spans
    registry = build_registry(commands={"sh": "printenv TRACEPARENT"}, queue=backend.queue)
    with provider.get_tracer("app").start_as_current_span("job"):
        aid = backend.enqueue("sh", {}).activity_id
    run(backend, provider, registry)
    [attempt] = [s for s in exporter.get_finished_spans() if s.name == "process sh"]
    ctx = attempt.context
    assert backend.get_result(aid).data.strip() == (
        f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}")


@pytest.mark.parametrize("bad", [
    42, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    {"traceparent": "zz"}, {"traceparent": "00-" + "0" * 32 + "-b7ad6b7169203331-01"},
    {"traceparent": PARENT.upper()}, {"tracestate": "a=b"}, {"traceparent": ["x"]},
])
def test_a_bad_stored_context_is_ignored_not_malformed(backend, spans, bad) -> None:
    provider, exporter = spans
    aid = backend.enqueue("echo", {}, trace_context={}).activity_id
    assert stored(backend, aid) is None  # {}: none asked for
    backend.db[backend.context.names.activities].update_one(
        {"_id": aid}, {"$set": {tracecontext.FIELD: bad}})
    assert backend.get_activity(aid).status == Status.PENDING  # not malformed
    run(backend, provider)
    assert backend.get_activity(aid).status == Status.COMPLETED
    [attempt] = exporter.get_finished_spans()
    assert attempt.parent is None  # a new trace


def test_clean_keeps_what_w3c_allows() -> None:
    assert traceparent.clean({"traceparent": PARENT}) == {"traceparent": PARENT}
    assert traceparent.clean({"traceparent": PARENT, "tracestate": "congo=t61rcWkgMzE"}) == {
        "traceparent": PARENT, "tracestate": "congo=t61rcWkgMzE"}
    # A later version may carry more fields; version ff never is valid.
    assert traceparent.clean({"traceparent": "01-" + PARENT[3:] + "-what-next"})
    assert traceparent.clean({"traceparent": "ff-" + PARENT[3:]}) is None
    assert traceparent.clean({"traceparent": PARENT + "-x"}) is None
    assert traceparent.clean({"traceparent": PARENT[:-3] + "-0100"}) is None
    # A bad tracestate alone is dropped, the traceparent kept.
    for state in ("x" * 513, "caf\u00e9=1", "  ", 7):
        assert traceparent.clean({"traceparent": PARENT, "tracestate": state}) == {
            "traceparent": PARENT}
    assert tracecontext.from_environment({"TRACEPARENT": f" {PARENT}\n"}) == {
        "traceparent": PARENT}
    assert tracecontext.from_environment({"TRACESTATE": "a=b"}) is None


def test_cli_enqueue_honours_traceparent_and_tracestate(backend, run_cli) -> None:
    res = run_cli("enqueue", "echo", "-q", env={"TRACEPARENT": PARENT, "TRACESTATE": "a=b"})
    assert res.code == 0, res.stderr
    import uuid

    assert stored(backend, uuid.UUID(res.stdout.strip())) == {"traceparent": PARENT,
                                                              "tracestate": "a=b"}
    res = run_cli("enqueue", "--from", "-", "-q", input='{"type": "echo"}\n',
                  env={"TRACEPARENT": PARENT, "TRACESTATE": ""})
    assert res.code == 0, res.stderr
    assert stored(backend, uuid.UUID(res.stdout.strip())) == {"traceparent": PARENT}
    # A malformed TRACEPARENT is ignored, as W3C says: the enqueue goes on without it.
    res = run_cli("enqueue", "echo", "-q", env={"TRACEPARENT": "not-a-trace"})
    assert res.code == 0 and res.stderr == ""
    assert stored(backend, uuid.UUID(res.stdout.strip())) is None


PROBE = """
import json, sys
from runnerq_cli import connect, HandlerRegistry, Worker
queue = connect(sys.argv[1], database=sys.argv[2], queue="probe")
queue.maintenance.init_indexes()
registry = HandlerRegistry()
registry.add("t", lambda payload: 1)
aid = queue.enqueue("t", {}).activity_id
Worker(queue, registry, burst=True).run(install_signals=False)
print(json.dumps({"done": str(queue.get_activity(aid).status),
                  "loaded": sorted(m for m in sys.modules
                                   if m.split(".")[0] in ("opentelemetry", "prometheus_client")
                                   or m == "runnerq_cli.worker.tracing")}))
"""


def test_without_opentelemetry_in_use_nothing_of_it_is_imported(server, db_name) -> None:
    """An application that does not use OpenTelemetry (or metrics) pays nothing: its
    enqueue and its worker import neither, even with the packages installed."""
    proc = subprocess.run([sys.executable, "-c", PROBE, server.uri, db_name],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report == {"done": "completed", "loaded": []}
