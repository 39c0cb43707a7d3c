"""Errors that say what happened (issue 25, point 6), run as a user runs the commands.

A slow server is "timed out after N s" with the advice of docs/operations.md
(a smaller --batch-size), not "unreachable ... start a local one".
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable

import pytest

from runnerq_cli.cli.exits import ExitCode
from tests.stalling_proxy import StallingProxy


@pytest.fixture
def slow(cli_env):
    """The test server behind a proxy that never answers `update` commands."""
    proxy = StallingProxy(cli_env["RUNNERQ_MONGO_URI"], {"update"})
    yield proxy, {**cli_env, "RUNNERQ_MONGO_URI": proxy.uri(cli_env["RUNNERQ_MONGO_URI"]),
                  "RUNNERQ_SOCKET_TIMEOUT": "1s", "RUNNERQ_CONNECT_TIMEOUT": "5s"}
    proxy.close()


def test_a_slow_server_times_out_with_the_batch_size_advice(queue, slow, run_cli_subprocess):
    proxy, env = slow
    for _ in range(3):
        queue.enqueue("job", {})
    res = run_cli_subprocess("cancel", "--status", "pending", "--max", "3", "--yes", env=env)
    assert res.code == ExitCode.UNAVAILABLE, res.stderr
    assert "update" in proxy.stalled
    line = res.stderr.strip().splitlines()[-1]
    assert "timed out after 1 s" in line and "--batch-size" in line, res.stderr
    assert "unreachable" not in res.stderr and "dev-server" not in res.stderr
    assert "Traceback" not in res.stderr


def test_interrupted_words_count_against_the_whole() -> None:
    """"cancelled 700 of 2,940" and "8,700 of 20,000 lines", as the commands print them."""
    from runnerq_cli.backend.queue.intake import EnqueueReport
    from runnerq_cli.cli.commands.actions import _interrupted_line
    from runnerq_cli.cli.enqueue_from import _interrupted_text, _report_text

    line = _interrupted_line("cancel", 700, 2940, 0, "abc")
    assert line.startswith("interrupted: cancelled 700 of 2,940; 2,240 not reached; last id")
    report = EnqueueReport(last_line=8700, enqueued=8650, interrupted=True, lines=8700)
    assert _interrupted_text(report, 20_000).startswith(
        "interrupted: 8,700 of 20,000 lines done, 8,650 enqueued; last line reached 8700")
    assert _report_text(report)[0] == ("enqueued 8,650 of the 8,700 lines read before the "
                                       "interruption")


def _cancel_midway(backend, env: dict[str, str], total: int, batch: int, reached: int,
                   then: Callable[[subprocess.Popen[str]], None]) -> tuple[int, str]:
    """`cancel` of `total` pending activities, `batch` at a time, in a process of its own;
    once `reached` are cancelled, `then(process)`; its exit code and standard error."""
    from tests.bulk_fixtures import insert_activities
    from tests.helpers import default_signals
    from tests.waiting import wait_until

    insert_activities(backend.context, total, "pending")
    proc = subprocess.Popen([sys.executable, "-m", "runnerq_cli", "cancel", "--status",
                             "pending", "--max", str(total), "--yes", "--batch-size",
                             str(batch)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=default_signals)
    try:
        wait_until(lambda: backend.context.activities.count_documents(
            {"status": "cancelled"}) >= reached, timeout=60, interval=0.01,
            message=f"{reached} cancelled")
        then(proc)
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, err


def test_an_interrupted_bulk_action_says_what_it_did_of_the_whole(backend, cli_env) -> None:
    code, err = _cancel_midway(backend, cli_env, 60, 3, 3,
                               lambda proc: proc.send_signal(signal.SIGTERM))
    assert code == ExitCode.INTERRUPTED, err
    done = backend.context.activities.count_documents({"status": "cancelled"})
    assert f"error: interrupted: cancelled {done} of 60; {60 - done} not reached" in err, err


def test_a_server_that_stalls_midway_times_out_and_says_how_far_it_got(
        backend, cli_env) -> None:
    """A bulk run on a server that stops answering after a few batches (`kill -STOP`):
    the driver's check of the server times out first (connect_timeout 1 s, a check every
    0.5 s) and cancels the command in flight. That is "timed out after 1 s" with the
    --batch-size advice (not "unreachable ... start a local one"), after the line of an
    interrupted run, "cancelled N of 40". (The command's own socket timeout is the test
    above's.)"""
    proxy = StallingProxy(cli_env["RUNNERQ_MONGO_URI"], set())
    uri = proxy.uri(cli_env["RUNNERQ_MONGO_URI"])
    env = {**cli_env, "RUNNERQ_MONGO_URI": uri + ("&" if "?" in uri else "?")
           + "heartbeatFrequencyMS=500", "RUNNERQ_SOCKET_TIMEOUT": "60s",
           "RUNNERQ_CONNECT_TIMEOUT": "1s",
           "RUNNERQ_SERVER_SELECTION_TIMEOUT": "1s"}  # the audit record's last word
    try:
        code, err = _cancel_midway(backend, env, 40, 1, 2,
                                   lambda _proc: proxy.stall_everything())
    finally:
        proxy.close()
    assert code == ExitCode.UNAVAILABLE, err
    lines = err.strip().splitlines()
    assert "timed out after 1 s" in lines[-1] and "--batch-size" in lines[-1], err
    assert "unreachable" not in err and "dev-server" not in err and "Traceback" not in err
    done = backend.context.activities.count_documents({"status": "cancelled"})
    assert any(f"interrupted: cancelled {n} of 40;" in err for n in (done, done - 1)), err
