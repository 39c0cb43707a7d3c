"""The worker as real processes: signals, SIGKILL recovery, burst exit codes, two workers.

These spawn `python -m runnerq_cli worker` against the test database, as an
operator would, and assert exit codes and the activities' final state.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.backend.domain.models import Status
from runnerq_cli.backend.queue.queue import ActivitySpec
from runnerq_cli.cli.exits import ExitCode
from tests.helpers import default_signals
from tests.waiting import wait_until

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent
APP = ["--app", "tests.worker_handlers"]


class WorkerProcess:
    def __init__(self, env: dict[str, str], tmp_path: Path, *args: str) -> None:
        self.log_path = tmp_path / f"worker-{time.monotonic_ns()}.log"
        self._log = self.log_path.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "runnerq_cli", "worker", "--log-format", "plain", *args],
            cwd=ROOT, env={**env, "PYTHONPATH": str(ROOT)}, stdout=self._log,
            stderr=subprocess.STDOUT, preexec_fn=default_signals)

    @property
    def log(self) -> str:
        return self.log_path.read_text()

    def wait(self, timeout: float = 60) -> int:
        try:
            return self.proc.wait(timeout)
        finally:
            self._log.close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def status(backend: RunnerQ, aid) -> str:
    return backend.get_activity(aid).status


@pytest.fixture
def spawn(cli_env, tmp_path):
    started: list[WorkerProcess] = []

    def run(*args: str) -> WorkerProcess:
        worker = WorkerProcess(cli_env, tmp_path, *args)
        started.append(worker)
        return worker

    yield run
    for worker in started:
        worker.kill()


def test_burst_exit_codes(backend, run_cli_subprocess):
    backend.enqueue("echo", {"n": 1})
    ok = run_cli_subprocess("worker", "--burst", *APP, "--log-format", "plain", timeout=60,
                            env={"PYTHONPATH": str(ROOT)})
    assert ok.code == 0, ok.stderr
    assert " completed echo " in ok.stderr
    backend.enqueue("boom", {}, max_retries=1)
    bad = run_cli_subprocess("worker", "--burst", "--fail-on-error", *APP,
                             "--log-format", "json", env={"PYTHONPATH": str(ROOT)})
    assert bad.code == ExitCode.WORKER_ERRORS, bad.stderr
    assert '"outcome": "dead_lettered"' in bad.stderr
    usage = run_cli_subprocess("worker", "--burst", "--handler", "x=no_such_module:f")
    assert usage.code == ExitCode.USAGE and "cannot import" in usage.stderr


def test_exec_handler_from_the_command_line(backend, run_cli_subprocess):
    aid = backend.enqueue("shell", {"word": "hi"}).activity_id
    command = f"{sys.executable} -c 'import json,sys; print(json.dumps(json.load(sys.stdin)))'"
    result = run_cli_subprocess("worker", "--burst", "--exec", f"shell={command}")
    assert result.code == 0, result.stderr
    assert backend.get_result(aid).data == {"word": "hi"}


@pytest.mark.proof
def test_sigterm_drains_running_work(backend, spawn):
    aid = backend.enqueue("sleep", {"seconds": 2}).activity_id
    worker = spawn(*APP, "--poll-interval", "0.2")
    wait_until(lambda: status(backend, aid) == Status.PROCESSING, message="claim")
    worker.proc.send_signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.log
    assert status(backend, aid) == Status.COMPLETED
    assert "stopping: waiting for running activities" in worker.log
    assert backend.registry.list_workers() == []


@pytest.mark.proof
def test_second_signal_stops_at_once(backend, spawn):
    """A second signal: exit at once, the running work handed back, and the worker gone
    from the registry (not left live with its in-flight count until it goes stale)."""
    aids = [backend.enqueue("sleep", {"seconds": 60}).activity_id for _ in range(3)]
    aid = aids[0]
    worker = spawn(*APP, "-n", "3", "--poll-interval", "0.2", "--shutdown-timeout", "60s")
    wait_until(lambda: all(status(backend, a) == Status.PROCESSING for a in aids),
               message="three claims")
    worker.proc.send_signal(signal.SIGINT)
    wait_until(lambda: "stopping: waiting for running activities" in worker.log,
               message="the first signal to be handled")
    assert worker.proc.poll() is None  # still draining
    started = time.monotonic()
    worker.proc.send_signal(signal.SIGINT)
    assert worker.wait(15) == ExitCode.INTERRUPTED, worker.log
    assert time.monotonic() - started < 5
    # handed back at once rather than left to the reaper
    act = backend.get_activity(aid)
    assert act.status == Status.PENDING and act.retry_count == 0
    assert all(status(backend, a) == Status.PENDING for a in aids)
    assert "released=3" in worker.log, worker.log
    assert backend.registry.list_workers() == [], worker.log


@pytest.mark.proof
def test_sigkilled_worker_activity_completes_elsewhere(backend, spawn):
    aid = backend.enqueue("slow_first", {}, max_retries=3).activity_id
    first = spawn(*APP, "--lease", "2s", "--poll-interval", "0.2")
    wait_until(lambda: status(backend, aid) == Status.PROCESSING, message="claim")
    holder = backend.get_activity(aid).worker_id
    os.kill(first.proc.pid, signal.SIGKILL)
    first.wait(10)
    # (not --burst: a lease that has not expired yet is not due work)
    second = spawn(*APP, "--lease", "2s", "--poll-interval", "0.2")
    wait_until(lambda: status(backend, aid) == Status.COMPLETED, timeout=60,
               message="completion by the second worker")
    second.proc.send_signal(signal.SIGTERM)
    assert second.wait(30) == 0, second.log
    assert "reaper: expired leases" in second.log
    act = backend.get_activity(aid)
    assert act.status == Status.COMPLETED
    assert act.retry_count == 1 and f"lease expired (worker {holder})" in act.last_error
    assert backend.get_result(aid).data == {"attempt": 2}
    # the killed worker is still listed until its heartbeat goes stale
    assert holder in [w.worker_id for w in backend.registry.list_workers()]


@pytest.mark.proof
def test_two_processes_drain_one_queue_exactly_once(backend, spawn, tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    ids = [r.activity_id for r in backend.enqueue_many(
        [ActivitySpec("mark", {"dir": str(marks), "seconds": 0.05}) for _ in range(30)])]
    workers = [spawn(*APP, "--burst", "--concurrency", "2", "--poll-interval", "0.2")
               for _ in range(2)]
    codes = [w.wait(120) for w in workers]
    assert codes == [0, 0], [w.log for w in workers]
    assert all(status(backend, aid) == Status.COMPLETED for aid in ids)
    runs = [p.name.split("-")[:5] for p in marks.iterdir()]
    run_ids = ["-".join(parts) for parts in runs]
    assert len(run_ids) == 30 and set(run_ids) == {str(aid) for aid in ids}
    pids = {backend.get_result(aid).data["pid"] for aid in ids}
    assert len(pids) == 2, "both workers should have taken a share"


@pytest.mark.proof
def test_a_signal_after_worker_stopped_keeps_its_exit_code(backend, spawn):
    """Once "worker stopped end=stopped" is logged, stop signals arriving while the
    process exits (here: one every few milliseconds) change nothing: exit 0, not 143."""
    worker = spawn(*APP, "--poll-interval", "0.2")
    wait_until(lambda: "worker started" in worker.log, message="the worker to start")
    worker.proc.send_signal(signal.SIGTERM)
    wait_until(lambda: "worker stopped" in worker.log, interval=0.002,
               message="the worker to log that it stopped")
    while worker.proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            worker.proc.send_signal(signal.SIGTERM)
        time.sleep(0.003)
    assert worker.wait(30) == 0, worker.log
    assert "end=stopped" in worker.log


@pytest.mark.proof
def test_a_shell_handler_whose_child_holds_the_pipe_succeeds(backend, run_cli_subprocess):
    """The command exits 0 with its result; a process it left running holds its output
    open: the attempt succeeds with that result instead of timing out."""
    aid = backend.enqueue("held", {}, timeout_seconds=4, max_retries=1).activity_id
    done = run_cli_subprocess("worker", "--burst", "--log-format", "plain", "--exec",
                              """held=sh -c 'sleep 8 & echo "{\\"ok\\": 1}"'""", timeout=60)
    assert done.code == 0, done.stderr
    act = backend.get_activity(aid)
    assert act.status == Status.COMPLETED, act.last_error
    assert backend.get_result(aid).data == {"ok": 1}
