"""The asyncio API (runnerq_cli.aio) against the sync one, and the asyncio worker.

`AsyncRunnerQ` runs the sync methods on its thread pool: the same calls give equal
results and the same errors. `AsyncWorker` runs the sync engine with `async def`
handlers on the caller's loop: they share it with the application (shown by
rendezvous between handlers and the test's own coroutine, never by timing), are
cancelled at their timeout, and drain or are released at a graceful stop.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import inspect
import threading
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from runnerq_cli import ActivitySpec
from runnerq_cli.aio import AsyncRunnerQ, AsyncWorker
from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.backend.domain.models import Status
from runnerq_cli.config import load_settings
from runnerq_cli.errors import (
    DuplicateActivity,
    InvalidArgument,
    NotFound,
    RunnerQError,
    Unavailable,
)
from runnerq_cli.worker.engine import WorkerEnd
from runnerq_cli.worker.handlers import HandlerRegistry, NonRetryableError
from tests.waiting import wait_until

READS = ("get_activity", "get_result", "get_activity_events")
LISTS = ("list_pending", "list_processing", "list_scheduled", "list_completed",
         "list_dead_letter")


def _run(coro: Awaitable[Any]) -> Any:
    return asyncio.run(_closing(coro))


async def _closing(coro: Awaitable[Any]) -> Any:
    return await coro


def test_every_async_method_has_its_sync_methods_signature(backend: RunnerQ) -> None:
    aq = AsyncRunnerQ(backend)
    names = ("enqueue", "enqueue_many", "wait", "stats", "ping", "now", *READS, *LISTS)
    for name in names:
        method = getattr(aq, name)
        assert inspect.iscoroutinefunction(method), name
        assert inspect.signature(method) == inspect.signature(getattr(backend, name)), name


def test_the_same_calls_give_equal_results(backend: RunnerQ) -> None:
    aq = AsyncRunnerQ(backend, max_threads=2)
    batch = [ActivitySpec("echo", {"i": i}, idempotency_key=f"k{i}") for i in range(3)]
    first = backend.enqueue_many(batch)
    # A repeated batch returns the existing activities: the same answer from either API.
    assert _run(aq.enqueue_many(batch)) == backend.enqueue_many(batch)
    later = _run(aq.enqueue("echo", {"late": True}, delay_seconds=3600))
    assert later.created and later.status == "scheduled"
    dead = backend.enqueue("doomed", {}, max_retries=1).activity_id
    [doomed] = backend.dequeue("w1", types=["doomed"])
    backend.ack_failure(doomed, "spent", retryable=True)  # its last attempt: dead-lettered
    [claim] = backend.dequeue("w1", limit=1)  # the oldest first: batch[0]
    backend.ack_success(claim, {"ok": 1})
    [failing] = backend.dequeue("w1", limit=1)
    backend.ack_failure(failing, "no", retryable=False)
    [processing] = backend.dequeue("w1", limit=1)
    assert backend.list_dead_letter() and backend.list_completed()
    ids = [r.activity_id for r in first if not isinstance(r, Exception)]
    ids += [later.activity_id, dead]

    async def reads() -> list[Any]:
        out: list[Any] = []
        for aid in ids:
            out += [await getattr(aq, name)(aid) for name in READS]
        out += [await getattr(aq, name)() for name in LISTS]
        out.append(await aq.stats())
        out.append(await aq.wait(ids[0], timeout=0))
        out.append(await aq.wait(processing.activity_id, timeout=0))
        return out

    sync = [getattr(backend, name)(aid) for aid in ids for name in READS]
    sync += [getattr(backend, name)() for name in LISTS]
    sync += [backend.stats(), backend.wait(ids[0], timeout=0),
             backend.wait(processing.activity_id, timeout=0)]
    got = _run(reads())
    for outcome in (-2, -1):  # the seconds waited are the one thing that differs
        got[outcome] = dataclasses.replace(got[outcome], waited_seconds=0.0)
        sync[outcome] = dataclasses.replace(sync[outcome], waited_seconds=0.0)
    assert got == sync
    assert [type(x) for x in got] == [type(x) for x in sync]
    assert got[-2].status == Status.COMPLETED and got[-1].timed_out


def _unreachable() -> RunnerQ:
    return RunnerQ(load_settings(None, overrides={
        "uri": "mongodb://127.0.0.1:9/?directConnection=true", "database": "x", "queue": "q",
        "server_selection_timeout": 0.2, "connect_timeout": 0.2},
        environ={"RUNNERQ_CONFIG": ""}))


def test_errors_are_the_same_types_with_the_same_messages(backend: RunnerQ) -> None:
    aq = AsyncRunnerQ(backend)
    backend.enqueue("echo", {}, idempotency_key="once")
    missing = uuid.uuid4()
    down = _unreachable()
    calls: list[tuple[type[RunnerQError], Callable[[RunnerQ], Any]]] = [
        (NotFound, lambda q: q.get_activity(missing)),
        (NotFound, lambda q: q.wait(missing, timeout=0)),
        (InvalidArgument, lambda q: q.get_activity("not an id")),
        (InvalidArgument, lambda q: q.list_pending(limit=0)),
        (InvalidArgument, lambda q: q.enqueue("", {})),
        (DuplicateActivity, lambda q: q.enqueue("echo", {}, idempotency_key="once",
                                                on_duplicate="no-reuse")),
    ]
    for kind, call in calls:
        with pytest.raises(kind) as sync_error:
            call(backend)
        with pytest.raises(kind) as async_error:
            _run(call(aq))
        assert type(async_error.value) is type(sync_error.value)
        assert str(async_error.value) == str(sync_error.value)
    with pytest.raises(Unavailable):
        down.ping()
    with pytest.raises(Unavailable):
        _run(AsyncRunnerQ(down).ping())


def test_a_wait_holds_no_thread_while_it_sleeps(backend: RunnerQ) -> None:
    """One pool thread: the reads beside a wait still run while it waits (the wait
    would hold the only thread otherwise), and the wait sees the end."""
    aq = AsyncRunnerQ(backend, max_threads=1)

    async def scenario() -> Any:
        added = await aq.enqueue("echo", {})
        waiting = asyncio.create_task(aq.wait(added.activity_id, poll=0.05, max_poll=0.1))
        for _ in range(5):
            assert (await aq.get_activity(added.activity_id)).status == Status.PENDING
        [claim] = await asyncio.to_thread(backend.dequeue, "w1", limit=1)
        await asyncio.to_thread(backend.ack_success, claim, {"done": True})
        outcome = await waiting
        await aq.close()
        return outcome

    outcome = _run(scenario())
    assert outcome.status == Status.COMPLETED and outcome.result.data == {"done": True}


def test_calls_run_in_the_callers_context(backend: RunnerQ) -> None:
    """A trace context (any contextvar) set by the caller's task reaches the sync code."""
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    aq = AsyncRunnerQ(backend)

    async def scenario() -> str:
        var.set("the caller's")
        return await aq._call(var.get)

    assert _run(scenario()) == "the caller's"


