"""Shell handlers keep the worker's secrets out of reach, and die with the worker.

- A handler that prints its whole environment stores no password and no
  connection string in its result, so `result ID` cannot show one either.
- A worker killed by SIGKILL leaves no shell handler behind (Linux: a
  parent-death signal; docs/robustness.md says what other platforms do).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid

import pytest
from pymongo import MongoClient

from runnerq_cli.worker.handlers import ActivityContext
from runnerq_cli.worker.shell import HANDLER_VARIABLES, handler_environment, uri_secrets
from tests.chaos_support import ROOT, pid_alive, wait_for

PASSWORD = "S3cret-Passw0rd"
SECRET_URI = f"mongodb://app:{PASSWORD}@127.0.0.1:9/?authSource=admin"
PRINT_ENV = (f"{sys.executable} -c "
             "'import json, os; print(json.dumps(dict(os.environ)))'")


def context() -> ActivityContext:
    return ActivityContext(activity_id=uuid.uuid4(), activity_type="t", attempt=2, metadata={},
                           worker_id="host-1", timeout_seconds=30)


def test_handler_environment_withholds_settings_and_every_form_of_the_password():
    base = {"PATH": "/usr/bin:/bin", "HOME": "/home/u", "KEEP": "1",
            "RUNNERQ_MONGO_URI": "mongodb://u:p%40ss-w0rd@db:27017/",
            "RUNNERQ_CONFIG": "/etc/runnerq.yaml", "runnerq_database": "x",
            "DECODED": "p@ss-w0rd", "ENCODED": "x p%40ss-w0rd y",
            "COPY_OF_CONFIGURED": "mongodb://other:k3y-k3y-k3y@db2/",
            "TLS": "unrelated"}
    env = handler_environment(context(), queue="emails", base=base,
                              secrets=["mongodb://other:k3y-k3y-k3y@db2/?tlsCertificateKeyFile"
                                       "Password=unrelated"])
    assert env == {"PATH": "/usr/bin:/bin", "HOME": "/home/u", "KEEP": "1",
                   "RUNNERQ_ACTIVITY_ID": env["RUNNERQ_ACTIVITY_ID"],
                   "RUNNERQ_ACTIVITY_TYPE": "t", "RUNNERQ_ATTEMPT": "2",
                   "RUNNERQ_WORKER_ID": "host-1", "RUNNERQ_QUEUE": "emails"}
    assert sorted(k for k in env if k.startswith("RUNNERQ_")) == sorted(HANDLER_VARIABLES)


def test_a_very_short_password_does_not_strip_innocent_variables():
    base = {"PATH": "/usr/bin:/bin", "RUNNERQ_MONGO_URI": "mongodb://u:b@db/",
            "COPY": "mongodb://u:b@db/"}
    env = handler_environment(context(), base=base)
    assert env["PATH"] == "/usr/bin:/bin" and "COPY" not in env


def test_shell_handler_printing_its_environment_leaks_no_password(backend, cli_env, server,
                                                                 run_cli_subprocess):
    """As an operator runs it: the password sits in RUNNERQ_MONGO_URI (and in a copy
    elsewhere); the worker connects with --uri. Neither the results collection, nor
    `result ID`, nor the worker's log holds the password or a connection string."""
    env = {**cli_env, "RUNNERQ_MONGO_URI": SECRET_URI, "APP_DB_URL": SECRET_URI,
           "ONLY_THE_PASSWORD": f"pw={PASSWORD}", "URI_COPY": server.uri, "KEEP_ME": "yes"}
    aid = backend.enqueue("env", {}).activity_id
    worker = run_cli_subprocess("--uri", server.uri, "worker", "--burst", "--exec",
                                f"env={PRINT_ENV}", "--log-format", "plain", env=env)
    assert worker.code == 0, worker.stderr
    seen = backend.get_result(aid).data
    assert seen["KEEP_ME"] == "yes" and seen["PATH"]
    assert sorted(k for k in seen if k.startswith("RUNNERQ_")) == sorted(HANDLER_VARIABLES)
    assert seen["RUNNERQ_ACTIVITY_ID"] == str(aid) and seen["RUNNERQ_QUEUE"] == "tests"
    assert seen["RUNNERQ_ACTIVITY_TYPE"] == "env" and seen["RUNNERQ_ATTEMPT"] == "1"
    for gone in ("APP_DB_URL", "ONLY_THE_PASSWORD", "URI_COPY"):
        assert gone not in seen
    # The URI the worker connected with (on a real server: with its own password).
    assert not [s for s in uri_secrets(server.uri) if s in json.dumps(seen)]
    with MongoClient(server.uri, uuidRepresentation="standard") as client:
        stored = json.dumps(list(client[cli_env["RUNNERQ_DATABASE"]].list_collection_names()))
        for name in json.loads(stored):
            docs = list(client[cli_env["RUNNERQ_DATABASE"]][name].find())
            assert PASSWORD not in repr(docs), name
    for fmt in ("text", "json"):
        shown = run_cli_subprocess("--uri", server.uri, "result", str(aid), "-o", fmt, env=env)
        assert shown.code == 0, shown.stderr
        assert PASSWORD not in shown.stdout + shown.stderr
        assert "KEEP_ME" in shown.stdout
    assert PASSWORD not in worker.stdout + worker.stderr


