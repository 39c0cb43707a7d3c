"""Running activities under control (issue 39, point 5): an operator's cancel reaches a
running activity through its claim, and a handler reports progress.

Real workers in background threads against the test server: the cancel ends the claim
at once (one fenced update), the worker notices at its next renewal (a short lease here:
renewals every 0.4 s), its handler sees `ctx.cancelled`, its late result is refused, and
whatever waits on the activity wakes with the cancellation's error.
"""

from __future__ import annotations

import asyncio
import json
import math
import sys
import time
from typing import Any

import pytest

from runnerq_cli.backend.domain.models import Status
from runnerq_cli.errors import ActivityCancelled, ClaimLost, InvalidArgument
from runnerq_cli.worker.durable import ChildFailed
from runnerq_cli.worker.durable_context import DurableContext
from runnerq_cli.worker.engine import Worker
from runnerq_cli.worker.handlers import ActivityContext, HandlerRegistry
from tests.waiting import wait_until

LEASE = 1.2  # renewals every 0.4 s: a cancel is noticed within about half a second
registry = HandlerRegistry()
seen: dict[str, Any] = {}


@registry.handler("polite")
def polite(payload: dict[str, Any], ctx: ActivityContext) -> Any:
    """Works until told to stop, then returns anyway: a result that must be refused."""
    seen["started"] = True
    deadline = time.monotonic() + 20
    while not ctx.cancelled and time.monotonic() < deadline:
        time.sleep(0.02)
    seen["cancelled"] = ctx.cancelled
    seen["should_stop"] = ctx.should_stop
    return {"late": True}


@registry.handler("sleepy_async")
async def sleepy_async(payload: dict[str, Any], ctx: ActivityContext) -> Any:
    seen["async_started"] = True
    try:
        await asyncio.sleep(20)
    except asyncio.CancelledError:
        seen["async_task_cancelled"] = True
        raise
    return {"late": True}


@registry.handler("waiter")
def waiter(payload: dict[str, Any], ctx: DurableContext) -> Any:
    handle = ctx.spawn("polite", {}, step="child")
    try:
        return ctx.wait(handle)
    except ChildFailed as exc:
        return {"child_error": exc.error}


@registry.handler("reporter")
def reporter(payload: dict[str, Any], ctx: ActivityContext) -> Any:
    began = time.monotonic()
    for done in range(1, 201):
        ctx.progress(done, 200, f"item {done}")
        time.sleep(0.005)
    seen["reported_for"] = time.monotonic() - began
    seen["bad"] = []
    for args in ((-1,), (math.nan,), (math.inf,), (1, -2), (1, 0), (True,),
                 (1, None, "x" * 201), (1, None, "two\nlines")):
        try:
            ctx.progress(*args)
        except InvalidArgument as exc:
            seen["bad"].append(str(exc))
    return "done"


def run_worker(backend, reg: HandlerRegistry = registry, **options: Any) -> Worker:
    options.setdefault("concurrency", 2)
    worker = Worker(backend, reg, lease=LEASE, poll_interval=0.1, **options)
    worker.start()
    return worker


def raw(backend, aid) -> dict[str, Any]:
    return backend.context.activities.find_one({"_id": aid})


@pytest.fixture(autouse=True)
def _fresh() -> None:
    seen.clear()


def test_cancel_of_a_running_python_handler_ends_it_once_and_wakes_its_parent(backend):
    parent = backend.enqueue("waiter", {}).activity_id
    worker = run_worker(backend)
    try:
        child = wait_until(lambda: backend.context.activities.find_one(
            {"parent_activity_id": parent, "status": "processing"}))
        held = raw(backend, child["_id"])
        result = backend.operator.cancel(child["_id"], reason="not wanted")
        assert (result.previous_status, result.status) == ("processing", "cancelled")
        doc = raw(backend, child["_id"])  # the claim ended in that one update
        assert doc["status"] == "cancelled" and doc["last_outcome"] == "cancelled"
        assert doc["last_lease_id"] == held["lease_id"]
        assert doc["last_worker_id"] == held["worker_id"]
        assert not {"lease_id", "worker_id", "lease_deadline"} & set(doc)
        wait_until(lambda: "cancelled" in seen)
        assert seen["cancelled"] is True and seen["should_stop"] is True
        woke = wait_until(lambda: backend.get_result(parent))
        assert woke.data == {"child_error": "activity cancelled: not wanted"}
    finally:
        worker.stop()
        worker.join()
    doc = raw(backend, child["_id"])
    assert doc["status"] == "cancelled"  # the handler's late result was refused
    stored = backend.get_result(child["_id"])
    assert stored.state == "Err" and stored.data["type"] == "cancelled"
    events = [e.event_type for e in backend.get_activity_events(child["_id"])]
    assert events.count("Cancelled") == 1
    assert not {"Completed", "Failed", "Retrying"} & set(events)
    assert worker.counters["claims_lost"] == 1 and worker.counters["succeeded"] == 1