def test_max_threads_must_be_positive(backend: RunnerQ) -> None:
    with pytest.raises(InvalidArgument, match="max_threads"):
        AsyncRunnerQ(backend, max_threads=0)


# ------------------------------------------------------------- the worker


def _worker(backend: RunnerQ, registry: HandlerRegistry, **options: Any) -> AsyncWorker:
    options.setdefault("poll_interval", 0.2)
    return AsyncWorker(registry, backend=AsyncRunnerQ(backend), **options)


async def _until(predicate: Callable[[], Any], what: str, timeout: float = 30.0) -> None:
    """Yield to the loop until `predicate()` holds (a deadline, not a fixed sleep)."""
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.02)
    assert predicate(), what


def test_async_handlers_share_the_applications_loop(backend: RunnerQ) -> None:
    """Three attempts meet on one asyncio.Event: each awaits it until the third has
    started, and the test's coroutine sets it only once it has seen all three in
    flight. On a loop of their own each (or one blocked by the first), none could end.
    A plain handler beside them blocks its slot thread, not the loop."""
    registry = HandlerRegistry()
    arrived: list[str] = []
    loops: set[int] = set()
    gate = threading.Event()
    events: dict[str, asyncio.Event] = {}  # made on the test's loop, below

    @registry.handler("meet")
    async def meet(payload: dict[str, Any], ctx: Any) -> str:
        loops.add(id(asyncio.get_running_loop()))
        arrived.append(payload["n"])
        await events["all_in"].wait()
        return payload["n"]

    @registry.handler("blocking")
    def blocking(payload: dict[str, Any]) -> str:
        assert gate.wait(30)  # blocks this slot's thread only
        return "unblocked"

    async def scenario() -> tuple[WorkerEnd, int]:
        events["all_in"] = asyncio.Event()
        ids = [backend.enqueue("meet", {"n": str(n)}).activity_id for n in range(3)]
        ids.append(backend.enqueue("blocking", {}).activity_id)
        worker = _worker(backend, registry, concurrency=4)
        async with worker:
            await _until(lambda: len(arrived) == 3 and worker.in_flight == 4,
                         "three async attempts and the blocking one in flight")
            events["all_in"].set()  # the loop is free: this coroutine runs while all four wait
            await _until(lambda: worker.counters["succeeded"] == 3, "the three to end")
            gate.set()
            await _until(lambda: worker.counters["succeeded"] == 4, "the blocking one")
        for aid in ids:
            assert backend.get_activity(aid).status == Status.COMPLETED
        return await worker.wait(), id(asyncio.get_running_loop())

    end, loop_id = _run(scenario())
    assert end is WorkerEnd.STOPPED
    assert loops == {loop_id}  # every async attempt ran on the test's own loop
    assert backend.registry.list_workers() == []


