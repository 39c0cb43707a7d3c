"""Acknowledgements the server refuses (issue 23, part 3): one refused outcome never blocks
or loses the others of its batch; it is recorded with a clear error and counted.

The refusals are the server's own: a validator on the results or activities collection
(code 121, "Document failed validation"), as another deployment's rules could add; and,
for a whole batch refused at once, a failure injected where the command is sent.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.errors import OperationFailure

from runnerq_cli.backend.domain.models import AckOutcome, Status
from runnerq_cli.backend.queue import acknowledgements
from runnerq_cli.backend.queue import queue as queue_module
from runnerq_cli.errors import InvalidArgument
from runnerq_cli.worker.engine import Worker, WorkerEnd
from runnerq_cli.worker.handlers import HandlerRegistry


def validate(backend, collection: str, validator: dict[str, Any]) -> None:
    """The (empty) collection made again with a validator, then its indexes."""
    name = getattr(backend.context.names, collection)
    with MongoClient(backend.settings.uri) as client:
        db = client[backend.settings.database]
        db.drop_collection(name)
        db.create_collection(name, validator=validator)
    backend.maintenance.init_indexes()


def claims(backend, count: int) -> list:
    backend.enqueue_many([queue_module.ActivitySpec("job", {"i": i}) for i in range(count)])
    got = backend.dequeue("w1", limit=count)
    assert len(got) == count
    return got


def test_refused_results_are_answered_alone_and_the_rest_complete(backend):
    validate(backend, "results", {"data.poison": {"$exists": False}})
    held = claims(backend, 5)
    results: list[Any] = [{"n": 0}, {"poison": 1}, {"x": math.nan}, {"n": 3}, 2**70]
    answers = backend.ack_success_many(list(zip(held, results, strict=True)))
    assert answers[0] is AckOutcome.COMPLETED and answers[3] is AckOutcome.COMPLETED
    assert "Document failed validation" in str(answers[1])
    assert "NaN or Infinity" in str(answers[2])
    assert "cannot be stored" in str(answers[4])
    assert all(isinstance(answers[i], InvalidArgument) for i in (1, 2, 4))
    statuses = [backend.get_activity(c.activity_id).status for c in held]
    assert statuses == [Status.COMPLETED, Status.PROCESSING, Status.PROCESSING,
                        Status.COMPLETED, Status.PROCESSING]


def test_a_batch_refused_as_a_whole_is_tried_claim_by_claim(backend, monkeypatch):
    """The server refuses a batch's command because of one statement (here injected
    where the command is sent): each claim is tried alone, only that one is refused."""
    held = claims(backend, 4)
    poisoned = held[2].activity_id
    send = acknowledgements.update_statements

    def refusing(collection, statements):
        if any(s[0].get("_id") == poisoned for s in statements):
            raise OperationFailure("refused: BSONObj size is invalid", 10334)
        return send(collection, statements)

    monkeypatch.setattr(acknowledgements, "update_statements", refusing)
    answers = backend.ack_success_many([(c, {"i": i}) for i, c in enumerate(held)])
    assert [a for i, a in enumerate(answers) if i != 2] == [AckOutcome.COMPLETED] * 3
    assert isinstance(answers[2], InvalidArgument)
    assert "BSONObj size is invalid" in str(answers[2])


def failing_one(backend, count: int, failing: int, message: str, **options: Any) -> Worker:
    """A burst worker over `count` activities `{"i": i}` whose handler raises `message`
    for i == `failing` only (a one-attempt activity), run to its end."""
    registry = HandlerRegistry()

    def job(payload: dict[str, Any]) -> Any:
        if payload["i"] == failing:
            raise RuntimeError(message)
        return payload

    registry.add("job", job)
    backend.enqueue_many([queue_module.ActivitySpec("job", {"i": i}, max_retries=1)
                          for i in range(count)])
    worker = Worker(backend, registry, burst=True, concurrency=2, poll_interval=0.2,
                    **options)
    worker.start()
    assert worker.join(timeout=60) is not None, "the worker did not exit"
    return worker


@pytest.mark.parametrize("fail_on_error", [False, True])
def test_a_worker_records_a_refused_result_as_a_failure_and_counts_it(backend, fail_on_error):
    validate(backend, "results", {"data.poison": {"$exists": False}})
    registry = HandlerRegistry()
    registry.add("job", lambda payload: {"poison": 1} if payload["i"] == 3 else payload)
    backend.enqueue_many([queue_module.ActivitySpec("job", {"i": i}) for i in range(12)])
    worker = Worker(backend, registry, burst=True, concurrency=4, poll_interval=0.2,
                    fail_on_error=fail_on_error)
    worker.start()
    assert worker.join(timeout=60) == (WorkerEnd.ERRORS if fail_on_error else WorkerEnd.STOPPED)
    assert worker.counters["succeeded"] == 11 and worker.counters["failed"] == 1
    acts = backend.db[backend.context.names.activities]
    assert acts.count_documents({"status": "completed"}) == 11
    refused = acts.find_one({"status": "failed"})
    assert refused["payload"] == {"i": 3}
    assert refused["last_error"].startswith("the result cannot be stored: ")
    assert "Document failed validation" in refused["last_error"]


def test_a_refused_failure_is_recorded_once_more_with_a_short_text(backend):
    """The server refuses the failure's update itself (a validator on `last_error`): it is
    recorded with a text saying so, and the other attempts of the batch are not held up."""
    validate(backend, "activities", {"last_error": {"$not": {"$regex": "poison"}}})
    worker = failing_one(backend, 6, 2, "poison pill")
    assert worker.end == WorkerEnd.STOPPED
    assert worker.counters["succeeded"] == 5 and worker.counters["dead_lettered"] == 1
    acts = backend.db[backend.context.names.activities]
    dead = acts.find_one({"status": "dead_letter"})
    assert dead["payload"] == {"i": 2}
    assert dead["last_error"].startswith("the failure could not be recorded: ")
    assert acts.count_documents({"status": "processing"}) == 0


def test_a_failure_refused_even_when_short_is_given_up_and_counted(backend):
    """Every failure text refused (a validator allowing no `last_error` at all): the
    outcome is given up, counted `unacknowledged` (which fails --fail-on-error), and the
    others are written; its lease is left to run out for the reaper."""
    validate(backend, "activities", {"last_error": {"$exists": False}})
    worker = failing_one(backend, 4, 1, "refused whatever it says", fail_on_error=True)
    assert worker.end == WorkerEnd.ERRORS
    assert worker.counters["succeeded"] == 3 and worker.counters["unacknowledged"] == 1
    acts = backend.db[backend.context.names.activities]
    assert acts.count_documents({"status": "completed"}) == 3
    assert acts.find_one({"status": "processing"})["payload"] == {"i": 1}


def test_concurrent_ack_success_calls_sharing_a_batch_get_their_own_answers(backend):
    """Library callers of `ack_success` from many threads share batches (group commit):
    the one whose result is refused gets InvalidArgument, the others complete."""
    from concurrent.futures import ThreadPoolExecutor

    held = claims(backend, 8)
    results: list[Any] = [{"i": i} for i in range(8)]
    results[5] = {"bad": math.inf}

    def ack(i: int) -> Any:
        try:
            return backend.ack_success(held[i], results[i])
        except InvalidArgument as exc:
            return exc

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(ack, range(8)))
    assert isinstance(answers[5], InvalidArgument) and "NaN or Infinity" in str(answers[5])
    assert [a for i, a in enumerate(answers) if i != 5] == [AckOutcome.COMPLETED] * 7


def test_an_ack_the_server_interrupts_is_written_later_not_recorded_as_failed(backend):
    """A server shutting down or stepping down answers a batch with write errors of a
    "not now" code (11600 InterruptedAtShutdown here, injected by a proxy): an outage,
    not a refusal. The worker keeps the success and writes it once the server takes it;
    the attempt is never recorded as failed (it once was: "the result cannot be stored")."""
    import dataclasses

    from runnerq_cli.backend.api import RunnerQ
    from tests.stalling_proxy import InterruptingProxy

    proxy = InterruptingProxy(backend.settings.uri, backend.context.names.results, times=2)
    try:
        through = RunnerQ(dataclasses.replace(backend.settings,
                                              uri=proxy.uri(backend.settings.uri)))
        registry = HandlerRegistry()
        registry.add("job", lambda payload: {"done": payload["i"]})
        through.enqueue(queue_module.ActivitySpec("job", {"i": 7}))
        worker = Worker(through, registry, burst=True, concurrency=1, poll_interval=0.2)
        worker.start()
        assert worker.join(timeout=60) is WorkerEnd.STOPPED
    finally:
        proxy.close()
    assert proxy.interrupted == 2  # both answered "not now"; the third try went through
    assert worker.counters["succeeded"] == 1 and worker.counters["failed"] == 0
    act = backend.db[backend.context.names.activities].find_one({})
    assert act["status"] == "completed" and "last_error" not in act
    assert backend.db[backend.context.names.results].find_one({})["data"] == {"done": 7}


def test_interrupted_codes_are_outages_wherever_they_come(backend):
    """The same codes in a command's error or a bulk write's errors: to be tried later."""
    from pymongo.errors import BulkWriteError, WriteError

    from runnerq_cli.backend.store.failures import failure, refusal, server_away
    from runnerq_cli.errors import WriteRefused, WriteUnconfirmed, retry_later

    for code in (91, 189, 10107, 11600, 11602):
        assert retry_later(failure(OperationFailure("not now", code)))
        assert server_away(OperationFailure("not now", code))  # below the boundary too
        bulk = BulkWriteError({"writeErrors": [{"index": 0, "code": code, "errmsg": "x"}]})
        assert isinstance(refusal(bulk), WriteUnconfirmed)
        assert isinstance(refusal(WriteError("x", code, {"errmsg": "x"})), WriteUnconfirmed)
    assert not retry_later(failure(OperationFailure("bad hint", 2)))
    validation = BulkWriteError({"writeErrors": [{"index": 0, "code": 121, "errmsg": "no"}]})
    assert isinstance(refusal(validation), WriteRefused)
