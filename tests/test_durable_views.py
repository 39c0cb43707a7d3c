"""Waiting work in the queue's views as a user reads them: `stats` (text, JSON,
Prometheus) and `queues` count parked durable activities, and `doctor` names the waits
that can never wake and the trees stuck behind a dead-lettered child, each with its fix."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.backend.domain.specs import ActivitySpec
from tests.test_durable_cli import FAR, awaiting_child, claim, parked_on_signal, raw

WIDTH = {"COLUMNS": "80"}


def waiting_queue(queue: RunnerQ) -> None:
    """Two waiting activities (one on a signal, one on its pending child) and the child."""
    parked_on_signal(queue)
    awaiting_child(queue)


def test_stats_counts_waiting_work(backend: RunnerQ, run_cli) -> None:
    waiting_queue(backend)
    out = run_cli("stats", "-o", "json")
    assert out.code == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["by_status"]["waiting"] == 2 and data["by_status"]["pending"] == 1
    assert data["total"] == 3
    assert data["by_priority"]["normal"]["waiting"] == 2
    text = run_cli("stats", env=WIDTH)
    assert text.code == 0, text.stderr
    lines = text.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), lines
    rows = [line.split() for line in lines]
    statuses = [row[0] for row in rows if row and row[0] in (
        "pending", "scheduled", "processing", "waiting", "completed")]
    assert statuses == ["pending", "scheduled", "processing", "waiting", "completed"]
    assert ["waiting", "2", "2"] in rows and ["total", "3"] in rows


def test_stats_by_type_counts_waiting(backend: RunnerQ, run_cli) -> None:
    waiting_queue(backend)
    data = json.loads(run_cli("stats", "--by", "type", "-o", "json").stdout)
    assert data["by_type"]["order"]["waiting"] == 1
    assert data["by_type"]["saga"]["waiting"] == 1


def test_queues_shows_a_waiting_column_only_with_waiting_work(backend: RunnerQ,
                                                              run_cli) -> None:
    backend.enqueue("plain", {})
    plain = run_cli("queues", env=WIDTH)
    assert plain.code == 0, plain.stderr
    assert "waiting" not in plain.stdout.splitlines()[0]
    waiting_queue(backend)
    out = run_cli("queues", env=WIDTH)
    assert out.code == 0, out.stderr
    header, row = out.stdout.splitlines()
    assert len(header) <= 80 and len(row) <= 80
    cells = dict(zip(header.replace("oldest pending", "oldest_pending").split(), row.split(),
                     strict=False))
    assert cells["waiting"] == "2" and cells["pending"] == "2"
    data = json.loads(run_cli("queues", "-o", "json").stdout)
    assert data["queues"][0]["by_status"]["waiting"] == 2


def test_prometheus_counts_waiting_by_type(backend: RunnerQ, run_cli) -> None:
    waiting_queue(backend)
    out = run_cli("stats", "-o", "prometheus")
    assert out.code == 0, out.stderr
    samples = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
               for line in out.stdout.splitlines() if line.startswith("runnerq_activities{")}
    key = 'runnerq_activities{priority="normal",queue="tests",status="waiting",type="%s"}'
    assert samples[key % "order"] == 1.0 and samples[key % "saga"] == 1.0
    assert samples[key % "parcel"] == 0.0
    assert "waiting (parked durable activities)" in out.stdout  # its HELP says so


# ------------------------------------------------------------------ doctor

LONG_AGO = datetime(2020, 1, 1, tzinfo=UTC)


def doctor_checks(run_cli) -> tuple[int, dict[str, dict]]:
    """`doctor -o json` as a user runs it: (exit code, {check name: check})."""
    res = run_cli("doctor", "-o", "json")
    assert res.code in (0, 7), res.stderr
    return res.code, {c["name"]: c for c in json.loads(res.stdout)["checks"]}


def parked_long_ago(queue: RunnerQ, activity_id: uuid.UUID) -> None:
    """Its park as if long past: the wake's publisher and wake repair had their time."""
    queue.context.activities.update_one({"_id": activity_id},
                                        {"$set": {"parked.at": LONG_AGO}})


def test_doctor_is_quiet_about_waits_that_can_wake(backend: RunnerQ, run_cli) -> None:
    waiting_queue(backend)
    for aid in [d["_id"] for d in backend.context.activities.find({"status": "waiting"})]:
        parked_long_ago(backend, aid)
    _, checks = doctor_checks(run_cli)
    assert checks["waits"]["status"] == "ok", checks["waits"]
    assert checks["trees"]["status"] == "ok", checks["trees"]


def test_doctor_names_a_wait_whose_producer_is_gone(backend: RunnerQ, run_cli) -> None:
    root, child = awaiting_child(backend)
    backend.context.activities.delete_one({"_id": child})
    _, checks = doctor_checks(run_cli)
    assert checks["waits"]["status"] == "ok"  # just parked: its wake may be on its way
    parked_long_ago(backend, root)
    code, checks = doctor_checks(run_cli)
    waits = checks["waits"]
    assert code == 7 and waits["status"] == "fail", waits
    assert f"e.g. {root} (saga) waits for {child} (gone)" in waits["message"]
    assert f"run-now {root}" in waits["fix"] and f"cancel {root}" in waits["fix"]
    assert waits["facts"]["never_wake"][0]["id"] == str(root)
    # Its fix, as the check gives it, wakes it: doctor is then quiet.
    assert run_cli("run-now", str(root), "--yes").code == 0
    assert doctor_checks(run_cli)[1]["waits"]["status"] == "ok"