def test_an_async_handler_past_its_timeout_is_cancelled_and_retried(backend: RunnerQ) -> None:
    registry = HandlerRegistry()
    cancelled = threading.Event()

    @registry.handler("slow")
    async def slow(payload: dict[str, Any]) -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    aid = backend.enqueue("slow", {}, timeout_seconds=1, max_retries=2,
                          retry_delay_seconds=60).activity_id

    async def scenario() -> WorkerEnd:
        worker = _worker(backend, registry, burst=True)
        await worker.start()
        return await worker.wait()

    assert _run(scenario()) is WorkerEnd.STOPPED
    assert cancelled.is_set()
    act = backend.get_activity(aid)
    assert act.status == Status.SCHEDULED and act.retry_count == 1
    assert "timed out after 1s" in (act.last_error or "")


def test_failures_fail_and_dead_letter_as_in_the_sync_worker(backend: RunnerQ) -> None:
    registry = HandlerRegistry()

    @registry.handler("bad")
    async def bad(payload: dict[str, Any]) -> None:
        await asyncio.sleep(0)
        raise NonRetryableError("bad input")

    @registry.handler("flaky")
    async def flaky(payload: dict[str, Any]) -> None:
        await asyncio.sleep(0)
        raise RuntimeError("try again")

    aid = backend.enqueue("bad", {}, max_retries=3).activity_id
    spent = backend.enqueue("flaky", {}, max_retries=1).activity_id

    async def scenario() -> WorkerEnd:
        worker = _worker(backend, registry, burst=True)
        await worker.start()
        return await worker.wait()

    assert _run(scenario()) is WorkerEnd.STOPPED
    act = backend.get_activity(aid)
    assert act.status == Status.FAILED and act.last_error == "bad input"
    act = backend.get_activity(spent)
    assert act.status == Status.DEAD_LETTER and act.last_error == "RuntimeError: try again"
    assert [r.activity.id for r in backend.list_dead_letter()] == [spent]


def test_a_graceful_stop_lets_a_running_handler_finish(backend: RunnerQ) -> None:
    registry = HandlerRegistry()

    @registry.handler("finishing")
    async def finishing(payload: dict[str, Any]) -> str:
        events["started"].set()
        await events["finish"].wait()
        return "finished"

    events: dict[str, asyncio.Event] = {}

    async def scenario() -> tuple[WorkerEnd, int]:
        events.update(started=asyncio.Event(), finish=asyncio.Event())
        aid = backend.enqueue("finishing", {}).activity_id
        # One slot: a claim already on the wire when the stop comes may take what is
        # enqueued meanwhile; with the slot busy none is, and after the running handler
        # ends the stopping worker must not claim `later`.
        worker = _worker(backend, registry, shutdown_timeout=30, concurrency=1)
        await worker.start()
        await events["started"].wait()
        stopping = asyncio.create_task(worker.stop())
        await asyncio.sleep(0)  # the stop is asked (its first step is the engine's stop())
        later = backend.enqueue("finishing", {}).activity_id  # not claimed once stopping
        in_flight = worker.in_flight  # still running: the stop waits for it
        assert not stopping.done()
        events["finish"].set()
        end = await stopping
        assert backend.get_result(aid).data == "finished"
        assert backend.get_activity(later).status == Status.PENDING
        return end, in_flight

    end, in_flight = _run(scenario())
    assert end is WorkerEnd.STOPPED and in_flight == 1
    assert backend.registry.list_workers() == []


