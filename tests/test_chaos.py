"""The proof suite: workers killed at random, drained by SIGTERM, and a server outage.

What is proven (figures and the command that reproduces them: docs/robustness.md):

- SIGKILL chaos: several worker processes drain a queue while a killer SIGKILLs
  random workers and starts replacements, and a `tail --cursor-file` is killed
  and resumed (a second tail, following only completions, runs throughout).
  Lost 0 (every activity completed, with its result), stuck 0, completed twice
  0 (one Completed event each); every repeated handler run is a run by a worker
  that was killed; the tail repeats only events it had printed within 0.2 s of
  its kill, and together its runs print the whole history.
- SIGTERM: workers stopped by SIGTERM with work in flight finish it, exit 0,
  and release nothing: no attempt is lost or counted as a retry.
- (The server outage: test_chaos_outage.py.)

The default run is a short form (CI runs it); `RUNNERQ_CHAOS=full` adds the
long forms of the issue (150 activities, 5 and 12 kills). Every loop here is
bounded in count and time; everything talks over loopback.
"""

from __future__ import annotations

import collections
import os
import random
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.backend.domain.models import Status
from runnerq_cli.backend.queue.queue import ActivitySpec
from tests.chaos_support import TailProcess, repeats_within, tail_no_follow, wait_for
from tests.test_worker_process import WorkerProcess

# A long proof of our own logic (pyproject.toml, "proof"): the oldest-versions run
# of .ci/run leaves it out.
pytestmark = pytest.mark.proof

REPEAT_BOUND = 0.2  # seconds (docs/robustness.md)
APP = ("--app", "tests.worker_handlers", "--log-format", "plain")
FULL = os.environ.get("RUNNERQ_CHAOS") == "full"
full_only = pytest.mark.skipif(not FULL, reason="long form: set RUNNERQ_CHAOS=full")
SEED = int(os.environ.get("RUNNERQ_CHAOS_SEED", "8"))


@pytest.fixture
def procs():
    """Every worker and tail a test starts, killed at the end whatever happens."""
    started: list = []
    yield started
    for proc in started:
        proc.kill() if isinstance(proc, WorkerProcess) else proc.stop()


def count(backend: RunnerQ, status: Status) -> int:
    return backend.context.activities.count_documents({"status": status.value})


@dataclass
class ChaosReport:
    """The figures of one chaos run (printed; docs/robustness.md quotes them)."""

    activities: int
    workers: int
    kills: int = 0
    tail_kills: int = 0
    lost: int = 0
    stuck: int = 0
    completed_twice: int = 0
    repeated_runs: int = 0
    unexplained_repeats: int = 0
    tail_repeats: int = 0
    tail_repeat_max_age: float = 0.0
    tail_missing: int = 0
    seconds: float = 0.0
    killed_pids: set[int] = field(default_factory=set)
    completions_tail: collections.Counter = field(default_factory=collections.Counter)

    def line(self) -> str:
        return (f"chaos seed={SEED}: {self.activities} activities, {self.workers} workers, "
                f"{self.kills} worker kills, {self.tail_kills} tail kills: lost {self.lost}, "
                f"stuck {self.stuck}, completed twice {self.completed_twice}, repeated handler "
                f"runs {self.repeated_runs} (unexplained {self.unexplained_repeats}), tail "
                f"repeats {self.tail_repeats} (oldest {self.tail_repeat_max_age:.3f}s before "
                f"a kill), tail missing {self.tail_missing}, {self.seconds:.1f}s")


