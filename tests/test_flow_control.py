"""Flow control (docs/design.md, "Flow control"): limits stored with the queue, checked
at claim time by one conditional update of the type's limit document, released by every
end of a claim and by the reaper; keys take turns; debounce at enqueue; the commands."""

from __future__ import annotations

import pytest

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.backend.domain import flow
from runnerq_cli.backend.domain.flow import make_limits
from runnerq_cli.backend.domain.specs import ActivitySpec
from runnerq_cli.errors import InvalidArgument


def _limit(rq: RunnerQ, activity_type: str, **kw: object) -> None:
    rq.limits.set(make_limits(activity_type, **kw))


def _enqueue(rq: RunnerQ, activity_type: str, key: str | None = None, n: int = 1,
             **kw: object) -> list[object]:
    return [rq.enqueue(ActivitySpec(activity_type, {"i": i}, key=key, **kw)).activity_id
            for i in range(n)]


def test_concurrency_limit_holds_claims_and_frees_on_ack(queue: RunnerQ) -> None:
    _limit(queue, "charge", concurrency=2)
    _enqueue(queue, "charge", n=5)
    _enqueue(queue, "plain", n=2)
    claims = queue.dequeue("w1", limit=10)
    types = sorted(c.activity.activity_type for c in claims)
    assert types == ["charge", "charge", "plain", "plain"]
    assert queue.dequeue("w2", types=["charge"], limit=5) == []
    doc = queue.context.limits.find_one({"_id": "charge"})
    assert len(doc["holders"]) == 2
    charge = [c for c in claims if c.activity.activity_type == "charge"]
    queue.ack_success(charge[0], {"ok": 1})
    assert len(queue.context.limits.find_one({"_id": "charge"})["holders"]) == 1
    queue.context.flow.unblock("charge")
    again = queue.dequeue("w2", types=["charge"], limit=5)
    assert len(again) == 1
    queue.ack_failure(charge[1], "boom")  # a failure frees the slot too
    queue.release(again[0])
    assert queue.context.limits.find_one({"_id": "charge"})["holders"] == []


def test_per_key_limit_and_keys_take_turns(queue: RunnerQ) -> None:
    _limit(queue, "imp", key_limit=1)
    _enqueue(queue, "imp", key="big", n=20)
    _enqueue(queue, "imp", key="small", n=2)
    first = queue.dequeue("w1", types=["imp"], limit=5)
    # one per key: the big backlog does not take every slot
    assert sorted(c.activity.extra["flow_key"] for c in first) == ["big", "small"]
    for c in first:
        queue.ack_success(c, None)
    queue.context.flow.unblock("imp")
    second = queue.dequeue("w1", types=["imp"], limit=5)
    assert sorted(c.activity.extra["flow_key"] for c in second) == ["big", "small"]


def test_rate_limit_counts_starts_in_the_window(queue: RunnerQ) -> None:
    _limit(queue, "mail", rate="2/1h")
    _enqueue(queue, "mail", n=4)
    got = queue.dequeue("w1", limit=4)
    assert len(got) == 2
    for c in got:
        queue.ack_success(c, None)
    queue.context.flow.unblock("mail")
    assert queue.dequeue("w1", limit=4) == []  # ended, but the starts still count


def test_reaper_frees_a_dead_workers_slot_once(queue: RunnerQ, clock) -> None:
    _limit(queue, "charge", concurrency=1)
    _enqueue(queue, "charge", n=2)
    [_held] = queue.dequeue("w1", limit=2, lease_seconds=30)
    clock.advance(10)
    assert queue.maintenance.requeue_expired()["requeued"] == 0  # not early
    assert len(queue.context.limits.find_one({"_id": "charge"})["holders"]) == 1
    clock.advance(31)
    assert queue.maintenance.requeue_expired()["requeued"] == 1
    assert queue.context.limits.find_one({"_id": "charge"})["holders"] == []


def test_stale_holder_is_freed_only_after_its_until(queue: RunnerQ, clock) -> None:
    _limit(queue, "charge", concurrency=1)
    _enqueue(queue, "charge", n=1)
    # a claimer that took a slot and died before its claim
    queue.context.limits.find_one_and_update(
        {"_id": "charge"}, flow.take_pipeline("", "f" * 32, "ghost", 30_000))
    assert queue.dequeue("w1", types=["charge"]) == []
    clock.advance(31)
    queue.context.flow.unblock("charge")
    assert len(queue.dequeue("w1", types=["charge"])) == 1


