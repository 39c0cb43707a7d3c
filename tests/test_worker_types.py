"""Which activities a worker claims: only the types it has handlers for, unless told.

On a shared queue, a worker started with one team's handler must leave every
other team's activities alone (pending, for their own workers): it claims the
types it handles, and claims every type only with `--all-types` and a
catch-all handler (`*`) that runs them.
"""

from __future__ import annotations

import sys
import threading

import pytest

from runnerq_cli.backend.domain.models import Status
from runnerq_cli.cli.exits import ExitCode
from runnerq_cli.errors import InvalidArgument
from runnerq_cli.worker.engine import Worker, WorkerEnd
from runnerq_cli.worker.handlers import HandlerRegistry
from tests.waiting import wait_until


def _registry(*types: str) -> HandlerRegistry:
    registry = HandlerRegistry()
    for name in types:
        registry.add(name, lambda payload, ctx: {"ran": ctx.activity_type,
                                                 "by": ctx.worker_id})
    return registry


def _worker(backend, registry, **options) -> Worker:
    options.setdefault("burst", True)
    options.setdefault("poll_interval", 0.2)
    return Worker(backend, registry, **options)


def test_a_worker_leaves_the_types_it_has_no_handler_for_pending(backend):
    mail = backend.enqueue("send_email", {"to": "a@example.com"}).activity_id
    others = [backend.enqueue(t, {}).activity_id for t in ("resize", "charge")]
    worker = _worker(backend, _registry("send_email"))
    assert worker.types == ("send_email",)
    assert worker.run(install_signals=False) == WorkerEnd.STOPPED
    assert backend.get_activity(mail).status == Status.COMPLETED
    for aid in others:
        act = backend.get_activity(aid)
        assert act.status == Status.PENDING and act.retry_count == 0 and act.last_error is None
    assert worker.counters["claimed"] == 1 and worker.counters["failed"] == 0


def test_the_registry_records_the_types_a_worker_claims(backend):
    gate = threading.Event()
    registry = _registry("send_email")
    registry.add("audit", lambda payload: gate.wait(30))
    backend.enqueue("audit", {})
    worker = _worker(backend, registry, burst=False)
    worker.start()
    try:
        [entry] = wait_until(backend.registry.list_workers, message="the worker to register")
        assert entry.types == ["audit", "send_email"]
    finally:
        gate.set()
        worker.stop()
        assert worker.join(15) == WorkerEnd.STOPPED


def test_two_workers_with_disjoint_types_each_run_only_their_own(backend):
    ids = {t: [backend.enqueue(t, {"i": i}).activity_id for i in range(20)]
           for t in ("resize", "charge")}
    workers = {t: _worker(backend, _registry(t), burst=False, concurrency=2,
                          worker_id=f"only-{t}") for t in ids}
    for worker in workers.values():
        worker.start()
    try:
        wait_until(lambda: all(backend.get_activity(a).status == Status.COMPLETED
                               for group in ids.values() for a in group),
                   message="every activity to complete")
    finally:
        for worker in workers.values():
            worker.stop()
        for worker in workers.values():
            assert worker.join(15) == WorkerEnd.STOPPED
    for activity_type, group in ids.items():
        for aid in group:
            assert backend.get_result(aid).data == {"ran": activity_type,
                                                    "by": f"only-{activity_type}"}
        assert workers[activity_type].counters["claimed"] == len(group)
        assert workers[activity_type].counters["failed"] == 0


def test_all_types_runs_every_type_through_the_catch_all(backend):
    ids = {t: backend.enqueue(t, {}).activity_id for t in ("send_email", "resize", "charge")}
    registry = _registry("send_email")
    registry.add("*", lambda payload, ctx: {"caught": ctx.activity_type})
    worker = _worker(backend, registry, all_types=True)
    assert worker.types == ()
    assert worker.run(install_signals=False) == WorkerEnd.STOPPED
    assert backend.get_result(ids["send_email"]).data["ran"] == "send_email"
    for name in ("resize", "charge"):
        assert backend.get_result(ids[name]).data == {"caught": name}


@pytest.mark.parametrize(("registry_types", "options", "message"), [
    (("send_email",), {"all_types": True}, "all_types needs a catch-all handler"),
    (("send_email", "*"), {}, "give all_types"),
    (("send_email", "*"), {"all_types": True, "types": ["send_email"]}, "leave out types"),
    (("send_email",), {"types": ["resize"]}, "without a handler: resize"),
])
def test_incoherent_choices_are_refused(backend, registry_types, options, message):
    with pytest.raises(InvalidArgument, match=message):
        _worker(backend, _registry(*registry_types), **options)


def test_cli_claims_only_handled_types(backend, run_cli):
    mail = backend.enqueue("echo", {}).activity_id
    resize = backend.enqueue("resize", {}).activity_id
    result = run_cli("worker", "--burst", "--handler", "echo=tests.worker_handlers:echo",
                     "--log-format", "plain")
    assert result.code == 0, result.stderr
    assert "types=echo " in result.stderr and "resize" not in result.stderr
    assert backend.get_activity(mail).status == Status.COMPLETED
    assert backend.get_activity(resize).status == Status.PENDING


def test_cli_all_types_with_a_shell_catch_all(backend, run_cli):
    ids = [backend.enqueue(t, {}).activity_id for t in ("resize", "charge")]
    command = (f"{sys.executable} -c 'import json,os; "
               "print(json.dumps(os.environ[\"RUNNERQ_ACTIVITY_TYPE\"]))'")
    result = run_cli("worker", "--burst", "--all-types", "--exec", f"*={command}",
                     "--log-format", "plain")
    assert result.code == 0, result.stderr
    assert [backend.get_result(a).data for a in ids] == ["resize", "charge"]


@pytest.mark.parametrize(("args", "message"), [
    (("--all-types", "--handler", "echo=tests.worker_handlers:echo"),
     "--all-types needs a catch-all handler"),
    (("--handler", "*=tests.worker_handlers:echo"), "give --all-types"),
    (("--handler", "echo=tests.worker_handlers:echo", "--types", "echo,resize"),
     "error: --types (worker.types) names one without a handler: resize"),
    (("--handler", "echo=tests.worker_handlers:echo", "--types", "a,echo,b"),
     "error: --types (worker.types) names some without a handler: a, b"),
])
def test_cli_refuses_incoherent_choices_before_connecting(backend, run_cli, args, message):
    aid = backend.enqueue("echo", {}).activity_id
    # An unreachable server: the choice is refused (exit 2) before any connection.
    result = run_cli("worker", "--burst", *args,
                     env={"RUNNERQ_MONGO_URI": "mongodb://127.0.0.1:9/?serverSelectionTimeoutMS=200"})
    assert result.code == ExitCode.USAGE, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0]
    assert backend.get_activity(aid).status == Status.PENDING


def test_doctor_and_explain_name_the_type_no_live_worker_handles(backend, run_cli):
    gate = threading.Event()
    registry = _registry("send_email")
    registry.add("audit", lambda payload: gate.wait(30))
    backend.enqueue("audit", {})  # keeps the worker busy, live and registered
    resize = backend.enqueue("resize", {}).activity_id
    worker = _worker(backend, registry, burst=False)
    worker.start()
    try:
        wait_until(lambda: worker.in_flight, message="the worker to run its audit")
        doctor = run_cli("doctor")
        assert "no live worker handles resize (1 pending)" in doctor.stdout, doctor.stdout
        explain = run_cli("explain", str(resize))
        assert "no live worker handles resize" in explain.stdout, explain.stdout
    finally:
        gate.set()
        worker.stop()
        assert worker.join(15) == WorkerEnd.STOPPED