LONG_HANDLER = """\
import json, os, sys, time
payload = json.load(sys.stdin)
with open(payload["pidfile"] + ".tmp", "w") as fh:
    fh.write(str(os.getpid()))
os.replace(payload["pidfile"] + ".tmp", payload["pidfile"])
time.sleep(120)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"),
                    reason="a parent-death signal exists on Linux only (docs/robustness.md)")
@pytest.mark.proof
def test_sigkilled_worker_leaves_no_shell_handler_behind(backend, cli_env, tmp_path):
    script = tmp_path / "long.py"
    script.write_text(LONG_HANDLER)
    pidfile = tmp_path / "child.pid"
    backend.enqueue("long", {"pidfile": str(pidfile)}, timeout_seconds=300)
    worker = subprocess.Popen(
        [sys.executable, "-m", "runnerq_cli", "worker", "--exec",
         f"long={sys.executable} {script}", "--poll-interval", "0.2", "--log-format", "plain"],
        cwd=ROOT, env=cli_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    child = None
    try:
        wait_for(pidfile.exists, timeout=60, what="the shell handler to start")
        child = int(pidfile.read_text())
        assert pid_alive(child)
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(10)
        wait_for(lambda: not pid_alive(child), timeout=10,
                 what=f"the handler (pid {child}) to die with its worker")
    finally:
        if worker.poll() is None:
            worker.kill()
        if child is not None and pid_alive(child):
            os.kill(child, signal.SIGKILL)


SHORT_HANDLER = """\
import json, os, sys, time
payload = json.load(sys.stdin)
open(payload["started"], "w").close()
time.sleep(1.5)
print(json.dumps({"pid": os.getpid()}))
"""


@pytest.mark.proof
def test_sigterm_lets_a_running_shell_handler_finish(backend, cli_env, tmp_path):
    """The parent-death signal is for a worker that dies: a worker asked to stop waits
    for its shell handler, which finishes and stores its result."""
    script = tmp_path / "short.py"
    script.write_text(SHORT_HANDLER)
    started = tmp_path / "started"
    aid = backend.enqueue("short", {"started": str(started)}).activity_id
    worker = subprocess.Popen(
        [sys.executable, "-m", "runnerq_cli", "worker", "--exec",
         f"short={sys.executable} {script}", "--poll-interval", "0.2", "--log-format", "plain"],
        cwd=ROOT, env=cli_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(started.exists, timeout=60, what="the shell handler to start")
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=60)
        assert worker.returncode == 0, err
    finally:
        if worker.poll() is None:
            worker.kill()
    assert backend.get_activity(aid).status == "completed"
    assert isinstance(backend.get_result(aid).data["pid"], int)
