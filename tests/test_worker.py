"""The worker engine in-process: handlers, outcomes, retries, timeouts, leases.

Each test runs a real `Worker` against the test server (its own database) in
burst mode or in a background thread, then checks the activity documents,
results and counters.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime

import pytest

from runnerq_cli import ActivitySpec
from runnerq_cli.backend.domain.models import Status
from runnerq_cli.errors import InvalidArgument
from runnerq_cli.worker.api import build_registry
from runnerq_cli.worker.engine import Worker, WorkerEnd
from runnerq_cli.worker.handlers import HandlerRegistry, load_app
from tests import worker_handlers
from tests.helpers import worker_log
from tests.waiting import wait_until


def make_worker(backend, registry=None, **options) -> Worker:
    options.setdefault("burst", True)
    options.setdefault("poll_interval", 0.2)
    return Worker(backend, registry if registry is not None else worker_handlers.registry,
                  **options)


def activity(backend, activity_id):
    return backend.get_activity(activity_id)


@pytest.mark.partitioned
def test_success_stores_result_and_counts(backend):
    aid = backend.enqueue("echo", {"x": 1}, metadata={"k": "v"}).activity_id
    worker = make_worker(backend)
    with worker_log("json", "info") as stream:
        assert worker.run(install_signals=False) == WorkerEnd.STOPPED
    act = activity(backend, aid)
    assert act.status == Status.COMPLETED
    result = backend.get_result(aid)
    assert result.state == "Ok"
    assert result.data == {"echo": {"x": 1}, "attempt": 1, "type": "echo", "id": str(aid),
                           "metadata": {"k": "v"}}
    assert worker.counters["claimed"] == 1 and worker.counters["succeeded"] == 1
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    outcomes = [r for r in lines if r.get("event") == "activity"]
    assert outcomes[0]["outcome"] == "completed" and outcomes[0]["activity_id"] == str(aid)
    # events and results are copied out of the outbox by the end of the run
    types = [e.event_type for e in backend.get_activity_events(aid)]
    assert {"Completed", "ResultStored"} <= set(types)
    assert "outbox" not in backend.db[backend.context.names.activities].find_one({"_id": aid})
    # a clean stop removes the worker from the registry
    assert backend.registry.list_workers() == []


def test_plain_async_and_payload_only_handlers(backend):
    a = backend.enqueue("async_echo", {"value": 7}).activity_id
    b = backend.enqueue("payload_only", {"value": "v"}).activity_id
    assert make_worker(backend).run(install_signals=False) == WorkerEnd.STOPPED
    assert backend.get_result(a).data == {"async": True, "value": 7}
    assert backend.get_result(b).data == "v"


@pytest.mark.partitioned
def test_retryable_failure_backs_off_then_dead_letters(backend):
    aid = backend.enqueue("boom", {}, max_retries=2, retry_delay_seconds=1).activity_id
    worker = make_worker(backend, fail_on_error=True)
    assert worker.run(install_signals=False) == WorkerEnd.ERRORS
    act = activity(backend, aid)
    assert act.status == Status.SCHEDULED and act.retry_count == 1
    assert "RuntimeError: boom on attempt 1" in act.last_error
    delay = (act.scheduled_at - act.last_error_at).total_seconds()
    assert delay == pytest.approx(2.0, abs=0.01)  # base 1 × 2^(0+1)
    assert worker.counters["retried"] == 1
    # not due yet: a second burst finds nothing to do
    again = make_worker(backend)
    assert again.run(install_signals=False) == WorkerEnd.STOPPED and again.counters["claimed"] == 0
    wait_until(lambda: datetime.now(UTC) >= act.scheduled_at, timeout=10,
               message="the retry to come due")
    last = make_worker(backend, fail_on_error=True)
    assert last.run(install_signals=False) == WorkerEnd.ERRORS
    act = activity(backend, aid)
    assert act.status == Status.DEAD_LETTER and act.retry_count == 1
    assert last.counters["dead_lettered"] == 1
    assert backend.get_result(aid).data["type"] == "dead_letter"
    assert [d.activity.id for d in backend.list_dead_letter()] == [aid]


def test_non_retryable_failure(backend):
    aid = backend.enqueue("fatal", {}, max_retries=5).activity_id
    worker = make_worker(backend)
    assert worker.run(install_signals=False) == WorkerEnd.STOPPED  # no --fail-on-error
    act = activity(backend, aid)
    assert act.status == Status.FAILED and act.retry_count == 0
    assert act.last_error == "bad input: cannot be retried"
    assert backend.get_result(aid).data == {"error": "bad input: cannot be retried",
                                            "type": "non_retryable"}
    assert worker.counters["failed"] == 1


def test_unknown_type_is_left_pending_with_or_without_types(backend):
    # A worker claims only the types it has handlers for (tests/test_worker_types.py).
    aid = backend.enqueue("nobody_handles_this", {}).activity_id
    limited = make_worker(backend, types=["echo"])
    assert limited.run(install_signals=False) == WorkerEnd.STOPPED
    assert activity(backend, aid).status == Status.PENDING and limited.counters["claimed"] == 0
    worker = make_worker(backend)
    assert worker.run(install_signals=False) == WorkerEnd.STOPPED
    act = activity(backend, aid)
    assert act.status == Status.PENDING and act.last_error is None
    assert worker.counters["claimed"] == 0


def test_types_without_a_handler_are_refused(backend):
    with pytest.raises(InvalidArgument, match="without a handler"):
        make_worker(backend, types=["echo", "missing"])
    with pytest.raises(InvalidArgument, match="no handler to run"):
        make_worker(backend, registry=HandlerRegistry())


@pytest.mark.parametrize(("option", "value"), [
    ("lease", float("nan")), ("lease", float("inf")), ("lease", 0.5),
    ("poll_interval", float("nan")), ("poll_interval", 1e9),
    ("shutdown_timeout", float("inf")), ("shutdown_timeout", -1.0)])
def test_the_python_api_refuses_the_durations_the_cli_refuses(backend, option, value):
    """Bounds are the settings' own, for embedders too (a nan lease never expires)."""
    with pytest.raises(InvalidArgument, match=option):
        make_worker(backend, **{option: value})


