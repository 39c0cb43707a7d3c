"""Claims around paused types (docs/design.md, "Claim order"): the claim names the
pending types it may take, so what it reads does not grow with the paused backlog, and
the claim order holds across the types it takes."""

from __future__ import annotations

from typing import Any

import pytest

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.backend.domain.specs import ActivitySpec
from runnerq_cli.backend.queue.pending_types import FORGET_AFTER, PendingTypes
from runnerq_cli.backend.store import driver


@pytest.fixture
def sent(monkeypatch) -> list[tuple[str, dict[str, Any]]]:
    """The filters of every find_one and find_one_and_update sent (driver.py's)."""
    log: list[tuple[str, dict[str, Any]]] = []
    for name in ("find_one", "find_one_and_update"):
        original = getattr(driver.Collection, name)

        def method(self, filter=None, *args, _name=name, _original=original, **kwargs):
            log.append((_name, dict(filter or {})))
            return _original(self, filter, *args, **kwargs)
        monkeypatch.setattr(driver.Collection, name, method)
    return log


def test_claim_order_holds_across_the_types_not_paused(queue: RunnerQ, clock) -> None:
    order = []
    for kind, priority in (("big", "critical"), ("b", "low"), ("a", "normal"),
                           ("big", "high"), ("c", "high"), ("a", "high"), ("b", "normal")):
        clock.advance(1)
        aid = queue.enqueue(kind, {}, priority=priority).activity_id
        order.append((kind, priority, aid))
    claims = queue.dequeue("w", exclude_types=["big"], limit=10)
    rank = {"critical": 0, "high": 1, "normal": 2, "low": 3}
    expected = [aid for kind, p, aid in sorted(
        ((k, p, a) for k, p, a in order if k != "big"), key=lambda r: rank[r[1]])]
    assert [c.activity_id for c in claims] == expected
    assert {queue.get_activity(a).status for k, _p, a in order if k == "big"} == {"pending"}
    assert queue.dequeue("w", exclude_types=["big"]) == []  # only paused work left


def test_a_type_first_enqueued_later_is_claimed_next(queue: RunnerQ) -> None:
    queue.enqueue("big", {})
    queue.enqueue("a", {}, priority="low")
    assert [c.activity.activity_type for c in queue.dequeue("w", exclude_types=["big"])] == ["a"]
    late = queue.enqueue("late", {}, priority="critical").activity_id  # unknown until now
    queue.enqueue("a", {}, priority="low")
    assert queue.dequeue("w", exclude_types=["big"])[0].activity_id == late


def test_the_claim_names_the_claimable_types_and_never_the_paused(
        queue: RunnerQ, sent: list[tuple[str, dict[str, Any]]]) -> None:
    backend = queue
    backend.enqueue_many([ActivitySpec("big", {}) for _ in range(30)])
    backend.enqueue("a", {})
    backend.enqueue("b", {})
    sent.clear()
    assert len(backend.dequeue("w", exclude_types=["big"], limit=2)) == 2
    claims = [f for name, f in sent if name == "find_one_and_update"]
    looks = [f for name, f in sent if name == "find_one"]
    assert claims and all(c["activity_type"] == {"$in": ["a", "b"]} for c in claims)
    # One look per type found, then the one that finds none; each skips what it knows.
    assert [f["activity_type"] for f in looks] == [
        {"$nin": ["big"]}, {"$nin": ["a", "big"]}, {"$nin": ["a", "b", "big"]}]
    sent.clear()
    backend.enqueue("a", {})
    backend.dequeue("w", exclude_types=["big"])
    assert [f["activity_type"] for n, f in sent if n == "find_one"] == [
        {"$nin": ["a", "b", "big"]}]  # the known types are kept: one look per claim


def test_known_types_are_forgotten_after_a_while(queue: RunnerQ) -> None:
    now = [0.0]
    types = PendingTypes(clock=lambda: now[0])
    queue.enqueue("a", {})
    assert types.claimable(queue.context.activities, ["big"]) == ["a"]
    queue.dequeue("w")
    assert types.claimable(queue.context.activities, ["big"]) == ["a"]  # kept: a seek
    now[0] += FORGET_AFTER + 1
    assert types.claimable(queue.context.activities, ["big"]) == []


@pytest.mark.parametrize("odd", [{}, {"activity_type": 7}, {"activity_type": None}],
                         ids=["missing", "int", "null"])
def test_a_malformed_type_does_not_hide_the_claimable_types(
        queue: RunnerQ, odd: dict[str, Any]) -> None:
    """A pending activity whose `activity_type` is no string sorts before every string
    on the type index: the discovery steps over it (design.md, "Claims around paused
    types") instead of stopping there and finding nothing claimable."""
    import datetime
    import uuid

    queue.enqueue("big", {})
    wanted = queue.enqueue("a", {}).activity_id
    queue.context.activities.insert_one({
        "_id": uuid.uuid4(), "priority": 2, "status": "pending",
        "created_at": datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC), **odd})
    claims = queue.dequeue("w", exclude_types=["big"], limit=5)
    assert [c.activity_id for c in claims] == [wanted]
