"""Durable handlers (docs/workers.md, "Durable handlers"): the worker's `ctx.step`,
`sleep`, `wait_for_signal`, `spawn`, `wait` and `wait_all`, run by a real `Worker` in
this process against the test server, checked on the stored documents: what ran how
often, what parked, and the replay contract's errors."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.backend.domain.checkpoints import checkpoint_id
from runnerq_cli.backend.domain.models import Status
from runnerq_cli.errors import InvalidArgument, NotFound
from runnerq_cli.worker.durable import ChildFailed, SignalTimeout, StepFailed
from runnerq_cli.worker.durable_context import DurableContext
from runnerq_cli.worker.engine import Worker
from runnerq_cli.worker.handlers import HandlerRegistry, NonRetryableError
from tests.waiting import wait_until

ran: Counter[str] = Counter()
registry = HandlerRegistry()
lock = threading.Lock()


def count(what: str) -> int:
    with lock:
        ran[what] += 1
        return ran[what]


@pytest.fixture(autouse=True)
def fresh_counts() -> Iterator[None]:
    ran.clear()
    yield


@pytest.fixture
def worker(backend: RunnerQ) -> Iterator[Worker]:
    running = Worker(backend, registry, concurrency=4, poll_interval=0.1)
    running.start()
    yield running
    running.stop(force=True)
    running.join(15)


def raw(backend: RunnerQ, activity_id: Any) -> dict[str, Any]:
    return backend.context.activities.find_one({"_id": activity_id})


def finished(backend: RunnerQ, activity_id: Any, timeout: float = 40) -> dict[str, Any]:
    return wait_until(lambda: (doc := raw(backend, activity_id))["status"] in (
        Status.COMPLETED, Status.FAILED, Status.DEAD_LETTER) and doc, timeout,
        message=f"activity {activity_id} to finish")


# ----------------------------------------------------------------------- handlers


@registry.handler("steps")
def steps(payload: dict[str, Any], ctx: DurableContext) -> Any:
    value = ctx.step("charge", lambda: {"charged": count("charge")})
    if ctx.attempt == 1:
        raise RuntimeError("crash after the checkpoint")
    return value


@registry.handler("flaky_step")
def flaky_step(payload: dict[str, Any], ctx: DurableContext) -> Any:
    def once_failing() -> int:
        if count("flaky") == 1:
            raise RuntimeError("retryable, stores nothing")
        return 42

    return ctx.step("s", once_failing)


@registry.handler("fatal_step")
def fatal_step(payload: dict[str, Any], ctx: DurableContext) -> Any:
    def refuse() -> None:
        count("fatal")
        raise NonRetryableError("card declined")

    try:
        ctx.step("charge", refuse)
    except StepFailed as exc:
        return {"replayed": str(exc)}
    except NonRetryableError:
        raise RuntimeError("retry to see the replay") from None
    return None


@registry.handler("sleeper")
def sleeper(payload: dict[str, Any], ctx: DurableContext) -> Any:
    ctx.step("before", lambda: count("before"))
    count("top")
    ctx.sleep("nap", payload["seconds"])
    return ctx.step("after", lambda: count("after"))


@registry.handler("approval")
def approval(payload: dict[str, Any], ctx: DurableContext) -> Any:
    try:
        return {"approved": ctx.wait_for_signal("approve", timeout=payload.get("timeout"))}
    except SignalTimeout as exc:
        raise NonRetryableError(f"no approval: {exc}") from None


@registry.handler("double")
def double(payload: dict[str, Any]) -> Any:
    count(f"child:{payload['n']}")
    if payload.get("slow"):
        threading.Event().wait(2.5)
    if payload.get("fail"):
        raise NonRetryableError("parcel lost")
    return payload["n"] * 2


@registry.handler("fan_out")
def fan_out(payload: dict[str, Any], ctx: DurableContext) -> Any:
    handles = [ctx.spawn("double", {"n": n, "slow": payload.get("slow", False),
                                    "fail": n in payload.get("fail", [])}, step=f"p{n}")
               for n in range(3)]
    if ctx.attempt == 1 and payload.get("crash"):
        raise RuntimeError("crash after spawning")
    try:
        return ctx.wait_all(handles)
    except ChildFailed as exc:
        return {"failed": exc.child.step, "error": exc.error}


@registry.handler("dup_name")
def dup_name(payload: dict[str, Any], ctx: DurableContext) -> Any:
    ctx.step("same", lambda: 1)
    return ctx.step("same", lambda: 2)


@registry.handler("nested")
def nested(payload: dict[str, Any], ctx: DurableContext) -> Any:
    return ctx.step("outer", lambda: ctx.step("inner", lambda: 1))


@registry.handler("gathered")
async def gathered(payload: dict[str, Any], ctx: DurableContext) -> Any:
    await asyncio.gather(ctx.sleep_async("a", 600), ctx.sleep_async("b", 600))


@registry.handler("swallower")
def swallower(payload: dict[str, Any], ctx: DurableContext) -> Any:
    try:
        ctx.step("x", lambda: 1)
        ctx.step("x", lambda: 1)
    except Exception:  # the contract's error, caught: the attempt still fails
        return "swallowed"
    return None


@registry.handler("bad_input")
def bad_input(payload: dict[str, Any], ctx: DurableContext) -> Any:
    answers = []
    for call in (lambda: ctx.step(7, lambda: 1), lambda: ctx.step("x" * 201, lambda: 1),  # type: ignore[arg-type]
                 lambda: ctx.sleep("s", -1), lambda: ctx.sleep("s", float("inf")),
                 lambda: ctx.wait_for_signal("w", timeout=float("nan"))):
        try:
            call()
        except InvalidArgument as exc:
            answers.append(str(exc))
    return answers


@registry.handler("unstorable")
def unstorable(payload: dict[str, Any], ctx: DurableContext) -> Any:
    return ctx.step("value", lambda: {"at": object()})


@registry.handler("async_saga")
async def async_saga(payload: dict[str, Any], ctx: DurableContext) -> Any:
    async def charge() -> int:
        await asyncio.sleep(0)
        return count("async_charge")

    charged = await ctx.step_async("charge", charge)
    await ctx.sleep_async("nap", 3)
    handle = await ctx.spawn_async("double", {"n": 5}, step="child")
    signal = await ctx.wait_for_signal_async("go", timeout=60)
    return {"charged": charged, "child": await ctx.wait_async(handle), "signal": signal}


# -------------------------------------------------------------------------- steps


def test_a_step_runs_once_across_a_crash_after_its_checkpoint(backend, worker) -> None:
    a = backend.enqueue("steps", {}, retry_delay_seconds=0).activity_id
    doc = finished(backend, a)
    assert doc["status"] == Status.COMPLETED and doc["retry_count"] == 1
    assert backend.get_result(a).data == {"charged": 1} and ran["charge"] == 1
    [step] = backend.durable.steps(a)
    assert (step.kind, step.name, step.state, step.data) == ("run", "charge", "Ok",
                                                             {"charged": 1})


def test_a_retryable_step_error_stores_nothing_and_runs_again(backend, worker) -> None:
    a = backend.enqueue("flaky_step", {}, retry_delay_seconds=0).activity_id
    assert finished(backend, a)["status"] == Status.COMPLETED
    assert backend.get_result(a).data == 42 and ran["flaky"] == 2
    assert [(s.state, s.data) for s in backend.durable.steps(a)] == [("Ok", 42)]


def test_a_non_retryable_step_error_is_memoized_and_raised_on_replay(backend, worker) -> None:
    a = backend.enqueue("fatal_step", {}, retry_delay_seconds=0).activity_id
    assert finished(backend, a)["status"] == Status.COMPLETED
    assert ran["fatal"] == 1  # the replay raised the stored Err without running it
    assert backend.get_result(a).data == {"replayed": "step 'charge' failed: card declined"}
    [step] = backend.durable.steps(a)
    assert (step.state, step.data) == ("Err", {"error": "card declined"})


def test_a_step_value_that_cannot_be_stored_fails_for_good(backend, worker) -> None:
    a = backend.enqueue("unstorable", {}).activity_id
    doc = finished(backend, a)
    assert doc["status"] == Status.FAILED and doc["retry_count"] == 0
    assert "step 'value': its value cannot be stored" in doc["last_error"]
    assert backend.context.checkpoints.count_documents({"owner_id": a}) == 0


# ------------------------------------------------------------------------- sleeps


def test_a_short_sleep_is_waited_in_process(backend, worker) -> None:
    a = backend.enqueue("sleeper", {"seconds": 0.3}).activity_id
    doc = finished(backend, a)
    assert doc["status"] == Status.COMPLETED and doc["claims"] == 1
    assert ran["top"] == 1 and ran["before"] == 1 and ran["after"] == 1


def test_a_long_sleep_parks_frees_the_slot_and_resumes(backend, worker) -> None:
    a = backend.enqueue("sleeper", {"seconds": 3}, timeout_seconds=1).activity_id
    parked = wait_until(lambda: (d := raw(backend, a))["status"] == "waiting" and d,
                        message="the sleep to park")
    assert parked["parked"]["kind"] == "sleep" and parked["retry_count"] == 0
    assert "lease_id" not in parked
    wait_until(lambda: worker._flights.running == 0, message="the slot to be free")
    doc = finished(backend, a)
    assert doc["status"] == Status.COMPLETED and doc["retry_count"] == 0
    assert doc["claims"] == 2
    # the handler replayed from the top; the step before the sleep did not run again
    assert ran["top"] == 2 and ran["before"] == 1 and ran["after"] == 1
    wake = backend.durable.get_result(checkpoint_id(a, "sleep", "nap"))
    assert set(wake.data) == {"wake_at"}


# ------------------------------------------------------------------------ signals


def test_a_signal_sent_before_the_wait_counts(backend, worker) -> None:
    worker.stop()
    worker.join(15)
    a = backend.enqueue("approval", {"timeout": 60}).activity_id
    assert backend.durable.signal(a, "approve", {"by": "ada"}) is False  # pending: kept
    again = Worker(backend, registry, burst=True, poll_interval=0.1)
    again.run(install_signals=False)
    doc = raw(backend, a)
    assert doc["status"] == Status.COMPLETED and doc["claims"] == 1
    assert backend.get_result(a).data == {"approved": {"by": "ada"}}


def test_a_signal_after_the_wait_wakes_it_and_by_key_too(backend, worker) -> None:
    a = backend.enqueue("approval", {"timeout": 60}).activity_id
    b = backend.enqueue("approval", {}, idempotency_key="order-7").activity_id
    for target in (a, b):
        wait_until(lambda t=target: raw(backend, t)["status"] == "waiting",
                   message="the wait to park")
    assert raw(backend, a)["parked"]["kind"] == "signal"
    assert backend.durable.signal(a, "approve", "yes") is True
    assert backend.durable.signal_by_key("approval", "order-7", "approve", "by key") is True
    assert finished(backend, a)["status"] == Status.COMPLETED
    assert finished(backend, b)["status"] == Status.COMPLETED
    assert backend.get_result(a).data == {"approved": "yes"}
    assert backend.get_result(b).data == {"approved": "by key"}
    with pytest.raises(NotFound):
        backend.durable.signal_by_key("approval", "no-such-key", "approve", 1)


def test_a_signal_wait_past_its_deadline_fails_clearly(backend, worker) -> None:
    a = backend.enqueue("approval", {"timeout": 0.5}).activity_id
    doc = finished(backend, a)
    assert doc["status"] == Status.FAILED and doc["retry_count"] == 0
    assert "no approval: no signal 'approve' within" in doc["last_error"]
    assert "timed out" in doc["last_error"]


# ----------------------------------------------------------------------- children


def test_spawn_and_wait_all_of_several_children(backend, worker) -> None:
    p = backend.enqueue("fan_out", {"slow": True}).activity_id
    doc = finished(backend, p)
    assert doc["status"] == Status.COMPLETED and doc["retry_count"] == 0
    assert backend.get_result(p).data == [0, 2, 4]
    children = backend.durable.children(p)
    assert len(children) == 3 and {c["depth"] for c in children} == {1}
    events = [e.event_type for e in backend.get_activity_events(p)]
    assert "Yielded" in events  # the slow children made it park, not hold its slot


def test_a_replay_re_attaches_to_the_same_children(backend, worker) -> None:
    p = backend.enqueue("fan_out", {"crash": True}, retry_delay_seconds=0).activity_id
    doc = finished(backend, p)
    assert doc["status"] == Status.COMPLETED and doc["retry_count"] == 1
    assert backend.get_result(p).data == [0, 2, 4]
    assert len(backend.durable.children(p)) == 3  # spawned by both runs, created once
    assert all(ran[f"child:{n}"] == 1 for n in range(3))


def test_a_failed_child_raises_in_the_parent(backend, worker) -> None:
    p = backend.enqueue("fan_out", {"fail": [1]}).activity_id
    assert finished(backend, p)["status"] == Status.COMPLETED
    answer = backend.get_result(p).data
    assert answer["failed"] == "p1" and "parcel lost" in answer["error"]


def test_async_handlers_use_the_async_forms(backend, worker) -> None:
    a = backend.enqueue("async_saga", {}, timeout_seconds=1).activity_id
    def parked_on_signal() -> bool:  # one read: between two, it may wake from its sleep
        doc = raw(backend, a)
        return doc["status"] == "waiting" and (doc.get("parked") or {}).get("kind") == "signal"

    wait_until(parked_on_signal, message="the signal wait")
    backend.durable.signal(a, "go", "now")
    doc = finished(backend, a)
    assert doc["status"] == Status.COMPLETED, doc.get("last_error")
    assert backend.get_result(a).data == {"charged": 1, "child": 10, "signal": "now"}
    assert ran["async_charge"] == 1


# --------------------------------------------------------------- the contract


@pytest.mark.parametrize(("activity_type", "says"), [
    ("dup_name", "the name 'same' is used twice in one run"),
    ("nested", "ctx.step('inner') inside the function of step 'outer'"),
    ("gathered", "while another durable wait is in progress"),
    ("swallower", "the name 'x' is used twice in one run"),
])
def test_contract_violations_fail_clearly(backend, worker, activity_type, says) -> None:
    a = backend.enqueue(activity_type, {}).activity_id
    doc = finished(backend, a)
    assert doc["status"] == Status.FAILED and doc["retry_count"] == 0
    assert says in doc["last_error"]


def test_bad_names_and_timeouts_are_refused_with_nothing_written(backend, worker) -> None:
    a = backend.enqueue("bad_input", {}).activity_id
    assert finished(backend, a)["status"] == Status.COMPLETED
    answers = backend.get_result(a).data
    assert len(answers) == 5
    assert answers[0] == "step name must be text, got int"
    assert "at most 200" in answers[1] and "0 or more" in answers[2]
    assert "finite" in answers[3] and "finite" in answers[4]
    assert backend.context.checkpoints.count_documents({"owner_id": a}) == 0


def test_the_asyncio_worker_runs_durable_handlers_on_the_applications_loop(backend) -> None:
    from runnerq_cli.aio import AsyncRunnerQ, AsyncWorker

    async def scenario() -> dict[str, Any]:
        a = backend.enqueue("async_saga", {}, timeout_seconds=1).activity_id
        async with AsyncWorker(registry, backend=AsyncRunnerQ(backend), concurrency=4,
                               poll_interval=0.1):
            async with asyncio.timeout(40):
                while not parked_on(backend, a, "signal"):
                    await asyncio.sleep(0.05)
                backend.durable.signal(a, "go", "loop")
                while raw(backend, a)["status"] not in (Status.COMPLETED, Status.FAILED):
                    await asyncio.sleep(0.05)
        return raw(backend, a)

    doc = asyncio.run(scenario())
    assert doc["status"] == Status.COMPLETED, doc.get("last_error")
    assert backend.get_result(doc["_id"]).data == {"charged": 1, "child": 10,
                                                   "signal": "loop"}


def parked_on(backend: RunnerQ, activity_id: Any, kind: str) -> bool:
    doc = raw(backend, activity_id)
    return doc["status"] == "waiting" and doc["parked"]["kind"] == kind