def test_timeout_of_sync_and_async_handlers_is_a_retryable_failure(backend):
    sync_id = backend.enqueue("sleep", {"seconds": 5}, timeout_seconds=1, max_retries=3,
                              retry_delay_seconds=60).activity_id
    async_id = backend.enqueue("async_sleep", {"seconds": 5}, timeout_seconds=1,
                               max_retries=3, retry_delay_seconds=60).activity_id
    started = time.monotonic()
    worker = make_worker(backend)
    assert worker.run(install_signals=False) == WorkerEnd.STOPPED
    assert time.monotonic() - started < 4.5
    for aid in (sync_id, async_id):
        act = activity(backend, aid)
        assert act.status == Status.SCHEDULED, act
        assert act.retry_count == 1
        assert "timed out after 1s" in act.last_error
    assert worker.counters["retried"] == 2


def test_lease_renewal_keeps_a_long_handler_claim(backend):
    aid = backend.enqueue("sleep", {"seconds": 3.5}).activity_id
    worker = make_worker(backend, lease=1.0)
    assert worker.run(install_signals=False) == WorkerEnd.STOPPED
    act = activity(backend, aid)
    assert act.status == Status.COMPLETED and act.retry_count == 0
    assert worker.counters["claims_lost"] == 0
    events = [e.event_type for e in backend.get_activity_events(aid, limit=100)]
    assert events.count("LeaseExtended") >= 3


def test_handler_can_enqueue_follow_up(backend):
    aid = backend.enqueue("spawn", {}).activity_id
    assert make_worker(backend).run(install_signals=False) == WorkerEnd.STOPPED
    child = backend.get_result(aid).data["child"]
    assert backend.get_result(child).data["echo"] == {"parent": str(aid)}


def test_max_activities(backend):
    for i in range(3):
        backend.enqueue("echo", {"i": i})
    worker = make_worker(backend, burst=False, max_activities=2, concurrency=1)
    assert worker.run(install_signals=False) == WorkerEnd.STOPPED
    assert worker.counters["succeeded"] == 2
    assert backend.db[backend.context.names.activities].count_documents(
        {"status": "pending"}) == 1


