"""The console and durable activities, over a real console server and real data: an
activity's page carries its tree, its steps and what it waits for; sending a signal is a
guarded action (actions allowed, a preview, a confirmation with an actor), audited as the
`signal` command's; the database's text stays text."""

from __future__ import annotations

import json
import uuid
from typing import Any

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.backend.domain.checkpoints import checkpoint_id
from runnerq_cli.backend.domain.specs import ActivitySpec
from tests.test_console_api import HOSTILE, Console
from tests.test_durable_cli import FAR, awaiting_child, claim, parked_on_signal, raw


def test_an_activity_page_has_its_tree_steps_and_wait(backend: RunnerQ) -> None:
    root, child = awaiting_child(backend)
    held = claim(backend, "parcel", worker="w9")
    backend.durable.checkpoint(held, checkpoint_id(child, "run", "pack"), "Ok", {"n": 1},
                               "run:pack")
    c = Console(backend)
    try:
        page = c.get(f"/api/activity/{root}")
        tree = page["tree"]
        assert tree["root_id"] == str(root) and tree["count"] == 2
        assert not tree["truncated"]
        first, second = tree["members"]
        assert (first["id"], first["depth"], first["status"]) == (str(root), 0, "waiting")
        assert (second["id"], second["depth"], second["display_status"]) == (
            str(child), 1, "running")
        assert second["parent_activity_id"] == str(root)
        assert page["waiting"]["kind"] == "await"
        assert page["waiting"]["text"].startswith(f"waiting for child {str(child)[:8]} since ")
        assert page["waiting"]["text"].endswith("; the child is running on worker w9")
        assert first["waiting_text"] == page["waiting"]["text"]
        of_child = c.get(f"/api/activity/{child}")
        assert of_child["tree"]["root_id"] == str(root)  # the whole tree from any member
        assert [(s["kind"], s["name"], s["data"]) for s in of_child["steps"]] == [
            ("run", "pack", {"n": 1})]
        assert of_child["waiting"] is None
        plain = backend.enqueue("plain", {}).activity_id
        alone = c.get(f"/api/activity/{plain}")
        assert alone["tree"]["count"] == 1 and alone["steps"] == [] and alone["waiting"] is None
    finally:
        c.close()


def test_stats_and_queues_count_waiting(backend: RunnerQ) -> None:
    parked_on_signal(backend)
    c = Console(backend)
    try:
        assert c.get("/api/stats")["by_status"]["waiting"] == 1
        assert c.get("/api/queues")["queues"][0]["by_status"]["waiting"] == 1
        listed = c.get("/api/activities?state=waiting")["items"]
        assert [a["status"] for a in listed] == ["waiting"]
    finally:
        c.close()


def test_signal_is_a_previewed_confirmed_audited_action(backend: RunnerQ,
                                                       run_cli: Any) -> None:
    aid = parked_on_signal(backend)
    off = Console(backend)
    try:
        off.post("/api/actions/signal/preview", {"id": str(aid), "name": "approve"}, 403)
    finally:
        off.close()
    c = Console(backend, allow_actions=True)
    try:
        preview = c.post("/api/actions/signal/preview",
                         {"id": str(aid), "name": "approve", "payload": {"by": "ana"}})
        assert (preview["id"], preview["name"], preview["status"]) == (
            str(aid), "approve", "waiting")
        assert preview["wakes"] is True and preview["awaited"] is True
        assert preview["selected"] == 1 and preview["ids"] == [str(aid)]
        assert raw(backend, aid)["status"] == "waiting"  # a preview writes nothing
        assert backend.durable.get_result(checkpoint_id(aid, "signal", "approve")) is None
        c.post("/api/actions/signal", {"confirm": preview["confirm"]}, 400)  # no actor
        sent = c.post("/api/actions/signal", {"confirm": preview["confirm"], "actor": "ada",
                                              "reason": "checked"})
        assert sent == {"action": "signal", "id": str(aid), "activity_type": "order",
                        "name": "approve", "status": "waiting", "woke": True}
        assert raw(backend, aid)["status"] == "pending"
        assert backend.durable.get_result(
            checkpoint_id(aid, "signal", "approve")).data == {"by": "ana"}
        c.post("/api/actions/signal", {"confirm": preview["confirm"], "actor": "ada"}, 409)
        [entry] = json.loads(run_cli("audit", "-o", "json", "--action", "signal")
                             .stdout)["actions"]
        assert entry["actor"] == "ada" and entry["reason"] == "checked"
        assert entry["detail"]["command"] == "console" and entry["ids"] == [str(aid)]
    finally:
        c.close()