def run_chaos(backend: RunnerQ, env: dict[str, str], tmp_path: Path, procs: list, *,
              activities: int, workers: int, kills: int, deadline: float) -> ChaosReport:
    rng = random.Random(SEED)
    started = time.monotonic()
    report = ChaosReport(activities, workers)
    marks = tmp_path / "marks"
    marks.mkdir()
    cursor_file = tmp_path / "tail.cursor"

    def tail() -> TailProcess:
        proc = TailProcess(env, "--cursor-file", str(cursor_file), "--poll-interval", "0.1")
        procs.append(proc)
        return proc

    def worker() -> WorkerProcess:
        proc = WorkerProcess(env, tmp_path, *APP, "--concurrency", "2", "--lease", "2s",
                             "--poll-interval", "0.2")
        procs.append(proc)
        return proc

    tails = [tail()]
    # A second tail, never killed, follows only completions (a filter on the same stream).
    completions = TailProcess(env, "--event", "Completed", "--poll-interval", "0.2",
                              "--cursor-file", str(tmp_path / "completions.cursor"))
    procs.append(completions)
    for path in (cursor_file, tmp_path / "completions.cursor"):  # both tails positioned
        wait_for(path.exists, timeout=30, what="the tails' first cursor files")
    ids = [str(r.activity_id) for r in backend.enqueue_many(
        [ActivitySpec("mark", {"dir": str(marks), "seconds": round(rng.uniform(0.05, 0.4), 3)},
                      max_retries=25, retry_delay_seconds=0)
         for _ in range(activities)])]
    live = [worker() for _ in range(workers)]
    tail_killed_at: list[float] = []
    for k in range(kills):
        # Kills spread over the run: the next one once enough more work is done.
        goal = activities * (k + 1) // (kills + 2)
        wait_for(lambda goal=goal: count(backend, Status.COMPLETED) >= goal,
                 timeout=deadline - (time.monotonic() - started), what=f"{goal} completed")
        time.sleep(rng.uniform(0.0, 0.3))  # a random moment, not right after a completion
        victim = live.pop(rng.randrange(len(live)))
        report.killed_pids.add(victim.proc.pid)
        os.kill(victim.proc.pid, signal.SIGKILL)
        victim.wait(10)
        report.kills += 1
        live.append(worker())
        if k == kills // 2:  # the tail dies too, mid-run, and is resumed
            tail_killed_at.append(tails[-1].kill())
            report.tail_kills += 1
            tails.append(tail())
    wait_for(lambda: count(backend, Status.COMPLETED) == activities,
             timeout=max(1.0, deadline - (time.monotonic() - started)),
             what="every activity completed")
    for proc in live:  # a replacement still starting up has no SIGTERM handler yet
        wait_for(lambda proc=proc: "worker started" in proc.log, timeout=30,
                 what="the replacement worker to start")
        proc.proc.send_signal(signal.SIGTERM)
    for proc in live:
        assert proc.wait(60) == 0, proc.log
    # A worker killed right after a completion may hold its events in its outbox
    # buffer; the reaper's repair copies them out after a grace period (60 s).
    # Do it now instead of waiting for it.
    backend.maintenance.repair_outboxes(0)
    everything = tail_no_follow(env)
    seen = lambda: {r["id"] for t in tails for r in (row for _, row in t.lines)}  # noqa: E731
    wait_for(lambda: seen() >= {r["id"] for r in everything}, timeout=30,
             what="the resumed tail to catch up")
    wait_for(lambda: completions.count >= activities, timeout=30,
             what="the completions tail to catch up")
    completions.proc.send_signal(signal.SIGINT)
    assert completions.finish(30) == 0, completions.stderr
    report.completions_tail = collections.Counter(
        row["activity_id"] for _, row in completions.lines)
    # Idle now: killed once more, the tail resumes with nothing to repeat.
    tail_killed_at.append(tails[-1].kill())
    report.tail_kills += 1
    final = tail_no_follow(env, "--cursor-file", str(cursor_file))

    # --- the figures
    docs = {str(d["_id"]): d for d in backend.context.activities.find()}
    report.lost = activities - sum(1 for i in ids if i in docs
                                   and docs[i]["status"] == Status.COMPLETED.value
                                   and backend.get_result(i) is not None)
    report.stuck = sum(1 for d in docs.values() if d["status"] in (
        Status.PENDING.value, Status.PROCESSING.value, Status.SCHEDULED.value))
    completed = collections.Counter(r["activity_id"] for r in everything
                                    if r["event_type"] == "Completed")
    report.completed_twice = sum(1 for i in ids if completed[i] > 1)
    missing_completed = [i for i in ids if completed[i] == 0]
    assert not missing_completed, f"no Completed event for {missing_completed[:5]}"
    runs: dict[str, list[int]] = collections.defaultdict(list)
    for path in marks.iterdir():
        parts = path.name.split("-")
        runs["-".join(parts[:5])].append(int(parts[5]))
    for pids in runs.values():
        report.repeated_runs += len(pids) - 1
        # One run may be by a worker that was never killed; each killed worker may
        # explain one interrupted run (it died with the activity in flight). Any
        # other run is a repeat nothing explains.
        per_pid = collections.Counter(pids)
        by_survivors = sum(n for pid, n in per_pid.items() if pid not in report.killed_pids)
        report.unexplained_repeats += max(0, by_survivors - 1) + sum(
            n - 1 for pid, n in per_pid.items() if pid in report.killed_pids)
    ages: list[float] = []
    for before, after, at in ((tails[0], tails[1].lines, tail_killed_at[0]),
                              (tails[1], [(0.0, r) for r in final], tail_killed_at[1])):
        ages += repeats_within(before, at, [row for _, row in after])
    report.tail_repeats = len(ages)
    report.tail_repeat_max_age = max(ages, default=0.0)
    printed = [r["id"] for t in tails for _, r in t.lines] + [r["id"] for r in final]
    report.tail_missing = len({r["id"] for r in everything} - set(printed))
    report.seconds = time.monotonic() - started
    print(report.line())
    return report