def test_background_worker_registers_and_stops(backend):
    worker = make_worker(backend, burst=False, concurrency=2)
    worker.start()
    assert worker.running.wait(10)
    entries = backend.registry.list_workers()
    assert [w.worker_id for w in entries] == [worker.worker_id]
    assert entries[0].concurrency == 2
    aid = backend.enqueue("echo", {}).activity_id
    wait_until(lambda: activity(backend, aid).status == Status.COMPLETED, timeout=10,
               message="the background worker to complete it")
    worker.stop()
    assert worker.join(10) == WorkerEnd.STOPPED
    assert backend.registry.list_workers() == []


def test_graceful_stop_releases_work_past_the_shutdown_timeout(backend):
    aid = backend.enqueue("sleep", {"seconds": 30}).activity_id
    worker = make_worker(backend, burst=False, shutdown_timeout=0.5)
    worker.start()
    wait_until(lambda: activity(backend, aid).status == Status.PROCESSING, timeout=10,
               message="the worker to claim it")
    worker.stop()
    assert worker.join(10) == WorkerEnd.RELEASED
    act = activity(backend, aid)
    assert act.status == Status.PENDING and act.retry_count == 0 and act.worker_id is None


def test_load_app_and_import_paths():
    reg = load_app("tests.worker_handlers")
    assert {"echo", "async_echo", "boom", "payload_only"} <= set(reg.types)
    built = build_registry(handlers={"x": "tests.worker_handlers:noop"},
                           commands={"sh": "cat"})
    assert built.get("x").func is worker_handlers.noop
    assert built.get("sh").kind == "shell"
    for bad in ("tests.worker_handlers", "tests.nope:f", "tests.worker_handlers:nope"):
        with pytest.raises(InvalidArgument):
            build_registry(handlers={"x": bad})


@pytest.mark.parametrize(("given", "hint"), [
    ("examples/fastapi_app.py", "not its file: 'examples.fastapi_app' (from this directory)"),
    ("mail.py", "not its file: 'mail' (from this directory)"),
    ("../a/b.py", "give a module name (package.module), not a file path"),
    ("/srv/app/tasks.py", "give a module name (package.module), not a file path"),
])
def test_a_file_path_for_a_module_says_what_to_give(given, hint):
    # A newcomer's first --app/--handler is often the file: one line, with the fix.
    with pytest.raises(InvalidArgument, match="cannot import") as app:
        load_app(given)
    assert str(app.value).endswith(hint)
    with pytest.raises(InvalidArgument) as handler:
        build_registry(handlers={"x": f"{given}:f"})
    assert str(handler.value).endswith(hint)


def test_a_relative_module_name_is_a_one_line_refusal():
    with pytest.raises(InvalidArgument, match=r"cannot import module '\.tasks'"):
        build_registry(handlers={"x": ".tasks:f"})


def test_shell_handlers(backend, tmp_path):
    script = tmp_path / "handler.py"
    script.write_text(
        "import json, os, sys\n"
        "payload = json.load(sys.stdin)\n"
        "mode = payload['mode']\n"
        "if mode == 'ok':\n"
        "    print(json.dumps({'got': payload, 'id': os.environ['RUNNERQ_ACTIVITY_ID'],\n"
        "                      'attempt': os.environ['RUNNERQ_ATTEMPT']}))\n"
        "elif mode == 'text':\n"
        "    print('plain words')\n"
        "elif mode == 'empty':\n"
        "    pass\n"
        "elif mode == 'fatal':\n"
        "    sys.stderr.write('x' * 5000 + 'the end'); sys.exit(100)\n"
        "elif mode == 'retry':\n"
        "    sys.stderr.write('temporary trouble'); sys.exit(3)\n"
        "elif mode == 'hang':\n"
        "    import time; time.sleep(60)\n")
    registry = build_registry(commands={"sh": f"{sys.executable} {script}"})
    ids = {mode: backend.enqueue("sh", {"mode": mode, "quote": "it's $HOME; rm -rf /"},
                                 max_retries=3, retry_delay_seconds=60,
                                 timeout_seconds=1 if mode == "hang" else 30).activity_id
           for mode in ("ok", "text", "empty", "fatal", "retry", "hang")}
    worker = make_worker(backend, registry=registry, concurrency=6)
    assert worker.run(install_signals=False) == WorkerEnd.STOPPED
    ok = backend.get_result(ids["ok"]).data
    assert ok["got"]["quote"] == "it's $HOME; rm -rf /"
    assert ok["id"] == str(ids["ok"]) and ok["attempt"] == "1"
    assert backend.get_result(ids["text"]).data == "plain words"
    assert backend.get_result(ids["empty"]).data is None
    fatal = activity(backend, ids["fatal"])
    assert fatal.status == Status.FAILED
    assert fatal.last_error.startswith("exit status 100: …")
    assert fatal.last_error.endswith("the end")
    assert len(fatal.last_error) < 2100
    retry = activity(backend, ids["retry"])
    assert retry.status == Status.SCHEDULED
    assert retry.last_error == "exit status 3: temporary trouble"
    hang = activity(backend, ids["hang"])
    assert hang.status == Status.SCHEDULED and "timed out" in hang.last_error


