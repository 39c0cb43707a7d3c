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
        queue.operator.retry(aid)
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


# ------------------------------------------------------------------ as a user runs it


def test_stats_by_error_lists_the_groups(queue, clock, run_cli):
    ids = _incident(queue, clock)
    res = run_cli("stats", "--by", "error", "--since", "1d")
    assert res.code == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].startswith("failed attempts in the last 1d, by type and error (5 in 3 groups")
    assert lines[1].split()[:3] == ["type", "n", "dead"]
    assert lines[2].split()[:3] == ["charge", "3", "3"] and "502 Bad Gateway" in lines[2]
    assert str(ids["dead"][-1])[:8] in lines[2]
    doc = json.loads(run_cli("stats", "--by", "error", "-o", "json").stdout)
    assert doc["schema"] == "runnerq.failures/1" and doc["total_groups"] == 3
    assert doc["groups"][0]["example_id"] == str(ids["dead"][-1])
    bad = run_cli("stats", "--by", "error", "--watch")
    assert bad.code == 2 and bad.stderr.count("\n") == 1


def test_doctor_names_what_is_failing(queue, clock, run_cli):
    ids = _incident(queue, clock)
    res = run_cli("doctor", "-o", "json")
    check = next(c for c in json.loads(res.stdout)["checks"] if c["name"] == "dead letters")
    assert check["status"] == "warn"
    assert check["message"].startswith("3 dead-lettered in the last hour; failing: charge: "
                                       '"POST https://pay.example/charge: 502 Bad Gateway" '
                                       "(3 dead-lettered, 3 failed attempts, ")
    assert f"e.g. {ids['dead'][-1]}" in check["message"]
    assert [g["activity_type"] for g in check["facts"]["failing"]] == ["charge", "resize",
                                                                        "charge"]
    assert "--error-contains" in check["fix"]


def test_list_and_redrive_by_error(queue, clock, run_cli):
    ids = _incident(queue, clock)
    drive_to(queue, "dead_letter", "charge", clock=clock, error="timeout talking to bank")
    res = run_cli("list", "dead-letter", "--error-contains", "502", "-o", "json")
    assert res.code == 0, res.stderr
    assert sorted(a["id"] for a in json.loads(res.stdout)["items"]) == sorted(
        str(i) for i in ids["dead"])
    # a pattern character is plain text: "." matches a dot only
    assert json.loads(run_cli("list", "dead-letter", "--error-contains", "pay.example/charg",
                              "-o", "json").stdout)["items"]
    assert not json.loads(run_cli("list", "dead-letter", "--error-contains", "pay.exampl.",
                                  "-o", "json").stdout)["items"]
    res = run_cli("redrive", "--error-contains", "502 Bad", "--yes")
    assert res.code == 0, res.stderr
    assert res.stdout.splitlines()[-1] == "redrove 3 activities"
    left = json.loads(run_cli("list", "dead-letter", "-o", "json").stdout)["items"]
    assert [a["last_error"] for a in left] == ["timeout talking to bank"]
    assert run_cli("redrive", "--error-contains", "", "--yes").code == 2