def assert_chaos_held(report: ChaosReport) -> None:
    assert report.kills > 0 and report.tail_kills == 2
    assert report.lost == 0, report.line()
    assert report.stuck == 0, report.line()
    assert report.completed_twice == 0, report.line()
    assert report.unexplained_repeats == 0, report.line()
    assert report.tail_repeat_max_age <= REPEAT_BOUND, report.line()
    assert report.tail_missing == 0, report.line()
    # The filtered tail that was never killed: each activity's completion, once.
    assert len(report.completions_tail) == report.activities
    assert set(report.completions_tail.values()) == {1}


@pytest.mark.slow
def test_sigkill_chaos_short(backend, cli_env, tmp_path, procs):
    """The short form CI runs: 40 activities, 3 workers, 3 worker kills, 2 tail kills."""
    report = run_chaos(backend, cli_env, tmp_path, procs, activities=40, workers=3, kills=3,
                       deadline=150)
    assert_chaos_held(report)


@pytest.mark.slow
@full_only
@pytest.mark.timeout(900)
@pytest.mark.parametrize("kills", [5, 12])
def test_sigkill_chaos_full(backend, cli_env, tmp_path, procs, kills):
    """The issue's runs: 150 activities, 4 workers, 5 and 12 worker kills."""
    report = run_chaos(backend, cli_env, tmp_path, procs, activities=150, workers=4,
                       kills=kills, deadline=600)
    assert_chaos_held(report)


def run_sigterm_drain(backend, env, tmp_path, procs, *, activities: int, workers: int,
                      seconds: float) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    ids = [r.activity_id for r in backend.enqueue_many(
        [ActivitySpec("mark", {"dir": str(marks), "seconds": seconds})
         for _ in range(activities)])]
    started = [WorkerProcess(env, tmp_path, *APP, "--concurrency", "2", "--lease", "3s",
                             "--poll-interval", "0.2", "--shutdown-timeout", "60s")
               for _ in range(workers)]
    procs.extend(started)
    # Every worker busy: both slots of each hold an activity.
    wait_for(lambda: count(backend, Status.PROCESSING) >= 2 * workers, timeout=60,
             what="every slot busy")
    in_flight = {d["_id"] for d in backend.context.activities.find(
        {"status": Status.PROCESSING.value}, {"_id": 1})}
    for proc in started:
        proc.proc.send_signal(signal.SIGTERM)
    for proc in started:
        assert proc.wait(60) == 0, proc.log
        assert "stopping: waiting for running activities" in proc.log
    docs = {d["_id"]: d for d in backend.context.activities.find()}
    # In flight at the signal: finished, not released; no attempt lost or counted twice.
    assert {docs[i]["status"] for i in in_flight} == {Status.COMPLETED.value}
    assert all(docs[i]["retry_count"] == 0 for i in ids)
    # Nothing stuck: whatever did not finish is back in (or still in) the queue, unclaimed.
    assert not [d for d in docs.values() if d["status"] == Status.PROCESSING.value]
    assert {d["status"] for d in docs.values()} <= {Status.COMPLETED.value,
                                                    Status.PENDING.value}
    assert backend.registry.list_workers() == []  # each deregistered on its way out
    # ... and a later worker finishes the rest; every activity ran exactly once.
    rest = WorkerProcess(env, tmp_path, *APP, "--burst", "--concurrency", "4",
                         "--poll-interval", "0.2")
    procs.append(rest)
    assert rest.wait(120) == 0, rest.log
    assert {d["status"] for d in backend.context.activities.find()} == {
        Status.COMPLETED.value}
    runs = collections.Counter("-".join(p.name.split("-")[:5]) for p in marks.iterdir())
    assert sorted(runs) == sorted(str(i) for i in ids) and set(runs.values()) == {1}
    print(f"sigterm drain: {activities} activities, {workers} workers, {len(in_flight)} in "
          f"flight at SIGTERM: all finished, 0 released, 0 run twice")


@pytest.mark.slow
def test_sigterm_drains_in_flight_work_short(backend, cli_env, tmp_path, procs):
    run_sigterm_drain(backend, cli_env, tmp_path, procs, activities=16, workers=2, seconds=1.5)


@pytest.mark.slow
@full_only
def test_sigterm_drains_in_flight_work_full(backend, cli_env, tmp_path, procs):
    run_sigterm_drain(backend, cli_env, tmp_path, procs, activities=60, workers=4, seconds=3)
