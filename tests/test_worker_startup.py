"""Signals at every moment of a worker process's start-up get the documented clean exit.

A SIGTERM before the engine had installed its handlers used to kill the worker
the default way (exit 143, nothing logged). Each test here signals a real
`python -m runnerq_cli worker` process at one moment of its start-up, found by
waiting for a condition (never a fixed time), and expects exit 0 with the
worker's "worker stopped" line, nothing claimed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from runnerq_cli.argv import ROOT_OPTIONS_WITH_VALUE, command_word
from runnerq_cli.backend.domain.models import Status
from runnerq_cli.cli.exits import ExitCode
from tests.helpers import default_signals
from tests.waiting import wait_until

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent

# A handler module whose import takes as long as the test wants: it says it is being
# imported, then waits for the test's go-ahead (a start-up with slow imports).
SLOW_MODULE = """
import os, pathlib, time
from runnerq_cli import HandlerRegistry

here = pathlib.Path(os.environ["SLOW_START_DIR"])
(here / "importing").touch()
deadline = time.monotonic() + 60
while not (here / "go").exists() and time.monotonic() < deadline:
    time.sleep(0.01)
registry = HandlerRegistry()
registry.add("echo", lambda payload: payload)
"""


class Starting:
    """A worker process started with default signal dispositions (or SIGINT ignored)."""

    def __init__(self, env: dict[str, str], tmp_path: Path, *, ignore_sigint: bool = False):
        (tmp_path / "slow_start_handlers.py").write_text(textwrap.dedent(SLOW_MODULE))
        self.dir = tmp_path
        self.log_path = tmp_path / "worker.log"
        preexec = _sigint_ignored if ignore_sigint else default_signals
        with self.log_path.open("w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "runnerq_cli", "worker", "--app", "slow_start_handlers",
                 "--log-format", "plain", "--poll-interval", "0.2"],
                cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT, preexec_fn=preexec,
                env={**env, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}",
                     "SLOW_START_DIR": str(tmp_path)})

    @property
    def log(self) -> str:
        return self.log_path.read_text()

    def go(self) -> None:
        (self.dir / "go").touch()

    def catches_sigterm(self) -> bool:
        """The process has a handler for SIGTERM (Linux: SigCgt in /proc/PID/status)."""
        try:
            status = Path(f"/proc/{self.proc.pid}/status").read_text()
        except OSError:
            return False
        caught = next(line for line in status.splitlines() if line.startswith("SigCgt:"))
        return bool(int(caught.split()[1], 16) & (1 << (signal.SIGTERM - 1)))

    def finish(self, timeout: float = 60) -> int:
        try:
            return self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()


def _sigint_ignored() -> None:
    default_signals()
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.fixture
def starting(cli_env, tmp_path):
    started: list[Starting] = []

    def start(**options) -> Starting:
        worker = Starting(cli_env, tmp_path, **options)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        if worker.proc.poll() is None:
            worker.proc.kill()
            worker.proc.wait(10)


def _assert_clean_stop(worker: Starting, backend, aid, code: int = 0) -> None:
    assert worker.finish() == code, worker.log
    assert "worker stopped" in worker.log and "Traceback" not in worker.log
    assert backend.get_activity(aid).status == Status.PENDING
    assert backend.registry.list_workers() == []


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux /proc")
def test_sigterm_as_soon_as_the_process_can_catch_it(backend, starting):
    aid = backend.enqueue("echo", {}).activity_id
    worker = starting()
    wait_until(worker.catches_sigterm, timeout=30, interval=0.001,
               message="the process to catch SIGTERM")
    worker.proc.send_signal(signal.SIGTERM)
    worker.go()
    _assert_clean_stop(worker, backend, aid)
    assert "stop signal received during start-up" in worker.log


def test_sigterm_while_the_handlers_are_imported(backend, starting):
    aid = backend.enqueue("echo", {}).activity_id
    worker = starting()
    wait_until(lambda: (worker.dir / "importing").exists(), message="the handlers' import")
    worker.proc.send_signal(signal.SIGTERM)
    worker.go()
    _assert_clean_stop(worker, backend, aid)
    assert "stop signal received during start-up" in worker.log


def test_two_signals_during_start_up_stop_at_once(backend, starting):
    aid = backend.enqueue("echo", {}).activity_id
    worker = starting()
    wait_until(lambda: (worker.dir / "importing").exists(), message="the handlers' import")
    worker.proc.send_signal(signal.SIGTERM)
    worker.proc.send_signal(signal.SIGINT)
    worker.go()
    _assert_clean_stop(worker, backend, aid, ExitCode.INTERRUPTED)


def test_sigterm_right_after_the_first_log_line(backend, starting):
    worker = starting()
    worker.go()
    wait_until(lambda: "worker started" in worker.log, message="the first log line")
    aid = backend.enqueue("never_claimed", {}).activity_id  # not a handled type
    worker.proc.send_signal(signal.SIGTERM)
    _assert_clean_stop(worker, backend, aid)


def test_sigint_stops_a_worker_that_inherited_it_ignored(backend, starting):
    worker = starting(ignore_sigint=True)
    wait_until(lambda: (worker.dir / "importing").exists(), message="the handlers' import")
    worker.go()
    wait_until(lambda: "worker started" in worker.log, message="the first log line")
    aid = backend.enqueue("never_claimed", {}).activity_id
    worker.proc.send_signal(signal.SIGINT)
    _assert_clean_stop(worker, backend, aid)


@pytest.mark.parametrize(("argv", "word"), [
    (["worker", "--burst"], "worker"),
    (["--queue", "worker", "enqueue", "t"], "enqueue"),
    (["--queue=q", "--uri", "mongodb://h", "worker"], "worker"),
    (["-c", "x.yaml", "--db", "d", "worker"], "worker"),
    (["enqueue", "worker"], "enqueue"),
    (["--version"], None),
    (["--", "worker"], None),
])
def test_the_command_word_is_found_without_the_cli(argv, word):
    assert command_word(argv) == word


def test_the_root_options_that_take_a_value_are_known():
    from runnerq_cli.cli.app import _root_command

    root = _root_command()
    with_value = {opt for param in root.params if not getattr(param, "is_flag", True)
                  for opt in param.opts + param.secondary_opts}
    assert with_value == ROOT_OPTIONS_WITH_VALUE