def test_the_late_acknowledgement_and_renewal_of_a_cancelled_claim_are_refused(backend):
    aid = backend.enqueue("polite", {}).activity_id
    [claim] = backend.dequeue("w1", types=["polite"])
    backend.operator.cancel(aid)
    with pytest.raises(ActivityCancelled):
        backend.extend_lease(claim, 30)
    with pytest.raises(ClaimLost):
        backend.ack_success(claim, {"late": True})
    with pytest.raises(ActivityCancelled):
        backend.report_progress(claim, {"done": 1.0})
    doc = raw(backend, aid)
    assert doc["status"] == "cancelled" and "progress" not in doc
    assert backend.get_result(aid).data["error"] == "activity cancelled"
    # a claim another worker took is lost, not cancelled
    other = backend.enqueue("polite", {}).activity_id
    [first] = backend.dequeue("w1", types=["polite"])
    backend.context.activities.update_one({"_id": other}, {"$set": {"lease_id": "x" * 32}})
    with pytest.raises(ClaimLost) as lost:
        backend.extend_lease(first, 30)
    assert not isinstance(lost.value, ActivityCancelled)


def test_cancel_of_a_running_asyncio_handler_cancels_its_task(backend):
    aid = backend.enqueue("sleepy_async", {}).activity_id
    worker = run_worker(backend)
    try:
        wait_until(lambda: seen.get("async_started"))
        backend.operator.cancel(aid)
        wait_until(lambda: seen.get("async_task_cancelled"))
    finally:
        worker.stop()
        worker.join()
    assert raw(backend, aid)["status"] == "cancelled"
    assert worker.counters["claims_lost"] == 1


SHELL = """
import os, signal, sys, time
open(sys.argv[1] + ".pid", "w").write(str(os.getpid()))
def term(*_):
    open(sys.argv[1] + ".term", "w").write("x")
    if sys.argv[2] == "obey":
        sys.exit(0)
signal.signal(signal.SIGTERM, term)
time.sleep(30)
"""


@pytest.mark.parametrize("mode", ["obey", "ignore"])
def test_cancel_of_a_shell_handler_sends_sigterm_then_sigkill(backend, tmp_path, mode):
    from runnerq_cli.worker.api import build_registry

    script = tmp_path / "child.py"
    script.write_text(SHELL)
    mark = tmp_path / mode
    reg = build_registry(commands={"cmd": f"{sys.executable} {script} {mark} {mode}"})
    aid = backend.enqueue("cmd", {}).activity_id
    worker = run_worker(backend, reg, kill_grace=0.6)
    try:
        wait_until(lambda: (tmp_path / f"{mode}.pid").exists())
        pid = int(wait_until(lambda: (tmp_path / f"{mode}.pid").read_text()))
        cancelled_at = time.monotonic()
        backend.operator.cancel(aid)
        wait_until(lambda: (tmp_path / f"{mode}.term").exists())  # SIGTERM came
        wait_until(lambda: not _alive(pid))
        gone_after = time.monotonic() - cancelled_at
    finally:
        worker.stop()
        worker.join()
    if mode == "ignore":  # it outlived SIGTERM by the grace: SIGKILL ended it
        assert gone_after >= 0.6
    assert raw(backend, aid)["status"] == "cancelled"


