"""The durable activities' commands as a user runs them: `signal`, `tree`, `list waiting`,
`show` and `explain` of a waiting activity, and the operator actions that reach waiting
activities and trees (cancel with its Err result, `--cascade`, `run-now`, `retry`)."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.backend.domain.checkpoints import checkpoint_id
from runnerq_cli.backend.domain.specs import ActivitySpec
from runnerq_cli.cli.exits import ExitCode

FAR = datetime(2099, 1, 1, tzinfo=UTC)


def raw(queue: RunnerQ, activity_id: uuid.UUID) -> dict:
    return queue.context.activities.find_one({"_id": activity_id})


def claim(queue: RunnerQ, activity_type: str, worker: str = "w1"):
    queue.process_scheduled()
    [found] = queue.dequeue(worker, types=[activity_type], limit=1)
    return found


def written(queue: RunnerQ) -> tuple[int, int, int]:
    """What a refused command must leave as it was: checkpoints, events, activities."""
    ctx = queue.context
    return (ctx.checkpoints.count_documents({}), ctx.events.count_documents({}),
            ctx.activities.count_documents({}))


def parked_on_signal(queue: RunnerQ, name: str = "approve") -> uuid.UUID:
    aid = queue.enqueue("order", {}).activity_id
    held = claim(queue, "order")
    queue.durable.checkpoint(held, checkpoint_id(aid, "run", "charge"), "Ok", {"paid": 1},
                             "run:charge")
    queue.durable.park(held, "signal", name, FAR, checkpoint_id(aid, "signal", name))
    return aid


def awaiting_child(queue: RunnerQ) -> tuple[uuid.UUID, uuid.UUID]:
    """A root waiting on its one child (pending)."""
    root = queue.enqueue("saga", {}).activity_id
    held = claim(queue, "saga")
    child = queue.durable.spawn(held, ActivitySpec("parcel", {})).activity_id
    queue.durable.park(held, "await", "parcel", FAR, child, child)
    return root, child


# ------------------------------------------------------------------- signal


def test_signal_wakes_a_waiting_activity_and_is_audited(backend: RunnerQ, run_cli) -> None:
    aid = parked_on_signal(backend)
    out = run_cli("signal", str(aid)[:8], "approve", "--payload", '{"by": "ana"}',
                  "--reason", "checked")
    assert out.code == 0, out.stderr
    assert out.stdout.startswith(f"signalled {aid} (order) approve: woke it")
    assert raw(backend, aid)["status"] == "pending"
    assert backend.durable.get_result(checkpoint_id(aid, "signal", "approve")).data == {
        "by": "ana"}
    [entry] = backend.audit_log.audit(action="signal")
    assert (entry.reason, entry.state, entry.ids) == ("checked", "done", [str(aid)])
    assert entry.detail["name"] == "approve" and entry.detail["woke"] is True


def test_signal_json_output_and_a_running_target(backend: RunnerQ, run_cli) -> None:
    aid = backend.enqueue("order", {}).activity_id
    claim(backend, "order")
    out = run_cli("signal", str(aid), "go", "-o", "json")
    assert out.code == 0, out.stderr
    data = json.loads(out.stdout)
    assert data == {"action": "signal", "id": str(aid), "activity_type": "order",
                    "name": "go", "status": "processing", "woke": False}
    assert backend.durable.get_result(checkpoint_id(aid, "signal", "go")).data is None


def test_signal_refusals_write_nothing(backend: RunnerQ, run_cli, tmp_path) -> None:
    live = parked_on_signal(backend)
    done = backend.enqueue("order", {}).activity_id
    backend.ack_success(claim(backend, "order"), {"ok": True})
    big = tmp_path / "big.json"
    big.write_text(json.dumps({"x": "a" * (1024 * 1024 + 10)}))
    before = written(backend)
    cases = [
        (("signal", str(uuid.uuid4()), "approve"), ExitCode.NOT_FOUND, "not found"),
        (("signal", str(done), "approve"), ExitCode.WRONG_STATE, "completed"),
        (("signal", str(live), "x" * 201), ExitCode.USAGE, "at most 200"),
        (("signal", str(live), ""), ExitCode.USAGE, "must not be empty"),
        (("signal", str(live), "approve", "--payload", "{nope"), ExitCode.USAGE,
         "malformed JSON"),
        (("signal", str(live), "approve", "--payload", f"@{big}"), ExitCode.USAGE,
         "larger than"),
        (("signal", str(live), "approve", "--payload", "NaN"), ExitCode.USAGE, "--payload"),
        (("signal", "not-an-id", "approve"), ExitCode.USAGE, "id"),
    ]
    for args, code, words in cases:
        out = run_cli(*args)
        assert out.code == code, (args, out.stderr)
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error:") and words in lines[0], (
            args, out.stderr)
    assert written(backend) == before
    assert raw(backend, live)["status"] == "waiting"


def test_signal_names_that_are_not_utf8_are_refused(backend: RunnerQ,
                                                    run_cli_subprocess) -> None:
    import os

    aid = parked_on_signal(backend)
    before = written(backend)
    name = os.fsdecode(b"appr\xffove")
    out = run_cli_subprocess("signal", str(aid), name)
    assert out.code == ExitCode.USAGE, out.stderr
    assert out.stderr.startswith("error: argument 3 is not valid UTF-8")
    assert out.stderr.count("\n") == 1
    assert written(backend) == before


# --------------------------------------------------------------------- tree


def test_tree_shows_every_member_from_any_member(backend: RunnerQ, run_cli) -> None:
    root, child = awaiting_child(backend)
    held = claim(backend, "parcel", worker="w9")
    backend.durable.checkpoint(held, checkpoint_id(child, "run", "pack"), "Ok", 1, "run:pack")
    for asked in (root, child):
        out = run_cli("tree", str(asked), env={"COLUMNS": "80"})
        assert out.code == 0, out.stderr
        lines = out.stdout.splitlines()
        assert all(len(line) <= 80 for line in lines), lines
        assert lines[0].lstrip("* ").startswith(str(root)[:8]) and "waiting" in lines[0]
        assert f"waiting for child {str(child)[:8]} since " in out.stdout
        assert "; the child is running on worker w9" in out.stdout
        assert any(line.startswith("  ") and "running" in line and "parcel" in line
                   for line in lines)
        assert "run pack: ok" in out.stdout
        assert lines[-1] == f"2 activities in the tree of {root}"
    data = json.loads(run_cli("tree", str(child), "-o", "json").stdout)
    assert data["root_id"] == str(root) and data["id"] == str(child)
    assert [m["depth"] for m in data["members"]] == [0, 1]
    assert data["members"][0]["waiting"]["kind"] == "await"
    assert data["members"][1]["steps"][0]["name"] == "pack"


def test_tree_of_a_parent_cycle_shows_each_member_once(backend: RunnerQ, run_cli) -> None:
    """Two documents another program (or a hand edit) left naming each other as parent
    and root: `tree` of either lists both, once each, and counts them (it said 0)."""
    first = backend.enqueue("loop", {}).activity_id
    second = backend.enqueue("loop", {}).activity_id
    for one, other in ((first, second), (second, first)):
        backend.context.activities.update_one({"_id": one}, {"$set": {
            "parent_activity_id": other, "root_activity_id": other, "depth": 1}})
    for asked in (first, second):
        out = run_cli("tree", str(asked))
        assert out.code == 0, out.stderr
        assert out.stdout.count(str(first)[:8]) >= 1 and str(second)[:8] in out.stdout
        assert out.stdout.splitlines()[-1].startswith("2 activities in the tree of ")
        data = json.loads(run_cli("tree", str(asked), "-o", "json").stdout)
        assert sorted(m["id"] for m in data["members"]) == sorted([str(first), str(second)])


def test_tree_of_an_unknown_id(backend: RunnerQ, run_cli) -> None:
    out = run_cli("tree", str(uuid.uuid4()))
    assert out.code == ExitCode.NOT_FOUND and out.stderr.startswith("error: ")


# ------------------------------------------------- list, show, explain of a wait


def test_list_show_and_explain_say_what_a_wait_waits_for(backend: RunnerQ, run_cli) -> None:
    aid = parked_on_signal(backend)
    sleeper = backend.enqueue("nap", {}).activity_id
    backend.durable.park(claim(backend, "nap"), "sleep", "cool-off", FAR)
    out = run_cli("list", "waiting")
    assert out.code == 0, out.stderr
    assert str(aid)[:8] in out.stdout and str(sleeper)[:8] in out.stdout
    assert "waiting for signal approve since" in out.stdout
    data = json.loads(run_cli("list", "waiting", "-o", "json").stdout)
    assert {i["id"] for i in data["items"]} == {str(aid), str(sleeper)}
    show = run_cli("show", str(aid))
    assert "waiting for signal approve since" in show.stdout
    assert "times out 2099-01-01 00:00:00.000Z" in show.stdout
    assert json.loads(run_cli("show", str(aid), "-o", "json").stdout)["waiting"]["kind"] == (
        "signal")
    assert "sleeping until 2099-01-01 00:00:00.000Z" in run_cli("show", str(sleeper)).stdout
    explained = run_cli("explain", str(aid))
    assert explained.code == 0, explained.stderr
    assert "Waiting for signal approve since" in explained.stdout


# ---------------------------------------------------------------- operator actions


def test_cancel_of_a_waiter_stores_its_err_result_and_wakes_its_parent(
        backend: RunnerQ, run_cli) -> None:
    root, child = awaiting_child(backend)
    out = run_cli("cancel", str(child), "--reason", "out of stock")
    assert out.code == 0, out.stderr
    result = backend.get_result(child)
    assert result.state == "Err"
    assert result.data["error"] == "activity cancelled: out of stock"
    assert result.data["type"] == "cancelled" and result.data["failed_at"]
    assert raw(backend, root)["status"] == "pending"  # its waiter woke


def test_cancel_reaches_a_waiting_activity_and_cascade_a_tree(backend: RunnerQ,
                                                            run_cli) -> None:
    root, child = awaiting_child(backend)
    out = run_cli("cancel", str(root), "--cascade")
    assert out.code == 0, out.stderr
    assert raw(backend, root)["status"] == "cancelled"
    assert raw(backend, child)["status"] == "cancelled"
    assert "parked" not in raw(backend, root) and "waiting_result_id" not in raw(backend, root)
    assert backend.get_result(child).data["error"] == "activity cancelled"
    refused = run_cli("cancel", str(uuid.uuid4()), "--cascade", "--type", "x", "--max", "1")
    assert refused.code == ExitCode.USAGE


def test_run_now_wakes_a_waiting_activity_and_retry_keeps_steps(backend: RunnerQ,
                                                               run_cli) -> None:
    aid = parked_on_signal(backend)
    out = run_cli("run-now", str(aid))
    assert out.code == 0, out.stderr
    doc = raw(backend, aid)
    assert doc["status"] == "pending"
    assert not {"parked", "waiting_result_id", "scheduled_at"} & set(doc)
    run_cli("cancel", str(aid))
    assert run_cli("retry", str(aid)).code == 0
    assert [s.name for s in backend.durable.steps(aid)] == ["charge"]

