"""Reruns do nothing twice (issue 23, item 8).

A bulk action by filter stopped midway (SIGTERM) says "run the same command again to go
on". The rerun leaves out what the first run already did: activities already at the
priority asked, already rescheduled at the time the first run chose (a `--delay` is
counted from the first run), so no activity gets the same change, or its event, twice.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.backend.domain.filters import ActivityFilter
from runnerq_cli.backend.queue.queue import ActivitySpec
from tests.helpers import sigterm_after_first_batch

TOTAL, MAX = 60, 40


def _records(backend: RunnerQ, action: str) -> list[dict[str, Any]]:
    return list(backend.context.events.find({"activity_id": None, "detail.action": action})
                .sort([("timestamp", 1), ("_id", 1)]))


@pytest.mark.parametrize(("action", "args", "event"), [
    ("set-priority", ("high",), "PriorityChanged"),
    ("reschedule", ("--delay", "1h"), "Rescheduled"),
])
@pytest.mark.proof
def test_a_rerun_after_sigterm_goes_on_with_the_rest(
        backend: RunnerQ, cli_env: dict[str, str], run_cli_subprocess: Any,
        action: str, args: tuple[str, ...], event: str) -> None:
    backend.enqueue_many([ActivitySpec("x", {"n": n}) for n in range(TOTAL)])
    command = (action, "--type", "x", "--max", str(MAX), *args, "--yes", "--batch-size", "4")
    code, _, err = sigterm_after_first_batch(cli_env, command,
                                             lambda: _records(backend, action))
    assert code == 130, err
    first = _records(backend, action)[0]["detail"]["count"]
    assert 0 < first < MAX

    rerun = run_cli_subprocess(*command)
    assert rerun.code == 0, rerun.stderr
    changed = Counter(e["activity_id"] for e in backend.context.events.find(
        {"event_type": event}, {"activity_id": 1}))
    assert len(changed) == first + MAX  # the rest, up to --max, never the same ones again
    assert set(changed.values()) == {1}
    if action == "set-priority":
        assert backend.context.events.count_documents(
            {"event_type": event, "$expr": {"$eq": ["$detail.old_priority",
                                                    "$detail.new_priority"]}}) == 0
    else:
        assert "going on with the interrupted run" in rerun.stderr
        times = {d["scheduled_at"] for d in backend.context.activities.find(
            {"status": "scheduled"}, {"scheduled_at": 1})}
        assert len(times) == 1  # both runs chose the first run's time


def test_runs_again_of_a_reschedule_that_max_cut_go_on_with_the_rest(
        backend: RunnerQ, run_cli: Any) -> None:
    """Three whole runs of `reschedule --type x --max N --delay 1h` on 3N activities: each
    goes on with the rest at the first run's time (it rescheduled the same N three times
    and left 2N untouched)."""
    backend.enqueue_many([ActivitySpec("x", {"n": n}) for n in range(30)])
    command = ("reschedule", "--type", "x", "--max", "10", "--delay", "1h", "--yes")
    for run in range(3):
        res = run_cli(*command)
        assert res.code == 0, res.stderr
        assert ("going on with the last run" in res.stderr) == (run > 0), res.stderr
    rescheduled = Counter(e["activity_id"] for e in backend.context.events.find(
        {"event_type": "Rescheduled"}, {"activity_id": 1}))
    assert len(rescheduled) == 30 and set(rescheduled.values()) == {1}
    assert backend.context.activities.count_documents({"status": "pending"}) == 0
    assert len(backend.context.activities.distinct("scheduled_at")) == 1


def test_selecting_again_leaves_out_what_is_already_done(queue: RunnerQ) -> None:
    ids = [queue.enqueue("x", {}).activity_id for _ in range(3)]
    queue.operator.set_priority(ids[0], "high")
    selection = queue.bulk.select("set-priority", ActivityFilter(types=("x",)), 10,
                                  priority="high")
    assert set(selection.ids) == set(ids[1:]) and selection.matched == 2
    # Without the action's values (a preview of the filter alone) every match is shown.
    assert queue.bulk.select("set-priority", ActivityFilter(types=("x",)), 10).matched == 3


def test_resume_records_only_the_types_that_were_paused(queue: RunnerQ) -> None:
    queue.control.pause(["a"])
    queue.enqueue("zzz", {})  # a known type, not paused
    state = queue.control.resume(["a", "zzz"])
    assert not state.active
    [record] = list(queue.context.events.find({"event_type": "Resumed"}))
    assert record["detail"]["types"] == ["a"]
    assert queue.control.resume(["zzz"]).active is False  # nothing paused: nothing written
    assert queue.context.events.count_documents({"event_type": "Resumed"}) == 1
