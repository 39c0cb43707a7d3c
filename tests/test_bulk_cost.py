"""What a bulk action by filter costs at its real batch size (issue 41).

tests/test_bulk_batches.py measures the cost per batch on small batches (25) and
extrapolates it to the default of 500; that hides any part of a batch that grows with
its size (the event copies go INSERT_CHUNK a command). Here the action runs at the
default batch size over 1,000 activities (two full batches) and the whole run's commands
are counted, start-up included; the same run must still write its audit record. A run
stopped after its first batch (of 600 activities: one full batch and one of 100) must
leave exactly that batch done.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from runnerq_cli.backend.domain.filters import ActivityFilter
from runnerq_cli.backend.ops.batches import BATCH_SIZE
from runnerq_cli.backend.store import stamps
from runnerq_cli.backend.store.context import QueueContext
from tests.bulk_fixtures import Commands, bulk_actions, counted, insert_activities

ACTIVITIES = 600  # one full batch and one of 100
PER_THOUSAND_RUN = 1000  # two full batches: what the budget is measured on
PER_THOUSAND = 25  # the budget: commands per 1,000 activities, start-up included


__all__ = ["counted"]  # a fixture, used by name


def _records(ctx: QueueContext) -> list[dict[str, Any]]:
    return list(ctx.events.find({"activity_id": None, "detail.action": "cancel"})
                .sort([("timestamp", 1), ("_id", 1)]))


def _cancel(ctx: QueueContext, commands: Commands, **kwargs: Any) -> tuple[Any, list[str]]:
    bulk = bulk_actions(ctx)
    commands.take()
    selection = bulk.select("cancel", ActivityFilter(statuses=("pending",)), 4000)
    report = bulk.apply("cancel", selection, reason="load shed", batch_size=BATCH_SIZE,
                        **kwargs)
    return report, [name for name in commands.take() if name != "hello"]


@pytest.mark.proof  # 1,200 activities written and acted on: about a minute on the dev server
def test_a_bulk_cancel_by_filter_stops_after_a_batch_and_goes_on(
        counted: tuple[QueueContext, Commands]) -> None:
    """Stopped after its first batch, exactly that batch is cancelled (one event each, no
    outbox left) and the audit record says interrupted; the run again does the rest."""
    ctx, commands = counted
    insert_activities(ctx, ACTIVITIES, "pending")
    asked: list[int] = []

    def after_one() -> bool:
        asked.append(1)
        return len(asked) > 1

    first, _ = _cancel(ctx, commands, should_stop=after_one)
    assert first.interrupted and len(first.applied) == BATCH_SIZE
    assert ctx.activities.count_documents({"status": "cancelled"}) == BATCH_SIZE
    assert [(r["detail"]["state"], r["detail"]["count"]) for r in _records(ctx)] == [
        ("interrupted", BATCH_SIZE)]
    second, sent = _cancel(ctx, commands)
    assert len(second.applied) == ACTIVITIES - BATCH_SIZE and not second.interrupted
    assert ctx.activities.count_documents({"status": "cancelled"}) == ACTIVITIES
    assert ctx.events.count_documents({"event_type": "Cancelled"}) == ACTIVITIES
    assert len(ctx.events.distinct("activity_id", {"event_type": "Cancelled"})) == ACTIVITIES
    assert ctx.activities.count_documents({"outbox": {"$exists": True}}) == 0
    assert [(r["detail"]["state"], r["detail"]["count"]) for r in _records(ctx)] == [
        ("interrupted", BATCH_SIZE), ("done", ACTIVITIES - BATCH_SIZE)]
    # The second run read its one batch once before acting and once after, no more.
    assert Counter(sent)["find"] == 3, Counter(sent)  # the selection, the two reads


@pytest.mark.proof  # as above
def test_a_bulk_cancel_by_filter_costs_at_most_25_commands_per_1000(
        counted: tuple[QueueContext, Commands]) -> None:
    ctx, commands = counted
    insert_activities(ctx, PER_THOUSAND_RUN, "pending")
    report, sent = _cancel(ctx, commands)
    assert len(report.applied) == PER_THOUSAND_RUN
    [record] = _records(ctx)
    assert record["detail"]["state"] == "done"
    assert record["detail"]["count"] == PER_THOUSAND_RUN
    assert ctx.events.count_documents({"event_type": "Cancelled"}) == PER_THOUSAND_RUN
    assert len(sent) * 1000 / PER_THOUSAND_RUN <= PER_THOUSAND, Counter(sent)
    # Each batch's event copies: INSERT_CHUNK a command, so 2 of 250 for a batch of 500.
    copies = BATCH_SIZE // stamps.INSERT_CHUNK
    assert Counter(sent)["update"] <= 2 * (copies + 4) + 2, Counter(sent)