def test_doctor_names_a_wait_with_nothing_to_wake_it(backend: RunnerQ, run_cli) -> None:
    aid = backend.enqueue("nap", {}).activity_id
    held = claim(backend, "nap")
    backend.durable.park(held, "sleep", "nap", FAR)
    backend.context.activities.update_one({"_id": aid}, {"$unset": {"scheduled_at": ""}})
    code, checks = doctor_checks(run_cli)
    assert code == 7 and checks["waits"]["status"] == "fail"
    assert f"e.g. {aid} (nap) waits for nothing: no wake time" in checks["waits"]["message"]


def test_doctor_names_a_producer_finished_without_a_result(backend: RunnerQ,
                                                          run_cli) -> None:
    root, child = awaiting_child(backend)
    backend.context.activities.update_one(
        {"_id": child}, {"$set": {"status": "dead_letter", "completed_at": LONG_AGO}})
    parked_long_ago(backend, root)
    _, checks = doctor_checks(run_cli)
    assert checks["waits"]["status"] == "fail"
    assert f"waits for {child} (dead-lettered, no result)" in checks["waits"]["message"]
    assert checks["trees"]["status"] == "ok"


def test_doctor_names_a_tree_stuck_behind_a_dead_lettered_child(backend: RunnerQ,
                                                               run_cli) -> None:
    parent = backend.enqueue("saga", {}).activity_id
    held = claim(backend, "saga")
    child = backend.durable.spawn(held, ActivitySpec("parcel", {}, max_retries=1)).activity_id
    backend.durable.park(held, "await", "parcel", FAR, child, child)
    backend.ack_failure(claim(backend, "parcel"), "boom", retryable=True)
    backend.flush_outbox()
    assert raw(backend, parent)["status"] == "pending"  # woken, as it should be
    # The state that should never be: the child dead-lettered, its parent still waiting.
    backend.context.activities.update_one({"_id": parent}, {"$set": {
        "status": "waiting", "waiting_result_id": child, "scheduled_at": FAR,
        "parked": {"kind": "await", "step": "parcel", "at": LONG_AGO}}})
    code, checks = doctor_checks(run_cli)
    trees = checks["trees"]
    assert code == 7 and trees["status"] == "fail", trees
    assert "(1 dead-lettered)" in trees["message"]
    assert f"e.g. {parent} (saga) waits for {child} (dead-lettered)" in trees["message"]
    assert f"run-now {parent}" in trees["fix"]
    assert checks["waits"]["status"] == "ok"
    text = run_cli("doctor", env=WIDTH)
    assert all(len(line) <= 80 for line in text.stdout.splitlines())
    assert "FAIL  trees:" in text.stdout


# ------------------------------------------------------------------ list waiting


def test_list_waiting_says_what_an_awaited_child_is_doing(backend: RunnerQ, run_cli) -> None:
    """The awaited child's state, read for the whole page at once (without it, every
    await read "no activity produces it")."""
    root, child = awaiting_child(backend)
    signalled = parked_on_signal(backend)
    out = run_cli("list", "waiting")
    assert out.code == 0, out.stderr
    by_id = {line.split()[0]: line for line in out.stdout.splitlines()[1:]}
    line = by_id[str(root)[:8]]
    assert f"waiting for child {str(child)[:8]} since " in line
    assert line.rstrip().endswith("; the child is pending"), line
    assert "no activity produces it" not in out.stdout
    assert "waiting for signal approve since" in by_id[str(signalled)[:8]]
    # Machine output says it too, as `show -o json` does; other lists are unchanged.
    for form in ("json", "jsonl"):
        out = run_cli("list", "waiting", "-o", form)
        assert out.code == 0, out.stderr
        items = json.loads(out.stdout)["items"] if form == "json" else [
            json.loads(line) for line in out.stdout.splitlines()]
        waits = {item["id"]: item["waiting"] for item in items}
        assert waits[str(root)]["kind"] == "await"
        assert waits[str(root)]["result_id"] == str(child)
        assert waits[str(root)]["producer_status"] == "pending"
        assert (waits[str(signalled)]["kind"], waits[str(signalled)]["name"]) == (
            "signal", "approve")
    pending = json.loads(run_cli("list", "pending", "-o", "json").stdout)["items"]
    assert pending and all("waiting" not in item for item in pending)


def test_doctor_judges_a_bounded_number_of_suspects_and_says_so(
        backend: RunnerQ, run_cli, monkeypatch) -> None:
    from runnerq_cli.backend.diagnosis import wait_checks

    monkeypatch.setattr(wait_checks, "SUSPECTS_READ", 1)
    for _ in range(2):
        root, child = awaiting_child(backend)
        backend.context.activities.delete_one({"_id": child})
        parked_long_ago(backend, root)
    _, checks = doctor_checks(run_cli)
    waits = checks["waits"]
    assert waits["message"].startswith("1 activity waiting for something that will never")
    assert waits["message"].endswith("(the first 1 of 2 suspects judged)")
    assert waits["facts"]["all_looked_at"] is False