def test_shell_command_not_found_is_non_retryable(backend):
    registry = build_registry(commands={"sh": "/nonexistent/command --flag"})
    aid = backend.enqueue("sh", {}).activity_id
    make_worker(backend, registry=registry).run(install_signals=False)
    act = activity(backend, aid)
    assert act.status == Status.FAILED and "command not found" in act.last_error


def test_plain_log_lines(backend):
    backend.enqueue("fatal", {})
    with worker_log("plain", "info") as stream:
        make_worker(backend).run(install_signals=False)
    lines = stream.getvalue().splitlines()
    assert any(" failed fatal " in line and 'error="bad input' in line for line in lines)


def test_handler_raising_system_exit_fails_the_attempt_at_once(backend):
    """sys.exit() in a handler is a failed attempt, not a dead slot thread that leaves
    the activity held until its timeout and then runs a stale queued attempt."""
    registry = HandlerRegistry()

    @registry.handler("quits")
    def quits(payload):
        sys.exit(3)

    aid = backend.enqueue("quits", {}, max_retries=1, timeout_seconds=60).activity_id
    worker = Worker(backend, registry, burst=True, poll_interval=0.2, concurrency=1)
    worker.start()
    started = time.monotonic()
    worker.join(timeout=20)
    assert worker.end is not None, "worker still waiting on a dead handler thread"
    assert time.monotonic() - started < 20
    act = backend.get_activity(aid)
    assert act.status == Status.DEAD_LETTER
    assert "SystemExit" in (act.last_error or "")


def _nested(levels: int) -> dict:
    value: dict = {}
    for _ in range(levels):
        value = {"a": value}
    return value


@pytest.mark.parametrize("result", [{"n": 2**70}, _nested(120)], ids=["int-past-64-bits",
                                                                      "nested-120-levels"])
def test_a_result_mongodb_cannot_store_fails_the_activity_instead_of_stranding_it(backend,
                                                                                   result):
    """A JSON-valid result MongoDB refuses (an int past 64 bits; nesting past its 100
    levels, which only a real MongoDB refuses) made every ack raise: the worker retried
    the ack for 30 s, then left the claim to the reaper, which ran the handler again."""
    registry = HandlerRegistry()

    @registry.handler("huge_int")
    def huge_int(payload):
        return result

    aid = backend.enqueue("huge_int", {}, timeout_seconds=60).activity_id
    worker = Worker(backend, registry, burst=True, poll_interval=0.2)
    worker.start()
    worker.join(timeout=15)
    assert worker.end is not None, "worker stuck retrying an ack that cannot succeed"
    act = backend.get_activity(aid)
    assert act.status == Status.FAILED
    assert "cannot be stored" in (act.last_error or "")


class _Overlap:
    """A handler that records how many of its calls ran at once (thread-safe)."""

    def __init__(self, seconds: float) -> None:
        import threading

        self.seconds = seconds
        self.lock = threading.Lock()
        self.now = self.most = self.calls = 0

    def __call__(self, payload):
        with self.lock:
            self.now += 1
            self.calls += 1
            self.most = max(self.most, self.now)
        time.sleep(self.seconds)
        with self.lock:
            self.now -= 1
        return payload["i"]


