"""Activity ids as text views show them: a unique prefix is accepted back as input.

Text tables print an id's shortest unique prefix (at least 8 hex digits), as
git and docker do; every command that takes an id resolves such a prefix with
one range query on `_id` (backend/domain/idprefix.py). Ambiguous: exit 2 with the
count; unknown: exit 4; too short or not hex: exit 2.
"""

from __future__ import annotations

import json
import uuid

import pytest

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.cli.exits import ExitCode
from tests.helpers import snapshot

TWINS = (uuid.UUID("aaaaaaaa-1111-4000-8000-000000000001"),
         uuid.UUID("aaaaaaaa-2222-4000-8000-000000000002"))


@pytest.fixture
def rq(settings, cli_env) -> RunnerQ:
    rq = RunnerQ(settings)
    rq.maintenance.init_indexes()
    return rq


@pytest.fixture
def twins(rq: RunnerQ) -> tuple[uuid.UUID, ...]:
    """Two pending activities whose ids share their first 8 hex digits."""
    template = rq.context.activities.find_one({"_id": rq.enqueue("job", {}).activity_id})
    rq.context.activities.delete_one({"_id": template["_id"]})
    for aid in TWINS:
        rq.context.activities.insert_one({**template, "_id": aid})
    return TWINS


def test_a_prefix_names_the_activity_in_every_command(rq, run_cli) -> None:
    other = rq.enqueue("job", {}).activity_id
    aid = rq.enqueue("job", {}).activity_id
    prefix = str(aid)[:8]
    assert not str(other).startswith(prefix)
    listed = run_cli("list", "pending").stdout
    assert prefix in listed and str(aid) not in listed
    show = run_cli("show", prefix, "-o", "json")
    assert show.code == 0 and json.loads(show.stdout)["activity"]["id"] == str(aid)
    assert json.loads(run_cli("events", prefix, "-o", "json").stdout)["activity_id"] == str(aid)
    assert json.loads(run_cli("explain", prefix, "-o", "json").stdout)["activity_id"] == str(aid)
    assert run_cli("wait", prefix, "--timeout", "0.1").code == ExitCode.WAIT_TIMEOUT
    assert run_cli("result", prefix).code == ExitCode.NO_RESULT
    tail = run_cli("tail", "events", "--no-follow", "--activity", prefix, "-o", "jsonl")
    assert tail.code == 0 and {json.loads(line)["activity_id"] for line in
                               tail.stdout.splitlines()} == {str(aid)}
    assert run_cli("cancel", str(aid)[:13].upper(), "--reason", "prefix").code == 0
    assert rq.get_activity(aid).status == "cancelled"


def test_an_ambiguous_prefix_is_exit_2_with_the_count(rq, twins, run_cli) -> None:
    before = snapshot(rq)
    for args in (["show", "aaaaaaaa"], ["explain", "aaaaaaaa"], ["cancel", "aaaaaaaa"]):
        res = run_cli(*args)
        assert res.code == ExitCode.USAGE, res.stderr
        assert "ambiguous: 2 activities" in res.stderr and res.stderr.count("\n") == 1
    assert snapshot(rq) == before
    # One more digit tells them apart; the table shows just enough digits to.
    res = run_cli("show", "aaaaaaaa-2", "-o", "json")
    assert json.loads(res.stdout)["activity"]["id"] == str(twins[1])
    listed = run_cli("list", "pending").stdout
    assert "aaaaaaaa-1 " in listed and "aaaaaaaa-2 " in listed


def test_an_unknown_or_malformed_prefix(rq, twins, run_cli) -> None:
    assert run_cli("show", "bbbbbbbb").code == ExitCode.NOT_FOUND
    assert run_cli("cancel", "bbbbbbbb").code == ExitCode.NOT_FOUND
    for bad in ("aaaa", "aaaaaaaz", "aaaaaaaa-1111-4000-8000-00000000000100"):
        res = run_cli("show", bad)
        assert res.code == ExitCode.USAGE, (bad, res.stderr)
        assert "8 or more hex digits" in res.stderr