def _alive(pid: int) -> bool:
    import os

    try:
        waited, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        waited = 0
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is gone for our purpose
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return waited == 0


def test_progress_is_written_at_a_bounded_rate_and_shown(backend, run_cli, cli_env):
    writes: list[dict[str, Any]] = []
    real = backend.report_progress

    def counted(claim, progress):
        writes.append(progress)
        return real(claim, progress)

    backend.report_progress = counted  # type: ignore[method-assign]  # counts, stores
    aid = backend.enqueue("reporter", {}).activity_id
    worker = run_worker(backend, progress_interval=0.5)
    try:
        wait_until(lambda: backend.get_result(aid))
    finally:
        worker.stop()
        worker.join()
    # 200 reports over about 1 s (longer on a busy machine): the first within a keeper
    # tick, then at most one per 0.5 s, and the last one before the outcome
    assert 2 <= len(writes) <= seen["reported_for"] / 0.5 + 2, (len(writes), seen)
    assert len(writes) < 20
    assert writes[-1] == {"done": 200.0, "total": 200.0, "message": "item 200"}
    doc = raw(backend, aid)
    assert doc["progress"]["done"] == 200.0 and doc["progress"]["attempt"] == 1
    events = [e for e in backend.get_activity_events(aid) if e.event_type == "Progress"]
    assert len(events) == len(writes)
    assert len(seen["bad"]) == 8, seen["bad"]
    shown = run_cli("show", str(aid))
    assert "200/200 (100%) item 200" in shown.stdout
    data = json.loads(run_cli("show", str(aid), "-o", "json").stdout)
    assert data["progress"]["done"] == 200.0 and data["progress"]["message"] == "item 200"


def test_list_processing_shows_progress_within_80_columns(backend, run_cli):
    aid = backend.enqueue("reporter", {}).activity_id
    [claim] = backend.dequeue("w1", types=["reporter"])
    backend.report_progress(claim, {"done": 40.0, "total": 100.0, "message": "copying"})
    listed = run_cli("list", "processing", env={"COLUMNS": "80"})
    assert "40/100 (40%)" in listed.stdout, listed.stdout
    assert max(len(line) for line in listed.stdout.splitlines()) <= 80
    assert str(aid)[:8] in listed.stdout


def test_cli_cancel_of_a_running_activity(backend, run_cli):
    aid = backend.enqueue("polite", {}).activity_id
    backend.dequeue("w1", types=["polite"])
    done = run_cli("cancel", str(aid), "--reason", "stop it", "-o", "json")
    assert done.code == 0, done.stderr
    assert json.loads(done.stdout)[0]["previous_status"] == "processing"
    assert raw(backend, aid)["status"] == "cancelled"
    # by a filter, running work is cancelled only when named
    other = backend.enqueue("polite", {}).activity_id
    backend.dequeue("w1", types=["polite"])
    broad = run_cli("cancel", "--type", "polite", "--max", "10", "--yes")
    assert broad.code == 0, broad.stderr
    assert raw(backend, other)["status"] == "processing"
    named = run_cli("cancel", "--status", "processing", "--type", "polite", "--max", "10",
                    "--yes")
    assert named.code == 0, named.stderr
    assert raw(backend, other)["status"] == Status.CANCELLED.value


def test_the_settings_are_bounded(backend):
    for option, value in (("kill_grace", -1), ("progress_interval", 0.01),
                          ("kill_grace", math.inf)):
        with pytest.raises(InvalidArgument):
            Worker(backend, registry, **{option: value})




def test_the_console_activity_page_carries_the_progress(backend):
    from tests.test_console_api import Console

    aid = backend.enqueue("reporter", {}).activity_id
    [claim] = backend.dequeue("w1", types=["reporter"])
    console = Console(backend)
    try:
        assert console.get(f"/api/activity/{aid}")["progress"] is None
        backend.report_progress(claim, {"done": 3.0, "total": 4.0})
        page = console.get(f"/api/activity/{aid}")
    finally:
        console.close()
    assert page["progress"]["text"] == "3/4 (75%)" and page["progress"]["attempt"] == 1
    assert page["activity"]["status"] == "processing"