@pytest.mark.partitioned
def test_busy_slots_claim_their_next_activity_within_concurrency(backend):
    # Slots that finish claim their next activity themselves, the claim loop claims
    # for idle slots: together they never run more than `concurrency` handlers.
    overlap = _Overlap(0.02)
    registry = HandlerRegistry()
    registry.add("overlap", overlap)
    ids = [r.activity_id for r in backend.enqueue_many(
        [ActivitySpec("overlap", {"i": i}) for i in range(60)])]
    worker = make_worker(backend, registry, concurrency=3)
    assert worker.run(install_signals=False) == WorkerEnd.STOPPED
    # never more than 3 at once; at least two overlapped (all three, unless a loaded
    # machine kept the slots from ever meeting: seen in CI with both suites running)
    assert overlap.calls == 60 and 2 <= overlap.most <= 3
    assert worker.counters["claimed"] == worker.counters["succeeded"] == 60
    assert [backend.get_result(i).data for i in ids] == list(range(60))


def test_max_activities_holds_while_busy_slots_claim(backend):
    registry = HandlerRegistry()
    registry.add("overlap", _Overlap(0.005))
    backend.enqueue_many([ActivitySpec("overlap", {"i": i}) for i in range(30)])
    worker = make_worker(backend, registry, burst=False, concurrency=4, max_activities=10)
    assert worker.run(install_signals=False) == WorkerEnd.STOPPED
    acts = backend.db[backend.context.names.activities]
    assert worker.counters["claimed"] == worker.counters["succeeded"] == 10
    assert acts.count_documents({"status": "completed"}) == 10
    assert acts.count_documents({"status": "pending"}) == 20


@pytest.mark.proof
def test_a_pause_stops_a_busy_worker_within_a_poll_interval(backend):
    # The slots keep themselves busy without the claim loop; the pause still holds.
    # The worker reads the pause state once per poll interval: the reads are counted
    # (and timed by the server's clock) instead of sleeping through intervals.
    import threading

    registry = HandlerRegistry()
    registry.add("overlap", _Overlap(0.01))
    for first in range(0, 500, 100):  # in parts: one large insert can time out on a busy box
        backend.enqueue_many([ActivitySpec("overlap", {"i": i}) for i in range(first, first + 100)])
    pause_done = threading.Event()
    reads_after_pause: list = []  # server time at the end of each read begun after the pause
    read_pause = backend.control.paused

    def counted_read():
        after = pause_done.is_set()
        state = read_pause()
        if after:
            reads_after_pause.append(backend.context.clock())
        return state

    backend.control.paused = counted_read
    poll = 0.3
    worker = make_worker(backend, registry, burst=False, concurrency=2, poll_interval=poll)
    worker.start()
    acts = backend.db[backend.context.names.activities]
    wait_until(lambda: acts.count_documents({"status": "completed"}) >= 20, timeout=30,
               message="the worker to be busy")
    backend.control.pause(reason="test")
    pause_done.set()
    # Three reads after the pause: the first one stopped the claims (within a poll
    # interval); a claim a slot had begun before it is long over by the third.
    wait_until(lambda: len(reads_after_pause) >= 3 and not worker.in_flight, timeout=30,
               message="the worker to read the pause and finish what it had claimed")
    claimed = acts.count_documents({"status": {"$ne": "pending"}})
    settled_at = reads_after_pause[1]
    wait_until(lambda: len(reads_after_pause) >= 6, timeout=30,
               message="three more poll intervals of the paused worker")
    assert acts.count_documents({"status": {"$ne": "pending"}}) == claimed
    assert acts.count_documents({"started_at": {"$gt": settled_at}}) == 0
    assert acts.count_documents({"status": "pending"}) > 0
    worker.stop()
    assert worker.join(15) == WorkerEnd.STOPPED


def test_a_burst_workers_abandoned_handler_thread_claims_nothing_once_run_returns(backend):
    # A timed-out plain handler cannot be killed; when it finally returns, its thread
    # must not claim new work for a worker that has already stopped.
    import threading

    release = threading.Event()
    registry = HandlerRegistry()
    registry.add("slow", lambda payload: release.wait(30))
    registry.add("echo", lambda payload: payload)
    backend.enqueue("slow", {}, timeout_seconds=1, max_retries=0)
    worker = make_worker(backend, registry, concurrency=1)
    assert worker.run(install_signals=False) == WorkerEnd.STOPPED
    late = backend.enqueue("echo", {"late": True}).activity_id
    release.set()  # the abandoned thread's handler returns now
    wait_until(lambda: worker._slots.busy == 0, timeout=30,
               message="the abandoned thread to finish its turn")
    assert activity(backend, late).status == Status.PENDING