def test_plain_work_pays_nothing(queue: RunnerQ) -> None:
    [aid] = _enqueue(queue, "plain")
    [claim] = queue.dequeue("w1")
    queue.ack_success(claim, None)
    doc = queue.context.activities.find_one({"_id": aid})
    assert "slot" not in doc and "flow_key" not in doc
    assert queue.context.limits.count_documents({}) == 0


def test_debounce_replaces_the_waiting_one_newest_payload_wins(queue: RunnerQ) -> None:
    a = queue.enqueue(ActivitySpec("sync", {"v": 1}, key="k", debounce_seconds=30))
    b = queue.enqueue(ActivitySpec("sync", {"v": 2}, key="k", debounce_seconds=30))
    assert a.created and not b.created and a.activity_id == b.activity_id
    doc = queue.context.activities.find_one({"_id": a.activity_id})
    assert doc["payload"] == {"v": 2} and doc["status"] == "scheduled"
    with pytest.raises(InvalidArgument, match="needs a key"):
        ActivitySpec("sync", {}, debounce_seconds=30)


@pytest.mark.parametrize("kw", [{"concurrency": 0}, {"concurrency": -1},
                                {"concurrency": "1.5"}, {"concurrency": 10**9},
                                {"rate": "0/1m"}, {"rate": "5/0s"}, {"rate": "fast"},
                                {"rate": "5"}, {}])
def test_bad_limits_are_refused(kw: dict[str, object]) -> None:
    with pytest.raises(InvalidArgument):
        make_limits("t", **kw)


def test_explain_says_why_it_waits(queue: RunnerQ) -> None:
    _limit(queue, "charge", concurrency=1)
    ids = _enqueue(queue, "charge", n=2)
    queue.dequeue("w1", limit=2)
    explained = queue.diagnosis.explain(str(ids[1]))
    assert explained.reason == "held_back"
    assert "charge: 1 of 1 running (w1); the next slot frees when one of them ends" \
        in explained.sentence


def test_cli_limit_commands(run_cli, tmp_path) -> None:
    assert run_cli("init-indexes").code == 0
    r = run_cli("limit", "set", "charge", "--concurrency", "5", "--rate", "100/1m")
    assert r.code == 0, r.stderr
    assert "created limit of charge" in r.stdout
    assert "unchanged" in run_cli("limit", "set", "charge", "--concurrency", "5",
                                  "--rate", "100/1m").stdout
    bad = run_cli("limit", "set", "charge", "--concurrency", "0")
    assert bad.code == 2 and bad.stderr.startswith("error:") and len(bad.stderr.splitlines()) == 1
    bad = run_cli("enqueue", "charge", "--debounce", "30s")
    assert bad.code == 2 and "--key" in bad.stderr
    f = tmp_path / "limits.yaml"
    f.write_text("- type: charge\n  concurrency: 5\n  rate: 100/1m\n- type: mail\n  key_limit: 2\n")
    r = run_cli("limit", "apply", str(f))
    assert r.code == 0 and "1 created, 1 unchanged" in r.stdout, r.stdout
    assert "nothing changed" in run_cli("limit", "apply", str(f)).stdout
    f.write_text("- type: mail\n  key_limit: 2\n")
    assert "would remove charge" in run_cli("limit", "apply", str(f), "--prune", "--dry-run").stdout
    assert run_cli("limit", "apply", str(f), "--prune").code == 0
    listed = run_cli("limit", "list").stdout
    assert "mail" in listed and "charge" not in listed
    assert run_cli("limit", "remove", "nope").code == 4
    assert run_cli("enqueue", "mail", "--key", "tenant-42").code == 0


def test_a_key_behind_a_backlog_waits_a_turn_not_the_backlog(queue: RunnerQ) -> None:
    """Issue 40: a key enqueued behind another key's backlog finishes within a few turns
    (scaled: a backlog of 60, not 500; the rotation does not depend on its size)."""
    _limit(queue, "imp", concurrency=1)
    _enqueue(queue, "imp", key="big", n=60)
    _enqueue(queue, "imp", key="small", n=3)
    order = []
    for _ in range(8):
        queue.context.flow.unblock("imp")
        [claim] = queue.dequeue("w1", types=["imp"])
        order.append(claim.activity.extra["flow_key"])
        queue.ack_success(claim, None)
    # turns alternate: the small key's three run within its first six starts
    assert order[:6].count("small") == 3, order


def test_priorities_order_work_within_a_key(queue: RunnerQ) -> None:
    _limit(queue, "imp", key_limit=5)
    low = queue.enqueue(ActivitySpec("imp", {}, key="k", priority="low")).activity_id
    high = queue.enqueue(ActivitySpec("imp", {}, key="k", priority="high")).activity_id
    got = queue.dequeue("w1", types=["imp"], limit=2)
    assert [c.activity_id for c in got] == [high, low]
