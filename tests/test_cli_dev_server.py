"""`runnerq-mongo dev-server` as a real foreground process: serve, answer, stop on SIGTERM."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest
from pymongo import MongoClient

from runnerq_cli.cli.exits import ExitCode
from tests.waiting import LineReader

pytest.importorskip("mongoeco", reason="the dev server needs mongoeco (Python 3.13+)")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start(cli_env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "runnerq_cli", "dev-server", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=cli_env)


def _wait_for(proc: subprocess.Popen[str], marker: str, timeout: float = 30) -> list[str]:
    """stdout lines up to the one holding `marker` (the server prints it when listening),
    read with a deadline: a server that hangs silently fails the test, never blocks it."""
    assert proc.stdout is not None
    reader = LineReader(proc.stdout)
    try:
        reader.wait_for(lambda line: marker in line, timeout=timeout, message=repr(marker))
    except AssertionError as exc:
        proc.kill()
        raise AssertionError(f"{exc}; stderr: {proc.stderr.read()}") from None
    return [line.rstrip("\n") for line in reader.lines]


@pytest.fixture
def stopper() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_serves_until_sigterm(cli_env, stopper) -> None:
    port = _free_port()
    proc = _start(cli_env, "--port", str(port))
    stopper.append(proc)
    lines = _wait_for(proc, "Not for production")  # the last line
    uri_line = next(line for line in lines if line.startswith("URI: "))
    uri = uri_line.removeprefix("URI: ")
    assert f"127.0.0.1:{port}" in uri
    assert f"  export RUNNERQ_MONGO_URI={uri}" in lines
    with MongoClient(uri, serverSelectionTimeoutMS=5000) as client:
        assert client.admin.command("ping")["ok"] == 1
        client.scratch.things.insert_one({"a": 1})
        assert client.scratch.things.count_documents({}) == 1
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=15) == 0
    assert "Traceback" not in proc.stderr.read()


def test_init_creates_the_queue_indexes(cli_env, stopper) -> None:
    port = _free_port()
    proc = _start(cli_env, "--port", str(port), "--init")
    stopper.append(proc)
    lines = _wait_for(proc, "Not for production")  # the last line
    assert any("indexes ready" in line for line in lines)
    uri = next(line for line in lines if line.startswith("URI: ")).removeprefix("URI: ")
    with MongoClient(uri) as client:
        db = client[cli_env["RUNNERQ_DATABASE"]]
        assert "priority_-1_created_at_1__id_1_status_1_pending" in \
            db["runnerq_tests_activities"].index_information()
    proc.send_signal(signal.SIGINT)  # Ctrl-C stops it cleanly too
    assert proc.wait(timeout=15) == 0


def test_port_taken_is_a_one_line_error(cli_env) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "runnerq_cli", "dev-server", "--port",
                               str(port)], capture_output=True, text=True, env=cli_env,
                              timeout=30)
    assert proc.returncode == ExitCode.USAGE
    assert proc.stderr.splitlines() == [
        f"error: cannot listen on 127.0.0.1:{port}: Address already in use (is a MongoDB "
        "already running there? choose another --port)"]


def test_mongoeco_missing_is_a_one_line_error(cli_env, tmp_path) -> None:
    """Simulate Python < 3.13 (no mongoeco) by hiding the package from the process."""
    (tmp_path / "sitecustomize.py").write_text(
        "import sys\nsys.modules['mongoeco'] = None\n")
    env = {**cli_env, "PYTHONPATH": os.pathsep.join(
        [str(tmp_path), *filter(None, [cli_env.get("PYTHONPATH")])])}
    proc = subprocess.run([sys.executable, "-m", "runnerq_cli", "dev-server", "--port",
                           str(_free_port())], capture_output=True, text=True, env=env,
                          timeout=30)
    assert proc.returncode == ExitCode.CONFIG
    assert len(proc.stderr.splitlines()) == 1 and "mongoeco" in proc.stderr
    assert "Traceback" not in proc.stderr