def test_a_stop_while_a_slot_is_claiming_leaves_nothing_held(backend):
    # The claim loop can end while a slot's own claim is on its way: the drain waits
    # for it, so the activity is run (or released), never left held by a stopped worker.
    import threading

    registry = HandlerRegistry()
    registry.add("echo", lambda payload: payload)
    backend.enqueue_many([ActivitySpec("echo", {"i": i}) for i in range(200)])
    in_claim, stopped = threading.Event(), threading.Event()
    dequeue = backend.dequeue

    def slow_slot_dequeue(*args, **kwargs):
        if threading.current_thread().name.startswith("runnerq-slot") and not in_claim.is_set():
            in_claim.set()
            stopped.wait(10)
            wait_until(lambda: worker._flights.closed, timeout=10,
                       message="the claim loop to end")
        return dequeue(*args, **kwargs)

    backend.dequeue = slow_slot_dequeue
    worker = make_worker(backend, registry, burst=False, concurrency=2)
    worker.start()
    assert in_claim.wait(20)
    worker.stop()
    stopped.set()
    assert worker.join(20) == WorkerEnd.STOPPED
    returned_at = backend.context.clock()
    # A slot left claiming would claim (and run) now, for nobody, before going idle.
    wait_until(lambda: worker._slots.busy == 0, timeout=10, message="the slots to go idle")
    acts = backend.db[backend.context.names.activities]
    assert acts.count_documents({"status": "processing"}) == 0
    assert acts.count_documents({"started_at": {"$gt": returned_at}}) == 0
    assert acts.count_documents({"status": "completed"}) == worker.counters["succeeded"]


def test_a_graceful_stop_writes_outcomes_waiting_out_a_retry_back_off(backend):
    # The server did not take an acknowledgement (a hiccup) and answers again; a stop
    # arrives before the retry is due: the outcome is written at once, not left for
    # the reaper to run the activity again.
    from pymongo.errors import AutoReconnect

    registry = HandlerRegistry()
    registry.add("quick", lambda payload: "done")
    failures = {"left": 4}
    acks = backend.ack_success_many

    def hiccup(batch):
        if failures["left"]:
            failures["left"] -= 1
            raise AutoReconnect("hiccup")
        return acks(batch)

    backend.ack_success_many = hiccup
    worker = make_worker(backend, registry, burst=False, concurrency=2, shutdown_timeout=1.0)
    worker.start()
    quick = backend.enqueue("quick", {}).activity_id
    wait_until(lambda: not failures["left"], timeout=30, message="the hiccup to pass")
    worker.stop()
    assert worker.join(20) == WorkerEnd.STOPPED
    assert activity(backend, quick).status == Status.COMPLETED
    assert backend.get_result(quick).data == "done"


def test_claims_wait_while_outcomes_pile_up_unwritten(backend):
    # Acknowledgements are slow (the server is busy writing): a finished claim's lease
    # is no longer renewed, so the worker stops claiming until its outcomes are written
    # instead of running the whole queue with nothing acknowledged.
    registry = HandlerRegistry()
    registry.add("quick", lambda payload: payload)
    backend.enqueue_many([ActivitySpec("quick", {"i": i}) for i in range(40)])
    acks = backend.ack_success_many

    def slow_acks(batch):
        time.sleep(0.4)
        return acks(batch)

    backend.ack_success_many = slow_acks
    worker = make_worker(backend, registry, concurrency=2)
    worker.start()
    acts = backend.db[backend.context.names.activities]
    most = 0
    while worker.join(0.05) is None:
        most = max(most, acts.count_documents({"status": "processing"}))
    assert worker.end is WorkerEnd.STOPPED
    assert acts.count_documents({"status": "completed"}) == 40
    # Held (status processing) at most: c running, fewer than 2c + c waiting (a slot may
    # append after its claim passed the check), and the batch being written (as many):
    # 7c = 14 here, and never the whole queue of 40.
    assert 0 < most <= 14, most
