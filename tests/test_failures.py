"""What is failing (issue 25, point 1): failures grouped by type and error.

The backend's grouping (rq.inspector.failures_by_type_and_error), doctor's
dead-letter check naming the groups, `stats --by error`, and `--error-contains`
on `list` and `redrive`, each run as a user runs it.
"""

from __future__ import annotations

import json
from datetime import timedelta

from tests.helpers import drive_to


def _incident(queue, clock) -> dict[str, list]:
    """charge: 3 dead-lettered with one error, 1 failed with another; resize: 1 retrying."""
    ids: dict[str, list] = {"dead": [], "failed": [], "retrying": []}
    for _ in range(3):
        ids["dead"].append(drive_to(queue, "dead_letter", "charge", clock=clock,
                                    error="POST https://pay.example/charge: 502 Bad Gateway"))
    ids["failed"].append(drive_to(queue, "failed", "charge", clock=clock, error="card declined"))
    ids["retrying"].append(drive_to(queue, "retrying", "resize", clock=clock, error="disk full"))
    return ids


def test_groups_by_type_and_error_with_first_last_and_example(queue, clock):
    started = clock()
    ids = _incident(queue, clock)
    found = queue.inspector.failures_by_type_and_error(since=timedelta(hours=1))
    rows = [(g.activity_type, g.error, g.count, g.dead_letter, g.failed, g.retrying)
            for g in found.groups]
    assert rows == [
        ("charge", "POST https://pay.example/charge: 502 Bad Gateway", 3, 3, 0, 0),
        ("resize", "disk full", 1, 0, 0, 1),  # as many: the most recent first
        ("charge", "card declined", 1, 0, 1, 0),
    ]
    top = found.groups[0]
    assert top.example_id == ids["dead"][-1]  # the newest
    assert top.first_seen is not None and top.last_seen is not None
    assert started <= top.first_seen < top.last_seen <= clock()
    assert found.total_groups == 3
    assert queue.inspector.failures_by_type_and_error(limit=1).groups == [top]
    json.dumps(found.to_json())


def test_an_incident_stays_in_the_grouping_after_its_retry(queue, clock):
    ids = _incident(queue, clock)
    for aid in ids["dead"]:
        queue.retry(aid)
    found = queue.inspector.failures_by_type_and_error(since=timedelta(hours=1))
    assert found.groups[0].count == 3 and found.groups[0].dead_letter == 3


def test_the_window_leaves_out_older_failures(queue, clock):
    drive_to(queue, "failed", "old", clock=clock, error="old trouble")
    clock.advance(7200)
    drive_to(queue, "failed", "new", clock=clock, error="new trouble")
    found = queue.inspector.failures_by_type_and_error(since=timedelta(hours=1))
    assert [g.activity_type for g in found.groups] == ["new"]
    every = queue.inspector.failures_by_type_and_error()  # every event kept
    assert [g.activity_type for g in every.groups] == ["new", "old"]
