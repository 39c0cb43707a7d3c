"""Bulk actions in batches: a fixed number of commands per batch, fenced writes, and a
SIGTERM midway that leaves an audit record of what was done (issue 15, issue 16 #8)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from typing import Any

import pytest

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.backend.domain.filters import ActivityFilter
from runnerq_cli.backend.ops.audit import AuditLog
from runnerq_cli.backend.ops.batches import BATCH_SIZE
from runnerq_cli.backend.ops.operator import Operator
from runnerq_cli.backend.queue.maintenance import Maintenance
from runnerq_cli.backend.store.context import QueueContext
from tests.bulk_fixtures import Commands, bulk_actions, counted, insert_activities
from tests.helpers import sigterm_after_first_batch
from tests.waiting import wait_until

PER_THOUSAND = 25  # the budget: commands per 1,000 activities beyond start-up
BATCH = 25  # the batch size of the counting runs (the cost per batch does not depend on it)


__all__ = ["counted"]  # a fixture, used by name


def _audit_records(ctx: QueueContext, action: str) -> list[dict[str, Any]]:
    return list(ctx.events.find({"activity_id": None, "detail.action": action})
                .sort([("timestamp", 1), ("_id", 1)]))


@pytest.mark.proof
def test_actions_by_filter_and_by_ids_cost_at_most_25_commands_per_1000(
        counted: tuple[QueueContext, Commands]) -> None:
    """The commands of a run grow by a fixed number per batch, whatever is in it: two runs
    that differ by 4 batches give that number, and at the default batch size it must stay
    within the budget. (Small batches here: the dev server's $in slows with big ones.)"""
    ctx, commands = counted
    insert_activities(ctx, 25, "pending", "small")
    insert_activities(ctx, 125, "pending", "big")
    bulk = bulk_actions(ctx)

    def cancel(activity_type: str, n: int) -> int:
        commands.take()
        selection = bulk.select("cancel", ActivityFilter(types=(activity_type,)), n)
        report = bulk.apply("cancel", selection, reason="load shed", batch_size=BATCH)
        assert len(report.applied) == n
        return len(commands.take())

    small, big = cancel("small", 25), cancel("big", 125)
    per_batch = (big - small) / 4
    assert 0 < per_batch <= 10, (small, big)
    assert per_batch * 1000 / BATCH_SIZE <= PER_THOUSAND, (small, big)
    # retry by many ids: the same batches
    failed_small = insert_activities(ctx, 25, "failed", "fs")
    failed_big = insert_activities(ctx, 125, "failed", "fb")
    costs = []
    for ids in (failed_small, failed_big):
        commands.take()
        report = bulk.apply("retry", ids, batch_size=BATCH)
        assert len(report.applied) == len(ids)
        costs.append(len(commands.take()))
    assert (costs[1] - costs[0]) / 4 * 1000 / BATCH_SIZE <= PER_THOUSAND, costs
    assert ctx.activities.count_documents({"status": "pending", "activity_type": "fb"}) == 125
    # each activity got exactly one event, copied out of its outbox
    assert len(ctx.events.distinct("activity_id", {"event_type": "Retried"})) == 150
    assert ctx.events.count_documents({"event_type": "Retried"}) == 150
    assert ctx.activities.count_documents({"outbox": {"$exists": True}}) == 0


def test_purge_costs_a_fixed_number_of_commands_per_batch(
        counted: tuple[QueueContext, Commands]) -> None:
    """purge (audited, as the CLI runs it) deletes finished activities past retention in
    batches whose commands do not depend on their size: within the budget per 1,000 at
    the bulk batch size, and fewer at purge's own (PURGE_BATCH)."""
    from datetime import timedelta

    from runnerq_cli.backend.ops.operator import PURGE_BATCH

    ctx, commands = counted
    operator = Operator(ctx, Maintenance(ctx), AuditLog(ctx))
    aged = ctx.clock() - timedelta(seconds=ctx.settings.retention_completed + 86400)
    costs = []
    for activity_type, n in (("ps", 25), ("pb", 125)):
        insert_activities(ctx, n, "pending", activity_type)
        ctx.activities.update_many({"activity_type": activity_type}, {"$set": {
            "status": "completed", "completed_at": aged, "last_outcome": "completed"}})
        commands.take()
        assert operator.purge(batch=BATCH, audit=True)["completed"] == n
        costs.append(len(commands.take()))
        assert ctx.activities.count_documents({"activity_type": activity_type}) == 0
    per_batch = (costs[1] - costs[0]) / 4
    assert 0 < per_batch <= 10, costs
    assert per_batch * 1000 / BATCH_SIZE <= PER_THOUSAND, costs
    assert PURGE_BATCH >= BATCH_SIZE
    assert [r["detail"]["state"] for r in _audit_records(ctx, "purge")] == ["done", "done"]


def test_a_batch_leaves_alone_what_a_worker_or_operator_changed_meanwhile(
        queue: RunnerQ) -> None:
    ctx = queue.context
    ids = insert_activities(ctx, 30, "pending")
    selection = queue.bulk.select("cancel", ActivityFilter(statuses=("pending",)), 30)
    # meanwhile: a worker claims the oldest, another operator raises one's priority
    claim = queue.dequeue("w1", types=["job"])[0]
    queue.operator.set_priority(ids[5], "critical", actor="bob")
    report = queue.bulk.apply("cancel", selection, reason="shed", batch_size=7)
    skipped = {s["id"] for s in report.skipped}
    assert skipped == {claim.activity_id, ids[5]}
    held = ctx.activities.find_one({"_id": claim.activity_id})
    assert held["status"] == "processing" and held["lease_id"] == claim.lease_id
    assert ctx.activities.find_one({"_id": ids[5]})["status"] == "pending"
    assert ctx.activities.count_documents({"status": "cancelled"}) == 28
    [record] = _audit_records(ctx, "cancel")
    assert record["detail"]["state"] == "done"
    assert (record["detail"]["count"], record["detail"]["skipped"]) == (28, 2)


def test_stopping_between_batches_records_what_was_done_and_a_rerun_goes_on(
        queue: RunnerQ) -> None:
    ctx = queue.context
    insert_activities(ctx, 40, "pending")
    asked = []

    def stop_after_two() -> bool:
        asked.append(1)
        return len(asked) > 2

    selection = queue.bulk.select("cancel", ActivityFilter(), 100)
    report = queue.bulk.apply("cancel", selection, batch_size=10, should_stop=stop_after_two)
    assert report.interrupted and len(report.applied) == 20
    first = _audit_records(ctx, "cancel")[0]["detail"]
    assert first["state"] == "interrupted" and first["count"] == 20
    assert first["last_id"] == str(report.last_id) == str(selection.ids[19])
    again = queue.bulk.apply("cancel", queue.bulk.select("cancel", ActivityFilter(), 100),
                             batch_size=10)
    assert len(again.applied) == 20 and not again.interrupted
    assert ctx.events.count_documents({"event_type": "Cancelled"}) == 40
    assert len(ctx.events.distinct("activity_id", {"event_type": "Cancelled"})) == 40
    records = _audit_records(ctx, "cancel")
    assert [(r["detail"]["state"], r["detail"]["count"]) for r in records] == [
        ("interrupted", 20), ("done", 20)]


def _popen(cli_env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "runnerq_cli", *args], env=cli_env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.proof
def test_sigterm_midway_leaves_an_interrupted_audit_record_and_a_rerun_completes(
        backend: RunnerQ, cli_env: dict[str, str], run_cli_subprocess: Any) -> None:
    ctx = backend.context
    insert_activities(ctx, 100, "pending")
    args = ("cancel", "--status", "pending", "--max", "1000", "--yes", "--batch-size", "4",
            "--reason", "incident 7")
    code, out, err = sigterm_after_first_batch(cli_env, args,
                                               lambda: _audit_records(ctx, "cancel"))
    assert code == 130, err
    assert "interrupted: cancelled " in err and " of 100; " in err and "last id reached" in err
    assert "cancel: matched 100, shown 100, applied" in out
    assert "Traceback" not in err
    [record] = _audit_records(ctx, "cancel")
    detail = record["detail"]
    cancelled = ctx.activities.count_documents({"status": "cancelled"})
    assert detail["state"] == "interrupted" and 0 < detail["count"] == cancelled < 100
    assert detail["reason"] == "incident 7" and detail["max"] == 1000
    assert detail["os_user"] and detail["host"] and "cancel" in detail["command"]
    shown = run_cli_subprocess("audit")
    assert shown.code == 0 and "INTERRUPTED" in shown.stdout
    rerun = run_cli_subprocess(*args)
    assert rerun.code == 0, rerun.stderr
    assert ctx.activities.count_documents({"status": "cancelled"}) == 100
    assert ctx.events.count_documents({"event_type": "Cancelled"}) == 100
    records = _audit_records(ctx, "cancel")
    assert [r["detail"]["state"] for r in records] == ["interrupted", "done"]
    assert records[1]["detail"]["count"] == 100 - cancelled


def test_delete_with_an_undecodable_reason_is_refused_before_anything(
        backend: RunnerQ, run_cli: Any) -> None:
    ctx = backend.context
    insert_activities(ctx, 5, "failed")
    for option, value in (("--reason", "ab\udcff\udcfecd"),
                          ("--actor", "mallory\n2026-01-01T00:00:00.000000Z  delete  admin"),
                          ("--actor", "x" * 201), ("--reason", "r" * 1001),
                          ("--reason", "bell\x07"), ("--actor", "\u202eevil")):
        res = run_cli("delete", "--status", "failed", "--max", "3", "--yes", option, value)
        assert res.code == 2, (option, value, res)
        assert res.stderr.startswith("error: ") and res.stderr.count("\n") == 1
        assert "Traceback" not in res.stderr
    assert ctx.activities.count_documents({}) == 5
    assert ctx.events.count_documents({}) == 0


def test_a_misspelt_queue_is_refused_for_writes_and_nothing_is_created(
        backend: RunnerQ, run_cli: Any) -> None:
    before = set(backend.db.list_collection_names())
    for args in (("pause", "--reason", "typo"), ("resume",),
                 ("cancel", "--status", "pending", "--max", "5", "--yes"),
                 ("retry", "00000000-0000-4000-8000-000000000000"),
                 ("redrive", "--yes"), ("purge", "--yes")):
        res = run_cli("--queue", "test", *args)
        assert res.code == 4, (args, res)
        assert "queue 'test' does not exist" in res.stderr and "'tests'" in res.stderr
        assert res.stderr.count("\n") == 1
    assert set(backend.db.list_collection_names()) == before
    made = run_cli("--queue", "fresh", "pause", "--create", "--reason", "before launch")
    assert made.code == 0, made.stderr
    assert RunnerQ(dataclasses.replace(backend.settings, queue="fresh")).control.paused().all


def test_resume_with_nothing_to_resume_writes_no_audit_record(
        backend: RunnerQ, run_cli: Any) -> None:
    assert run_cli("resume").code == 0
    assert run_cli("pause", "-t", "a").code == 0
    backend.registry.register_worker("w", types=["b"])
    assert run_cli("resume", "-t", "nosuch").code == 4  # a type never seen: refused
    assert run_cli("resume", "-t", "b").code == 0  # known (a worker claims it), not paused
    assert [e.action for e in backend.audit_log.audit()] == ["pause"]
    assert run_cli("resume", "-t", "a").code == 0
    assert [(e.action, e.state) for e in backend.audit_log.audit()] == [("resume", "done"),
                                                             ("pause", "done")]


def test_audit_reads_stray_and_old_records_without_failing(
        backend: RunnerQ, run_cli: Any) -> None:
    from datetime import UTC, datetime, timedelta

    now = datetime.now(UTC)
    backend.context.events.insert_many([
        {"activity_id": None, "event_type": "OperatorAction", "timestamp": now,
         "detail": {"action": "cancel", "ids": 5, "count": "many", "actor": 7}},
        {"activity_id": None, "event_type": "OperatorAction", "timestamp": "yesterday",
         "detail": "junk"},
        {"activity_id": None, "event_type": "Paused", "timestamp": now, "detail": None},
        {"activity_id": None, "event_type": "OperatorAction",
         "timestamp": now - timedelta(hours=1),
         "detail": {"action": "retry", "state": "running", "count": 3,
                    "updated_at": now - timedelta(hours=1), "last_id": "x"}},
    ])
    for output in ("text", "json", "jsonl"):
        res = run_cli("audit", "-o", output)
        assert res.code == 0, res
    text = run_cli("audit").stdout
    assert "INTERRUPTED (last id x)" in text


def test_bad_batch_size_is_one_line_exit_2(backend: RunnerQ, run_cli: Any) -> None:
    for value in ("0", "10001", "x", "-1"):
        res = run_cli("cancel", "--status", "pending", "--max", "5", "--yes",
                      "--batch-size", value)
        assert res.code == 2 and res.stderr.count("\n") == 1, res
    assert backend.context.events.count_documents({}) == 0


def test_progress_bar_stays_off_pipes(backend: RunnerQ, run_cli_subprocess: Any) -> None:
    insert_activities(backend.context, 20, "pending")
    res = run_cli_subprocess("cancel", "--status", "pending", "--max", "20", "--yes")
    assert res.code == 0 and res.stderr == ""
    assert os.linesep.join(res.stdout.splitlines()[-1:]).startswith("cancel: matched 20")


def test_enqueue_many_of_any_length_writes_in_chunks(
        counted: tuple[QueueContext, Commands], monkeypatch: pytest.MonkeyPatch) -> None:
    from runnerq_cli.backend.queue.queue import ActivityQueue, ActivitySpec
    from runnerq_cli.backend.store import stamps

    ctx, commands = counted
    monkeypatch.setattr(stamps, "INSERT_CHUNK", 10)  # 25 activities: 3 chunks
    ctx.clock()  # the server's clock is read (a hello) at most once a minute: not counted
    ctx.partitions.current()  # so is the partition count, once per 30 s (a find on control)
    commands.take()
    results = ActivityQueue(ctx).enqueue_many([ActivitySpec("job", {"n": n})
                                               for n in range(25)])
    # stamped inserts are upserts (`hello`: the server clock's reading, once a minute)
    assert [c for c in commands.take() if c != "hello"] == ["update"] * 3
    assert [r.created for r in results] == [True] * 25  # type: ignore[union-attr]
    stored = {d["_id"]: d["payload"]["n"] for d in ctx.activities.find()}
    assert [stored[r.activity_id] for r in results] == list(range(25))  # type: ignore[union-attr]


def test_pause_and_resume_with_a_forged_reason_or_actor_write_nothing(
        backend: RunnerQ, run_cli: Any) -> None:
    for args in (("pause", "--reason", "disk\nfull"), ("pause", "--actor", "m\udcffx"),
                 ("pause", "--actor", "a\x1b]0;title\x07"), ("resume", "--reason", "x\ty")):
        res = run_cli(*args)
        assert res.code == 2 and res.stderr.count("\n") == 1, (args, res)
    assert not backend.control.paused().active
    assert backend.context.events.count_documents({}) == 0
    assert backend.context.control.count_documents({"_id": "pause"}) == 0
    ok = run_cli("pause", "--reason", "disk full – ünïcode ok", "--actor", "ana")
    assert ok.code == 0, ok.stderr
    [entry] = backend.audit_log.audit()
    assert (entry.action, entry.state, entry.actor, entry.reason) == (
        "pause", "done", "ana", "disk full – ünïcode ok")
    assert entry.detail["os_user"] and entry.detail["host"]


@pytest.mark.proof
def test_sigkill_midway_leaves_the_intent_and_the_progress(
        backend: RunnerQ, cli_env: dict[str, str], run_cli_subprocess: Any) -> None:
    ctx = backend.context
    insert_activities(ctx, 100, "pending")
    args = ("cancel", "--status", "pending", "--max", "1000", "--yes", "--batch-size", "4",
            "--reason", "crash test")
    proc = _popen(cli_env, *args)
    try:
        wait_until(lambda: any(r["detail"].get("count", 0) >= 8
                               for r in _audit_records(ctx, "cancel")),
                   timeout=60, interval=0.01, message="two batches")
        proc.kill()
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    [record] = _audit_records(ctx, "cancel")
    detail = record["detail"]
    cancelled = ctx.activities.count_documents({"status": "cancelled"})
    # the intent is there; the progress lags the changes by at most the batch in flight
    assert detail["state"] == "running" and detail["reason"] == "crash test"
    assert 8 <= detail["count"] <= cancelled <= detail["count"] + 4 < 100
    shown = run_cli_subprocess("audit", "-o", "json")
    assert [a["state"] for a in json.loads(shown.stdout)["actions"]] == ["running"]
    rerun = run_cli_subprocess(*args)
    assert rerun.code == 0, rerun.stderr
    assert ctx.activities.count_documents({"status": "cancelled"}) == 100
    assert _audit_records(ctx, "cancel")[1]["detail"]["count"] == 100 - cancelled


@pytest.mark.proof
def test_progress_bar_on_a_terminal_once_the_work_takes_a_second(
        backend: RunnerQ, cli_env: dict[str, str], server: Any) -> None:
    """60 batches take seconds on the dev server (a real MongoDB may finish within the
    second before a bar is due: then there is nothing to see)."""
    import pty

    if server.real_mongodb:
        pytest.skip("a real MongoDB finishes these batches within a second")
    insert_activities(backend.context, 120, "pending")
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "runnerq_cli", "cancel", "--status",
                             "pending", "--max", "120", "--yes", "--batch-size", "2"],
                            env={**cli_env, "COLUMNS": "80"}, stdout=subprocess.PIPE,
                            stderr=slave, text=True)
    os.close(slave)
    seen = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # the process closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    out, _ = proc.communicate(timeout=60)
    os.close(master)
    assert proc.returncode == 0
    assert b"cancel" in seen and "\u2501".encode() in seen  # rich's bar, on stderr only
    assert "\u2501" not in out and out.splitlines()[-1].startswith("cancel: matched 120")
