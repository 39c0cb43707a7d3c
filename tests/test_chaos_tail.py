"""`tail events --cursor-file` killed by SIGKILL and resumed: at most the one event being
printed at the kill printed again (and never one printed more than 0.2 s before it), in
every case, idle included; nothing lost. And a live tail prints every
event exactly once whatever the writers' clocks say: a writer whose time is 30 s old when
its write lands, hosts whose clock runs 10 s behind, batches that take seconds to commit.

The tail runs as a real process; the test stamps each line as it arrives,
kills the tail, resumes it from the file with `--no-follow`, and compares
with what a fresh tail of the whole history prints.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from bson import ObjectId

from runnerq_cli.backend.domain.documents import Event
from runnerq_cli.backend.domain.event_cursor import EventCursor
from runnerq_cli.backend.queue.queue import ActivitySpec
from runnerq_cli.cli.cursorfile import CursorFileSaver
from tests.chaos_support import (
    ROOT,
    LaggingClock,
    TailProcess,
    faketime_prefix,
    history_when_printed,
    repeats_within,
    tail_account,
    tail_no_follow,
    wait_for,
)
from tests.nx_fixtures import nx_server as _nx_server

# A long proof of our own logic (pyproject.toml, "proof"): the oldest-versions run
# of .ci/run leaves it out.
pytestmark = pytest.mark.proof

nx_server = _nx_server  # the change-stream server's fixture (nx-27017)
REPEAT_BOUND = 0.2  # seconds of events a killed tail may print again (docs/robustness.md)


@pytest.fixture
def tails():
    started: list[TailProcess] = []
    yield started
    for tail in started:
        tail.stop()


def start_tail(tails, env, path) -> TailProcess:
    # --settle 30: the guarantee holds for writes visible within `settle` of their server
    # position (design.md, "The settle window"); the dev server applies a command's 50
    # stamped documents together, and a CI machine running suites side by side has been
    # seen to make one such command outlast the default 5 s.
    tail = TailProcess(env, "--cursor-file", str(path), "--poll-interval", "0.05",
                       "--settle", "30")
    tails.append(tail)
    # The starting position is saved at once: a kill before any event resumes from it.
    wait_for(path.exists, timeout=30, what="the tail's first cursor file")
    return tail


def assert_exact(env, first: TailProcess, resumed: list[dict]) -> None:
    """Nothing lost: the killed run and the resumed one together print the whole history,
    the resumed run nothing twice."""
    everything = [row["id"] for row in tail_no_follow(env)]
    resumed_ids = [row["id"] for row in resumed]
    assert len(resumed_ids) == len(set(resumed_ids))
    assert set(first.ids()) | set(resumed_ids) == set(everything)


def test_idle_tail_killed_after_a_burst_repeats_nothing(backend, cli_env, tmp_path, tails):
    """The case that failed: 30 events, then silence, then SIGKILL. The cursor file used to
    be written only when the next event came, so the resumed tail printed 29 again."""
    path = tmp_path / "tail.cursor"
    tail = start_tail(tails, cli_env, path)
    backend.enqueue_many([ActivitySpec("burst", {"n": n}) for n in range(30)])
    wait_for(lambda: tail.count >= 30, timeout=30, what="30 events printed")
    # Idle for longer than the promise: the file must have caught up with the output.
    wait_for(lambda: time.monotonic() - tail.last_arrival() > REPEAT_BOUND + 0.1,
             timeout=10, what="an idle tail")
    killed_at = tail.kill()
    assert tail.count == 30
    backend.enqueue_many([ActivitySpec("after", {"n": n}) for n in range(5)])
    resumed = tail_no_follow(cli_env, "--cursor-file", str(path))
    assert repeats_within(tail, killed_at, resumed) == []
    assert [row["activity_type"] for row in resumed] == ["after"] * 5
    assert_exact(cli_env, tail, resumed)


def test_tail_killed_before_its_first_event_loses_nothing(backend, cli_env, tmp_path, tails):
    path = tmp_path / "tail.cursor"
    tail = start_tail(tails, cli_env, path)
    tail.kill()
    backend.enqueue_many([ActivitySpec("while_dead", {"n": n}) for n in range(3)])
    resumed = tail_no_follow(cli_env, "--cursor-file", str(path))
    assert [row["activity_type"] for row in resumed] == ["while_dead"] * 3


def test_tail_killed_while_events_flow_repeats_at_most_0_2_s(backend, cli_env, tmp_path,
                                                             tails):
    """Killed three times at random moments of a steady flow, resumed each time."""
    path = tmp_path / "tail.cursor"
    rng = random.Random(8)
    stop = threading.Event()

    def produce() -> None:  # a steady flow, bounded in count
        for n in range(1000):
            if stop.is_set():
                return
            backend.enqueue("flow", {"n": n})
            time.sleep(0.005)

    producer = threading.Thread(target=produce, daemon=True)
    runs: list[tuple[TailProcess, float]] = []
    try:
        current = start_tail(tails, cli_env, path)
        producer.start()
        for _ in range(3):
            wait_for(lambda t=current: t.count >= 15, timeout=60, what="15 events printed")
            time.sleep(rng.uniform(0.0, 0.3))  # the kill falls at a random moment of the flow
            assert producer.is_alive(), "the flow should still run at the kill"
            runs.append((current, current.kill()))
            current = start_tail(tails, cli_env, path)
        runs.append((current, current.kill()))
    finally:
        stop.set()
        producer.join(30)
    resumed = tail_no_follow(cli_env, "--cursor-file", str(path))
    ages: list[float] = []
    for (run, killed_at), after in zip(runs, [*[r for r, _ in runs[1:]], None], strict=True):
        rows = resumed if after is None else [row for _, row in after.lines]
        ages += repeats_within(run, killed_at, rows)
    print(f"tail killed {len(runs)} times in a flow of {sum(r.count for r, _ in runs)} lines: "
          f"{len(ages)} printed again, the oldest {max(ages, default=0):.3f}s before its kill")
    assert all(age <= REPEAT_BOUND for age in ages), sorted(ages)[-5:]
    assert len(ages) <= len(runs)  # at most the line being printed at each kill
    printed = {i for run, _ in runs for i in run.ids()} | {row["id"] for row in resumed}
    assert printed == {row["id"] for row in tail_no_follow(cli_env)}
    assert len(resumed) == len({row["id"] for row in resumed})


def test_cursor_file_that_cannot_be_written_is_a_clean_error(backend, cli_env, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "runnerq_cli", "tail", "events", "-o", "jsonl",
                           "--cursor-file", str(blocker / "under-a-file")], env=cli_env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error:") and "Traceback" not in proc.stderr
    assert proc.stdout == ""


def _event(n: int) -> Event:
    now = datetime.now(UTC)
    return Event(id=ObjectId(), activity_id=uuid.uuid4(), timestamp=now, event_type="Enqueued",
                 worker_id=None, detail={}, ingested_at=now + timedelta(milliseconds=n))


def test_saver_never_writes_a_position_ahead_of_the_output(tmp_path):
    """The stream advances the cursor before it hands the event over: a copy taken in
    between is one event ahead of the output, and must not be saved."""
    path = tmp_path / "c"
    cursor = EventCursor()
    saver = CursorFileSaver(str(path), lambda: cursor, every=3600)  # the timer stays out
    saver.start()
    saved = lambda: EventCursor.decode(path.read_text()).seen  # noqa: E731
    assert saved() == {}
    first, second = _event(1), _event(2)
    cursor.advance(first, 2.0)
    saver.printed()
    cursor.advance(second, 2.0)  # handed over, not printed yet
    assert saver.save_pending() is False and saved() == {}
    saver.printed()
    assert saver.save_pending() is True
    assert set(saved()) == {str(first.id), str(second.id)}
    saver.close()


def test_saver_catches_up_while_idle(tmp_path):
    path = tmp_path / "c"
    cursor = EventCursor()
    saver = CursorFileSaver(str(path), lambda: cursor, every=0.05)
    saver.start()
    try:
        events = [_event(n) for n in range(30)]
        for event in events:
            cursor.advance(event, 2.0)
            saver.printed()
        # No further event comes: the timer alone must bring the file up to date.
        wait_for(lambda: len(EventCursor.decode(path.read_text()).seen) == 30, timeout=5,
                 what="the idle saver to catch up")
    finally:
        saver.close()


def test_change_stream_tail_killed_when_idle_repeats_nothing(nx_server, tmp_path, tails,
                                                             cli_env):
    """The same promise on the change-stream path (nx-27017 offers watch()): there the
    stream waits in the server for the next change, and the file must still catch up."""
    from pymongo import MongoClient

    from runnerq_cli.backend.store.context import utc_now

    env = {**cli_env, "RUNNERQ_MONGO_URI": nx_server, "RUNNERQ_DATABASE": "rq_nx",
           "RUNNERQ_QUEUE": "nx"}
    client = MongoClient(nx_server, uuidRepresentation="standard", tz_aware=True)
    events = client["rq_nx"]["runnerq_nx_events"]

    def put(kind: str, n: int) -> None:
        now = utc_now()
        events.insert_one({"_id": ObjectId(), "activity_id": None, "activity_type": "t",
                           "timestamp": now, "event_type": kind, "worker_id": "w",
                           "detail": {"n": n}, "ingested_at": now})

    try:
        path = tmp_path / "tail.cursor"
        tail = TailProcess(env, "--mode", "change-stream", "--cursor-file", str(path))
        tails.append(tail)
        wait_for(path.exists, timeout=30, what="the tail's first cursor file")
        for n in range(30):
            put("Enqueued", n)
        wait_for(lambda: tail.count >= 30, timeout=30, what="30 events printed")
        wait_for(lambda: time.monotonic() - tail.last_arrival() > REPEAT_BOUND + 0.1,
                 timeout=10, what="an idle tail")
        killed_at = tail.kill()
        assert tail.count == 30, tail.stderr
        for n in range(3):
            put("Started", n)
        resumed = tail_no_follow(env, "--cursor-file", str(path))
        assert repeats_within(tail, killed_at, resumed) == []
        assert [row["event_type"] for row in resumed] == ["Started"] * 3
    finally:
        client.close()


# ------------------------------------------------- late writes, skewed clocks (issue 18)


def test_a_writer_whose_time_is_30_s_old_when_its_write_lands_is_printed(
        backend, settings, cli_env, tmp_path, tails):
    """An enqueue, a claim and acknowledgements whose writer chose its time 30 s before the
    write landed (a stall), while a normal writer keeps the tail's position at now: the
    old tail, positioned by those client times, never printed them."""
    from runnerq_cli.backend.api import RunnerQ

    tail = start_tail(tails, cli_env, tmp_path / "tail.cursor")
    stalled = RunnerQ(settings, clock=LaggingClock(30))
    backend.enqueue("normal", {"n": 0})
    wait_for(lambda: tail.count >= 1, timeout=30, what="the first event printed")
    done = stalled.enqueue("stalled", {}).activity_id
    backend.enqueue("normal", {"n": 1})
    [claim] = stalled.dequeue("stalled-worker", types=["stalled"])  # started_at 30 s old
    stalled.ack_success(claim, "done")
    retried = stalled.enqueue("stalled_retry", {}, max_retries=3).activity_id
    [attempt] = stalled.dequeue("stalled-worker", types=["stalled_retry"])
    stalled.ack_failure(attempt, "boom")  # Retrying, and the attempt's steps, stored late
    backend.enqueue("normal", {"n": 2})
    history = history_when_printed(cli_env, tail.ids)
    shown = [(row["activity_id"], row["event_type"]) for _, row in tail.lines]
    for step in ("Enqueued", "Dequeued", "Started", "Completed", "ResultStored"):
        assert (str(done), step) in shown
    for step in ("Enqueued", "Dequeued", "Started", "Retrying"):
        assert (str(retried), step) in shown
    missing, repeated = tail_account(tail.ids(), [row["id"] for row in history])
    print(f"stalled writer: {len(history)} events, live tail missing {missing}, "
          f"repeated {repeated}")
    assert (missing, repeated) == (0, 0)


def _cli(env, *args: str, skew: list[str] | None = None, wait: bool = True):
    command = [*(skew or []), sys.executable, "-m", "runnerq_cli", *args]
    if not wait:
        return subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc


def test_hosts_whose_clock_runs_10_s_behind_beside_normal_ones(backend, cli_env, tmp_path,
                                                                tails):
    """Producers and a worker 10 s behind (libfaketime) beside normal ones: every event of both
    printed once by a live tail (and by one killed and resumed midway)."""
    skew = faketime_prefix("-10s")
    if not skew:
        pytest.skip("faketime is not installed (Debian package faketime)")
    check = subprocess.run([*skew, sys.executable, "-c", "import time; print(time.time())"],
                           capture_output=True, text=True, timeout=30)
    assert float(check.stdout) < time.time() - 9, "faketime does not shift this clock"
    path = tmp_path / "tail.cursor"
    tail = start_tail(tails, cli_env, path)
    def produce(round_: int) -> None:
        for n in range(3):
            _cli(cli_env, "enqueue", "echo", "-p", json.dumps({"n": n, "r": round_}), skew=skew)
            _cli(cli_env, "enqueue", "echo", "-p", json.dumps({"n": n, "r": round_}))
        _cli(cli_env, "enqueue", "boom", "--max-retries", "2", "--retry-delay", "0s", skew=skew)
        _cli(cli_env, "enqueue", "fatal", "-p", "{}")

    def work(*names: str) -> None:
        workers = [_cli(cli_env, "worker", "--burst", "--app", "tests.worker_handlers",
                        "--worker-id", name, "-n", "2", skew=skew if name == "skewed" else None,
                        wait=False) for name in names]
        for worker in workers:
            assert worker.wait(120) == 0, worker.stderr.read() if worker.stderr else ""
            if worker.stderr:
                worker.stderr.close()

    produce(1)
    work("skewed")  # the skewed worker alone first (so it surely takes part), then both
    produce(2)
    work("skewed", "normal")
    history = history_when_printed(cli_env, tail.ids)
    by = {row.get("worker_id") for row in history}
    assert "skewed" in by, by
    missing, repeated = tail_account(tail.ids(), [row["id"] for row in history])
    print(f"clocks 10 s apart: {len(history)} events, live tail missing {missing}, "
          f"repeated {repeated}")
    assert (missing, repeated) == (0, 0)


def test_large_enqueue_batch_while_the_tail_is_killed_and_resumed(backend, cli_env, tmp_path,
                                                                  tails):
    """`enqueue --from` of 300 lines (seconds of commits on the dev server) while a tail
    follows; the tail is SIGKILLed midway and resumed from its cursor file: every Enqueued
    printed, nothing lost, nothing printed again beyond the 0.2 s the file may lag."""
    source = tmp_path / "batch.jsonl"
    source.write_text("".join(json.dumps({"type": "batch", "payload": {"n": n}}) + "\n"
                              for n in range(300)))
    path = tmp_path / "tail.cursor"
    first = start_tail(tails, cli_env, path)
    producer = _cli(cli_env, "enqueue", "--from", str(source), "-q", wait=False)
    wait_for(lambda: first.count >= 30, timeout=120, what="30 events printed")
    killed_at = first.kill()
    second = start_tail(tails, cli_env, path)
    assert producer.wait(180) == 0, producer.stderr.read() if producer.stderr else ""
    if producer.stderr:
        producer.stderr.close()
    history = history_when_printed(
        cli_env, lambda: {*first.ids(), *second.ids()})
    assert len(history) == 300 and {row["event_type"] for row in history} == {"Enqueued"}
    ages = repeats_within(first, killed_at, [row for _, row in second.lines])
    assert len(ages) <= 1 and all(age <= REPEAT_BOUND for age in ages), ages
    assert len(second.ids()) == len(set(second.ids()))
    printed = [*first.ids(), *[i for i in second.ids() if i not in set(first.ids())]]
    missing, repeated = tail_account(printed, [row["id"] for row in history])
    print(f"300 enqueued, tail killed after {first.count}: missing {missing}, "
          f"{len(ages)} printed again")
    assert (missing, repeated) == (0, 0)