def test_a_stop_past_the_shutdown_timeout_releases_and_cancels(backend: RunnerQ) -> None:
    registry = HandlerRegistry()
    cancelled = threading.Event()

    @registry.handler("stuck")
    async def stuck(payload: dict[str, Any]) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    aid = backend.enqueue("stuck", {}).activity_id

    async def scenario() -> WorkerEnd:
        worker = _worker(backend, registry, shutdown_timeout=0.3)
        async with worker:
            await _until(lambda: worker.in_flight == 1, "the attempt to start")
        return await worker.wait()

    assert _run(scenario()) is WorkerEnd.RELEASED
    act = backend.get_activity(aid)
    assert act.status == Status.PENDING and act.retry_count == 0
    assert cancelled.wait(5)  # its task was cancelled on the loop (Abandoned)


def test_a_worker_that_cannot_start_raises_from_start() -> None:
    async def scenario() -> None:
        worker = AsyncWorker(HandlerRegistry(), backend=_unreachable())
        await worker.start()

    with pytest.raises(InvalidArgument, match="no handler"):
        _run(scenario())
    registry = HandlerRegistry()
    registry.add("echo", lambda payload: payload)

    async def unreachable() -> None:
        await AsyncWorker(registry, backend=_unreachable()).start()

    with pytest.raises(Unavailable):
        _run(unreachable())


def test_an_attempt_whose_loop_stops_fails_instead_of_holding_its_claim(
        backend: RunnerQ) -> None:
    """The application's loop ends while an async handler awaits (the app forgot to stop
    the worker): the attempt fails as retryable, its slot and claim freed."""
    from runnerq_cli.worker.engine import Worker

    registry = HandlerRegistry()
    started = threading.Event()

    @registry.handler("forever")
    async def forever(payload: dict[str, Any]) -> None:
        started.set()
        await asyncio.Event().wait()

    aid = backend.enqueue("forever", {}, max_retries=3, retry_delay_seconds=60).activity_id
    loop = asyncio.new_event_loop()
    loop_thread = threading.Thread(target=loop.run_forever, daemon=True)
    loop_thread.start()
    worker = Worker(backend, registry, poll_interval=0.2)
    worker.run_async_handlers_on(loop)
    worker.start()
    assert started.wait(30)
    loop.call_soon_threadsafe(loop.stop)
    loop_thread.join(10)
    try:
        wait_until(lambda: worker.counters["retried"] == 1, message="the attempt to fail")
        act = backend.get_activity(aid)
        assert act.status == Status.SCHEDULED
        assert "the event loop running async handlers stopped" in (act.last_error or "")
    finally:
        worker.stop()
        assert worker.join(10) is WorkerEnd.STOPPED
        loop.close()


def test_an_async_handler_enqueues_without_blocking_the_loop(backend: RunnerQ) -> None:
    """`await ctx.enqueue_async(...)`: the follow-up is enqueued (and counted in the
    worker's metrics, as ctx.enqueue is) while the loop runs other coroutines."""
    from prometheus_client import CollectorRegistry

    from runnerq_cli.worker import metrics as m
    from runnerq_cli.worker.metrics import PrometheusMetrics

    registry = HandlerRegistry()
    ticks: list[int] = []

    @registry.handler("parent")
    async def parent(payload: dict[str, Any], ctx: Any) -> str:
        done = False

        async def ticker() -> None:
            while not done:
                ticks.append(1)
                await asyncio.sleep(0)

        task = asyncio.ensure_future(ticker())
        await asyncio.sleep(0)
        before = len(ticks)
        child = await ctx.enqueue_async("child", {"from": str(ctx.activity_id)})
        during = len(ticks) - before
        done = True
        await task
        return f"{child.activity_id} {during}"

    registry.add("child", lambda payload: payload)
    sink = PrometheusMetrics(CollectorRegistry())

    async def scenario() -> WorkerEnd:
        worker = _worker(backend, registry, burst=True, metrics=sink)
        await worker.start()
        return await worker.wait()

    pid = backend.enqueue("parent", {}).activity_id
    assert _run(scenario()) is WorkerEnd.STOPPED
    child_id, during = backend.get_result(pid).data.split()
    assert int(during) > 0  # the loop ran the ticker while the enqueue's round trip went on
    assert backend.get_activity(child_id).status == Status.COMPLETED
    assert sink.registry.get_sample_value(
        m.ACTIVITY_ENQUEUED, {"queue": backend.queue, "activity_type": "child"}) == 1
