"""The hostile-handler suite (issue 23, part 2): whatever a handler raises or returns, only
its own attempt fails.

Each case runs beside good work in a real burst `Worker` of one slot: the worker exits,
the good work completes, the slot thread lives on, the hostile attempt ends as a failure
whose error text names the class and is at most ERROR_TEXT_MAX_BYTES, and no activity
is left held (`processing`) by a slot that stopped running it.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from runnerq_cli.backend.models import Status
from runnerq_cli.backend.sizes import ERROR_TEXT_MAX_BYTES
from runnerq_cli.worker.engine import Worker, WorkerEnd
from runnerq_cli.worker.handlers import HandlerRegistry, NonRetryableError, RetryableError


class ReturnsNoString(Exception):
    def __str__(self):  # type: ignore[override]
        return 42


class RaisesOnStr(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no str for you")

    def __repr__(self) -> str:
        raise RuntimeError("no repr either")


class ReturnsNoStringFatal(NonRetryableError):
    def __str__(self):  # type: ignore[override]
        return ["not", "a", "string"]


class Quit(BaseException):
    """Not an Exception: escapes every `except Exception`."""


class NoItems(dict):  # type: ignore[type-arg]
    def items(self):  # type: ignore[override]
        raise RuntimeError("no items")


HUGE = 20 * 1024 * 1024


def _raise(exc: BaseException) -> Callable[[Any], Any]:
    def handler(payload: Any) -> Any:
        raise exc

    return handler


def _async_raise(exc: BaseException) -> Callable[[Any], Any]:
    async def handler(payload: Any) -> Any:
        await asyncio.sleep(0)
        raise exc

    return handler


def _returns(value: Any) -> Callable[[Any], Any]:
    return lambda payload: value


# name: (handler, the final status of a one-attempt activity, text the error holds)
CASES: dict[str, tuple[Callable[[Any], Any], Status, str]] = {
    "str-returns-int": (_raise(ReturnsNoString()), Status.DEAD_LETTER, "ReturnsNoString"),
    "str-and-repr-raise": (_raise(RaisesOnStr()), Status.DEAD_LETTER, "RaisesOnStr"),
    "non-retryable-str-returns-list": (_raise(ReturnsNoStringFatal()), Status.FAILED,
                                       "ReturnsNoStringFatal"),
    "20-MB-message": (_raise(RuntimeError("x" * HUGE)), Status.DEAD_LETTER,
                      "RuntimeError: xxx"),
    "20-MB-retryable-message": (_raise(RetryableError("y" * HUGE)), Status.DEAD_LETTER,
                                "yyy"),
    "20-MB-non-retryable-message": (_raise(NonRetryableError("z" * HUGE)), Status.FAILED,
                                    "zzz"),
    "base-exception-subclass": (_raise(Quit("bye")), Status.DEAD_LETTER, "Quit: bye"),
    "keyboard-interrupt": (_raise(KeyboardInterrupt()), Status.DEAD_LETTER,
                           "KeyboardInterrupt"),
    "async-str-returns-int": (_async_raise(ReturnsNoString()), Status.DEAD_LETTER,
                              "ReturnsNoString"),
    "lone-surrogate-message": (_raise(ValueError("bad \udc80 text")), Status.DEAD_LETTER,
                               "ValueError: bad \\udc80 text"),
    "returns-nan": (_returns({"x": math.nan}), Status.FAILED, "NaN or Infinity"),
    "returns-infinity": (_returns([1.0, -math.inf]), Status.FAILED, "NaN or Infinity"),
    "returns-a-set": (_returns({"s": {1, 2}}), Status.FAILED, "not JSON"),
    "returns-a-date": (_returns({"at": datetime.now(UTC)}), Status.FAILED, "not JSON"),
    "returns-an-object": (_returns(object()), Status.FAILED, "not JSON"),
    "returns-int-past-64-bits": (_returns(2**70), Status.FAILED, "cannot be stored"),
    "returns-a-non-string-key": (_returns({1: "one"}), Status.FAILED, "cannot be stored"),
    "returns-9-MB": (_returns({"blob": "b" * (9 * 1024 * 1024)}), Status.FAILED,
                     "cannot be stored"),
    "returns-a-raising-dict": (_returns(NoItems(a=1)), Status.FAILED, "no items"),
}


def run_beside_good_work(backend, hostile: Callable[[Any], Any]) -> tuple[Worker, Any, list]:
    """Run `hostile` first and three good activities after it, on one slot; the worker,
    the hostile activity's id, the good ones' ids."""
    threads: dict[str, threading.Thread] = {}
    registry = HandlerRegistry()

    def bad(payload: Any) -> Any:
        threads["bad"] = threading.current_thread()
        return hostile(payload)

    async def bad_async(payload: Any) -> Any:
        threads["bad"] = threading.current_thread()
        return await hostile(payload)

    def good(payload: Any) -> Any:
        return {"n": payload["n"]}

    registry.add("hostile", bad_async if inspect.iscoroutinefunction(hostile) else bad)
    registry.add("good", good)
    bad_id = backend.enqueue("hostile", {}, priority="critical", max_retries=1,
                             timeout_seconds=60).activity_id
    good_ids = [backend.enqueue("good", {"n": n}).activity_id for n in range(3)]
    worker = Worker(backend, registry, burst=True, concurrency=1, poll_interval=0.2)
    worker.start()
    assert worker.join(timeout=60) == WorkerEnd.STOPPED, "the burst worker did not exit (or failed)"
    # (The good work may run on another slot thread: the pool starts one when the
    # claim loop hands work over before the first slot counts itself free.)
    assert threads["bad"].is_alive(), "the slot thread that ran the hostile handler died"
    return worker, bad_id, good_ids


def assert_nothing_held(backend) -> None:
    acts = backend.db[backend.context.names.activities]
    assert acts.count_documents({"status": "processing"}) == 0
    assert acts.count_documents({"lease_id": {"$exists": True}}) == 0


@pytest.mark.parametrize("case", list(CASES))
def test_a_hostile_handler_fails_only_its_own_attempt(backend, case):
    hostile, status, holds = CASES[case]
    worker, bad_id, good_ids = run_beside_good_work(backend, hostile)
    for n, aid in enumerate(good_ids):
        assert backend.get_activity(aid).status == Status.COMPLETED
        assert backend.get_result(aid).data == {"n": n}
    act = backend.get_activity(bad_id)
    assert act.status == status
    error = act.last_error or ""
    assert holds in error
    assert len(error.encode()) <= ERROR_TEXT_MAX_BYTES
    assert_nothing_held(backend)
    counted = "failed" if status == Status.FAILED else "dead_lettered"
    assert worker.counters[counted] == 1
    assert worker.counters["succeeded"] == 3


def test_a_cut_error_text_says_how_long_it_was(backend):
    _, bad_id, _ = run_beside_good_work(backend, CASES["20-MB-message"][0])
    error = backend.get_activity(bad_id).last_error or ""
    assert error.startswith("RuntimeError: xxx")
    assert error.endswith(f"… [cut: {HUGE} characters in all]")
    # Every stored copy is the same bounded text: the dead-letter record's and the result's.
    assert backend.get_result(bad_id).data["error"] == error


def test_a_slot_that_died_holds_no_lease(backend):
    """A slot thread that ends without settling its attempt (here: it dies at once): the
    lease keeper stops renewing, fails the attempt, and the worker goes on."""
    registry = HandlerRegistry()
    registry.add("job", lambda payload: "never run")
    aid = backend.enqueue("job", {}, max_retries=1).activity_id
    worker = Worker(backend, registry, burst=True, concurrency=1, poll_interval=0.2,
                    lease=1.0)

    def dying_slot(fn: Callable[..., Any], flight: Any) -> None:
        def die() -> None:
            flight.thread = threading.current_thread()  # started, then gone

        threading.Thread(target=die, daemon=True).start()

    worker._claimer.slots.submit = dying_slot  # type: ignore[method-assign]
    worker.start()
    assert worker.join(timeout=30) == WorkerEnd.STOPPED, "the worker waited on a dead slot's claim"
    act = backend.get_activity(aid)
    assert act.status == Status.DEAD_LETTER
    assert "slot ended without an outcome" in (act.last_error or "")
    assert_nothing_held(backend)


def test_a_nan_result_stored_by_another_program_is_printed_as_valid_json(backend, run_cli):
    """This version never stores NaN or Infinity (above); another program may have:
    `result -o json` still prints valid JSON, the numbers as strings."""
    import json

    aid = backend.enqueue("other", {}).activity_id
    claim = backend.dequeue("w1", types=["other"])[0]
    backend.ack_success(claim, None)
    results = backend.db[backend.context.names.results]
    results.update_one({"_id": aid}, {"$set": {"data": {
        "x": math.nan, "up": math.inf, "down": [-math.inf, 1.5]}}})
    done = run_cli("result", str(aid), "-o", "json")
    assert done.code == 0, done.stderr
    data = json.loads(done.stdout, parse_constant=lambda name: pytest.fail(name))["data"]
    assert data == {"x": "NaN", "up": "Infinity", "down": ["-Infinity", 1.5]}