def test_signal_refusals_write_nothing(backend: RunnerQ) -> None:
    live = parked_on_signal(backend)
    done = backend.enqueue("order", {}).activity_id
    backend.ack_success(claim(backend, "order"), {"ok": True})
    before = (backend.context.checkpoints.count_documents({}),
              len(backend.audit_log.audit(limit=100)))
    c = Console(backend, allow_actions=True)
    try:
        for body, status in (({"id": str(uuid.uuid4()), "name": "approve"}, 404),
                             ({"id": str(done), "name": "approve"}, 409),
                             ({"id": str(live), "name": "x" * 201}, 400),
                             ({"id": str(live), "name": ""}, 400),
                             ({"id": str(live)}, 400),
                             ({"id": "not-an-id", "name": "approve"}, 400),
                             ({"id": str(live), "name": "approve", "max": 1}, 400),
                             # past the console's body bound (64 KiB), below a signal's
                             ({"id": str(live), "name": "approve",
                               "payload": "a" * (64 * 1024)}, 413)):
            error = c.post("/api/actions/signal/preview", body, status)
            assert isinstance(error["error"], str) and "\n" not in error["error"], body
    finally:
        c.close()
    assert (backend.context.checkpoints.count_documents({}),
            len(backend.audit_log.audit(limit=100))) == before
    assert raw(backend, live)["status"] == "waiting"


def test_a_signal_preview_of_a_sleeping_activity_says_it_wakes_but_does_not_await(
        backend: RunnerQ) -> None:
    aid = backend.enqueue("nap", {}).activity_id
    backend.durable.park(claim(backend, "nap"), "sleep", "nap", FAR)
    c = Console(backend, allow_actions=True)
    try:
        preview = c.post("/api/actions/signal/preview", {"id": str(aid), "name": "go"})
        assert preview["wakes"] is True and preview["awaited"] is False
    finally:
        c.close()


def test_hostile_text_in_a_tree_stays_text(backend: RunnerQ) -> None:
    root = backend.enqueue(HOSTILE, {}).activity_id
    held = claim(backend, HOSTILE)
    child = backend.durable.spawn(held, ActivitySpec(HOSTILE, {})).activity_id
    backend.durable.checkpoint(held, checkpoint_id(root, "run", HOSTILE), "Ok", HOSTILE,
                               f"run:{HOSTILE}")
    backend.durable.park(held, "signal", HOSTILE, FAR, checkpoint_id(root, "signal", HOSTILE))
    c = Console(backend, allow_actions=True)
    try:
        for path in (f"/api/activity/{root}", f"/api/activity/{child}"):
            code, _, body = c.request("GET", path)
            assert code == 200 and b"<" not in body and b">" not in body
        page = c.get(f"/api/activity/{root}")
        assert page["steps"][0]["name"] == HOSTILE
        assert page["waiting"]["text"].startswith(f"waiting for signal {HOSTILE}")
        preview = c.post("/api/actions/signal/preview",
                         {"id": str(root), "name": HOSTILE, "payload": HOSTILE})
        assert preview["name"] == HOSTILE and preview["awaited"] is True
    finally:
        c.close()


def test_a_worker_parked_signal_wait_reads_by_its_name(backend: RunnerQ) -> None:
    """Our worker's park stores the step as `signal:NAME`: the page and the preview speak
    of NAME, as the handler wrote it."""
    aid = backend.enqueue("order", {}).activity_id
    backend.durable.park(claim(backend, "order"), "signal", "signal:approve", FAR,
                         checkpoint_id(aid, "signal", "approve"))
    c = Console(backend, allow_actions=True)
    try:
        page = c.get(f"/api/activity/{aid}")
        assert page["waiting"]["name"] == "approve"
        assert page["waiting"]["step"] == "signal:approve"
        assert page["waiting"]["text"].startswith("waiting for signal approve since ")
        preview = c.post("/api/actions/signal/preview", {"id": str(aid), "name": "approve"})
        assert preview["awaited"] is True
        other = c.post("/api/actions/signal/preview", {"id": str(aid), "name": "later"})
        assert other["awaited"] is False and other["wakes"] is True
    finally:
        c.close()
