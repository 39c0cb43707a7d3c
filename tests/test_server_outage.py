"""A server that goes away and comes back while a worker runs: nothing is lost.

The server is the dev server on an SQLite file (so its data survives the
restart, as a real MongoDB's would), stopped and started again on the same
port while a worker process is draining the queue.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pymongo import MongoClient

from runnerq_cli import connect
from tests.helpers import dev_server_command
from tests.waiting import LineReader, wait_until

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(env: dict[str, str], port: int, path: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [*dev_server_command(), "--port", str(port), "--path", str(path)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    assert proc.stdout is not None
    try:  # read with a deadline (and drained from then on, so the pipe never fills)
        LineReader(proc.stdout).wait_for(lambda line: "mongodb://" in line, timeout=30,
                                         message="the dev server to start")
    except AssertionError:
        proc.kill()
        raise
    return proc


def stop(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.wait(20)


def test_worker_survives_a_server_restart_and_completes_everything_once(cli_env, tmp_path):
    port = free_port()
    uri = f"mongodb://127.0.0.1:{port}/?directConnection=true"
    env = {**cli_env, "RUNNERQ_MONGO_URI": uri, "RUNNERQ_DATABASE": "outage",
           "RUNNERQ_SERVER_SELECTION_TIMEOUT": "2s", "PYTHONPATH": str(ROOT)}
    data = tmp_path / "server.sqlite"
    server = start_server(env, port, data)
    worker = None
    try:
        subprocess.run([sys.executable, "-m", "runnerq_cli", "init-indexes"], env=env,
                       check=True, capture_output=True, timeout=60)
        lines = "".join(f'{{"type": "sleep", "payload": {{"seconds": 1, "n": {n}}}}}\n'
                        for n in range(12))
        subprocess.run([sys.executable, "-m", "runnerq_cli", "enqueue", "--from", "-"],
                       input=lines, env=env, check=True, capture_output=True, text=True,
                       timeout=60)
        worker = subprocess.Popen(
            [sys.executable, "-m", "runnerq_cli", "worker", "--app", "tests.worker_handlers",
             "--burst", "--concurrency", "2", "--lease", "3s", "--poll-interval", "0.5s",
             "--log-format", "plain"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True)
        assert worker.stdout is not None
        log = LineReader(worker.stdout)

        with MongoClient(uri, uuidRepresentation="standard") as client:
            activities = client.outage.runnerq_tests_activities
            wait_until(lambda: activities.count_documents({"status": "completed"}) >= 3,
                       timeout=60, message="the worker to make progress")
        # Each activity takes 1 s on 2 slots: after 3 of 12, about 4 s of work remain,
        # so the worker is still busy when ...
        stop(server)  # ... the server goes away mid-run, until the worker meets it ...
        log.wait_for(lambda line: " WARNING " in line or " ERROR " in line, timeout=60,
                     message="the worker to meet the outage")
        server = start_server(env, port, data)  # ... and comes back with its data

        assert worker.wait(timeout=180) == 0, "".join(log.lines)
        output = "".join(log.lines) + log.rest()
        # The worker did meet the outage (a failed claim, ack, renewal or chore is
        # logged as a warning), and carried on.
        assert " WARNING " in output or " ERROR " in output, output
        with MongoClient(uri, uuidRepresentation="standard") as client:
            db = client.outage
            docs = list(db.runnerq_tests_activities.find())
            assert len(docs) == 12
            assert {d["status"] for d in docs} == {"completed"}, output
            assert db.runnerq_tests_results.count_documents({}) == 12
        queue = connect(uri, database="outage", queue="tests")
        for doc in docs:  # exactly one terminal transition each, as users see the history
            shown = [e.event_type for e in queue.get_activity_events(doc["_id"])]
            assert shown.count("Completed") == 1, (doc["_id"], shown)
            assert "Traceback" not in output
    finally:
        if worker is not None and worker.poll() is None:
            worker.kill()
        if server.poll() is None:
            stop(server)


def test_a_handler_learns_its_claim_is_presumed_lost_when_the_server_stays_away(
        cli_env, tmp_path):
    """Renewals fail until the lease runs out: the handler's ctx.should_stop turns true."""
    import threading

    from runnerq_cli.backend.api import RunnerQ
    from runnerq_cli.config import load_settings
    from runnerq_cli.worker.engine import Worker
    from runnerq_cli.worker.handlers import HandlerRegistry
    from tests.helpers import worker_log

    port = free_port()
    uri = f"mongodb://127.0.0.1:{port}/?directConnection=true"
    server = start_server({**cli_env, "RUNNERQ_MONGO_URI": uri}, port, tmp_path / "s.sqlite")
    seen: dict[str, object] = {}
    running = threading.Event()
    registry = HandlerRegistry()

    @registry.handler("long")
    def long(payload, ctx):
        running.set()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and not ctx.should_stop:
            time.sleep(0.05)
        seen["should_stop"] = ctx.should_stop
        return None

    try:
        settings = load_settings(None, overrides={
            "uri": uri, "database": "presumed", "queue": "tests",
            "server_selection_timeout": "0.5s"}, environ={"RUNNERQ_CONFIG": ""})
        backend = RunnerQ(settings)
        backend.maintenance.init_indexes()
        backend.enqueue("long", {})
        worker = Worker(backend, registry, lease=1.5, concurrency=1)
        with worker_log("plain", "info") as log:
            worker.start()
            assert running.wait(30)
            stop(server)  # gone for longer than the lease
            wait_until(lambda: "should_stop" in seen, timeout=15,
                       message="the handler to give up its claim")
            assert seen.get("should_stop") is True
            assert "claim presumed lost" in log.getvalue()
            worker.stop(force=True)
            worker.join(10)
    finally:
        if server.poll() is None:
            stop(server)
