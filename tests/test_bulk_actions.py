"""Operator actions by filter: select, then act on exactly the shown set; the CLI's safety rails."""

from __future__ import annotations

import io
import json
import sys
import uuid
from datetime import timedelta

import pytest

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.backend.domain.filters import ActivityFilter
from runnerq_cli.cli.exits import ExitCode
from runnerq_cli.errors import InvalidArgument, WrongState
from tests.helpers import ALL_STATES, raw, snapshot
from tests.helpers import drive_to as make

ELIGIBLE = {
    "cancel": {"pending", "scheduled"},
    "retry": {"failed", "dead_letter", "cancelled"},
    "run-now": {"scheduled"},
    "reschedule": {"pending", "scheduled"},
    "set-priority": {"pending", "scheduled"},
    "delete": {"completed", "failed", "dead_letter", "cancelled"},
}


def params(action: str, queue: RunnerQ) -> dict:
    if action == "reschedule":
        return {"at": queue.context.clock() + timedelta(hours=2)}
    if action == "set-priority":
        return {"priority": "critical"}
    return {}


def one_of_each(queue: RunnerQ, activity_type: str = "job") -> dict[str, uuid.UUID]:
    """One activity in each status (the pending one last: `make` claims the next pending)."""
    order = sorted(ALL_STATES, key=lambda s: s == "pending")
    return {state: make(queue, state, activity_type=activity_type) for state in order}


def made(queue: RunnerQ, clock, state: str, n: int) -> list[uuid.UUID]:
    """`n` activities in `state`, a second apart (selections are oldest first)."""
    out = []
    for _ in range(n):
        out.append(make(queue, state))
        clock.advance(1)
    return out


# ----------------------------------------------------------------- backend


@pytest.mark.parametrize("action", sorted(ELIGIBLE))
@pytest.mark.partitioned
def test_filter_acts_on_eligible_statuses_only(queue: RunnerQ, action: str) -> None:
    ids = one_of_each(queue)
    untouched = {s: raw(queue, a) for s, a in ids.items() if s not in ELIGIBLE[action]}
    selection = queue.bulk.select(action, ActivityFilter(types=("job",)), max_count=50)
    assert set(selection.ids) == {ids[s] for s in ELIGIBLE[action]}
    assert selection.matched == len(ELIGIBLE[action])
    report = queue.bulk.apply(action, selection, reason="incident 42", actor="ana",
                              **params(action, queue))
    assert len(report.applied) == len(ELIGIBLE[action]) and not report.skipped
    for state, before in untouched.items():
        assert raw(queue, ids[state]) == before, state
    for state in ELIGIBLE[action]:
        if action == "delete":
            assert queue.context.activities.count_documents({"_id": ids[state]}) == 0
            assert queue.context.events.count_documents({"activity_id": ids[state]}) == 0
            continue
        event = queue.get_activity_events(ids[state])[0]
        assert (event.detail["reason"], event.detail["actor"]) == ("incident 42", "ana")
    entry = queue.audit_log.audit()[0]
    assert (entry.action, entry.count, entry.reason, entry.actor) == (
        action, len(ELIGIBLE[action]), "incident 42", "ana")
    assert set(entry.ids) == {str(ids[s]) for s in ELIGIBLE[action]}


@pytest.mark.parametrize("action", sorted(ELIGIBLE))
def test_filter_on_an_ineligible_status_is_refused(queue: RunnerQ, action: str) -> None:
    ids = one_of_each(queue)
    before = snapshot(queue)
    # (cancel selects running work too, only when the filter names it: test_running_control)
    named = ELIGIBLE[action] | ({"processing"} if action == "cancel" else set())
    wrong = next(s for s in ALL_STATES if s not in named)
    with pytest.raises(WrongState):
        queue.bulk.select(action, ActivityFilter(statuses=(wrong,)), max_count=10)
    assert snapshot(queue) == before
    assert ids  # every status was there to be (wrongly) matched


@pytest.mark.partitioned
def test_only_the_shown_set_is_acted_on(queue: RunnerQ, clock) -> None:
    shown = made(queue, clock, "failed", 3)
    selection = queue.bulk.select("retry", ActivityFilter(statuses=("failed",)), max_count=10)
    assert selection.ids == shown
    # The queue changes in between: one shown activity is retried and fails again
    # (still "failed", but not the failure that was shown), and a new one fails.
    clock.advance(1)
    queue.operator.retry(shown[0])
    claim = queue.dequeue("w2")[0]
    queue.ack_failure(claim, "again", retryable=False)
    assert raw(queue, shown[0])["status"] == "failed"
    newcomer = make(queue, "failed")
    report = queue.bulk.apply("retry", selection, reason="r", actor="a")
    assert [r.activity_id for r in report.applied] == shown[1:]
    assert [s["id"] for s in report.skipped] == [shown[0]]
    assert "changed since it was shown" in report.skipped[0]["reason"]
    [error] = report.errors()
    assert isinstance(error, WrongState)
    assert raw(queue, shown[0])["status"] == "failed"
    assert raw(queue, newcomer)["status"] == "failed"


def test_max_bounds_the_change_and_repeats_are_harmless(queue: RunnerQ, clock) -> None:
    ids = made(queue, clock, "pending", 5)
    first = queue.bulk.apply("cancel",
                             queue.bulk.select("cancel", ActivityFilter(types=("job",)), 2))
    assert [r.activity_id for r in first.applied] == ids[:2]
    assert [raw(queue, a)["status"] for a in ids] == ["cancelled"] * 2 + ["pending"] * 3
    # The same selection again: nothing more happens, each skip says why.
    again = queue.bulk.apply("cancel",
                             queue.bulk.select("cancel", ActivityFilter(types=("job",)), 2))
    assert [r.activity_id for r in again.applied] == ids[2:4]
    stale = queue.bulk.select("cancel", ActivityFilter(types=("job",)), 5)
    queue.bulk.apply("cancel", stale)
    replay = queue.bulk.apply("cancel", stale)
    assert not replay.applied and len(replay.skipped) == 1
    assert queue.bulk.select("cancel", ActivityFilter(types=("job",)), 5).matched == 0


def test_error_contains_is_literal(queue: RunnerQ) -> None:
    errors = ["a.*b", "axxb", 'bad {"$gt": ""} input', "$where: 1", "plain timeout", "(x"]
    ids = {}
    for text in errors:
        aid = queue.enqueue("job", {}).activity_id
        queue.ack_failure(queue.dequeue("w")[0], text, retryable=False)
        ids[text] = aid
    for needle, expect in ((".*", ["a.*b"]), ('{"$gt": ""}', ['bad {"$gt": ""} input']),
                           ("$where", ["$where: 1"]), ("(", ["(x"]), ("x", ["axxb", "(x"]),
                           ("timeout", ["plain timeout"]), ("TIMEOUT", [])):
        selection = queue.bulk.select("retry", ActivityFilter(error_contains=needle), 50)
        assert set(selection.ids) == {ids[t] for t in expect}, needle
    query = ActivityFilter(error_contains='{"$gt": ""}').query()
    assert query["last_error"] == {"$regex": r'\{"\$gt":\ ""\}'}


def test_filter_fields(queue: RunnerQ, clock) -> None:
    old = make(queue, "pending", metadata={"tenant": "a"})
    clock.advance(3600)
    new = make(queue, "pending", metadata={"tenant": "b"})
    other = make(queue, "pending", activity_type="mail")
    since = clock.now - timedelta(minutes=1)

    def ids(**criteria) -> set:
        return set(queue.bulk.select("cancel", ActivityFilter(**criteria), 50).ids)

    assert ids(since=since) == {new, other}
    assert ids(until=since) == {old}
    assert ids(metadata=(("tenant", "a"),)) == {old}
    assert ids(types=("job", "mail")) == {old, new, other}
    assert ids(types=("mail",)) == {other}
    # Terminal statuses filter on when they ended.
    clock.advance(60)
    queue.operator.cancel(old)
    assert queue.bulk.select("retry", ActivityFilter(since=clock.now), 50).ids == [old]
    # --worker: the activities that worker held or ran an attempt of.
    clock.advance(1)
    ran = queue.enqueue("w", {}).activity_id
    queue.ack_failure(queue.dequeue("host-7", types=["w"])[0], "x", retryable=False)
    elsewhere = queue.enqueue("w", {}).activity_id
    queue.ack_failure(queue.dequeue("host-8", types=["w"])[0], "y", retryable=False)
    queue.flush_outbox()
    assert queue.bulk.select("retry", ActivityFilter(worker="host-7"), 50).ids == [ran]
    assert queue.bulk.select("retry", ActivityFilter(worker="host-8"), 50).ids == [elsewhere]
    with pytest.raises(InvalidArgument):
        ActivityFilter(metadata=(("$where", "1"),))
    with pytest.raises(InvalidArgument):
        ActivityFilter(since=clock.now, until=clock.now - timedelta(seconds=1))


@pytest.mark.partitioned
def test_delete_removes_everything_of_a_terminal_activity(queue: RunnerQ) -> None:
    aid = make(queue, "dead_letter", idempotency_key="k1")
    queue.flush_outbox()
    col = queue.context
    assert col.results.count_documents({"_id": aid}) == 1
    assert col.dead_letter.count_documents({"_id": aid}) == 1
    result = queue.operator.delete(aid, reason="junk", actor="ana")
    assert (result.previous_status, result.status) == ("dead_letter", "deleted")
    for collection in (col.activities, col.results, col.dead_letter):
        assert collection.count_documents({"_id": aid}) == 0
    assert col.events.count_documents({"activity_id": aid}) == 0
    assert col.idempotency.count_documents({"activity_id": aid}) == 0
    # The key is free again: a new activity with it is created.
    assert queue.enqueue("job", {}, idempotency_key="k1").created
    pending = make(queue, "pending")
    with pytest.raises(WrongState):
        queue.operator.delete(pending)


# --------------------------------------------------------------------- CLI


@pytest.fixture
def cq(settings, cli_env) -> RunnerQ:
    backend = RunnerQ(settings)
    backend.maintenance.init_indexes()
    return backend


def cli_failed(cq: RunnerQ, n: int, error: str = "timeout talking to gateway",
               activity_type: str = "charge") -> list[uuid.UUID]:
    out = []
    for _ in range(n):
        aid = cq.enqueue(activity_type, {}).activity_id
        cq.ack_failure(cq.dequeue("w1", types=[activity_type])[0], error, retryable=False)
        out.append(aid)
    return out


def test_cli_filter_needs_max_and_says_how_many(run_cli, cq: RunnerQ) -> None:
    cli_failed(cq, 3)
    before = snapshot(cq)
    res = run_cli("retry", "--type", "charge", "--yes")
    assert res.code == ExitCode.USAGE
    assert res.stderr.startswith("error: 3 activities match") and "--max" in res.stderr
    assert res.stderr.count("\n") == 1
    assert snapshot(cq) == before


def test_cli_dry_run_writes_nothing(run_cli, cq: RunnerQ) -> None:
    ids = cli_failed(cq, 3)
    before = snapshot(cq)
    res = run_cli("retry", "--status", "failed", "--error-contains", "timeout", "--dry-run",
                  "-o", "json")
    assert res.code == 0, res.stderr
    data = json.loads(res.stdout)
    assert (data["matched"], data["selected"], data["dry_run"]) == (3, 3, True)
    assert [s["id"] for s in data["sample"]] == [str(a) for a in ids]
    assert data["sample"][0]["last_error"] == "timeout talking to gateway"
    text = run_cli("retry", "--type", "charge", "--max", "2", "--dry-run")
    assert "3 activities match; would retry 2 (--max 2)" in text.stdout
    assert snapshot(cq) == before
    assert cq.audit_log.audit() == []


def test_cli_off_a_terminal_needs_yes(run_cli, cq: RunnerQ) -> None:
    ids = cli_failed(cq, 2)
    before = snapshot(cq)
    res = run_cli("retry", "--type", "charge", "--max", "5")
    assert res.code == ExitCode.USAGE and "--yes" in res.stderr
    assert snapshot(cq) == before
    res = run_cli("retry", "--type", "charge", "--max", "1", "--yes", "--reason",
                  "gateway fixed", "--actor", "ana", "-o", "json")
    assert res.code == 0, res.stderr
    report = json.loads(res.stdout)
    assert (report["matched"], report["selected"], report["applied"], report["skipped"]) == (
        2, 1, 1, 0)
    assert cq.get_activity(ids[0]).status == "pending"
    assert cq.get_activity(ids[1]).status == "failed"
    event = cq.get_activity_events(ids[0])[0]
    assert (event.event_type, event.detail["reason"], event.detail["actor"]) == (
        "Retried", "gateway fixed", "ana")
    again = run_cli("retry", "--type", "charge", "--max", "5", "--yes")
    assert again.code == 0
    assert "matched 1, shown 1, applied 1, skipped 0" in again.stdout
    assert run_cli("retry", "--type", "charge", "--max", "5", "--yes").stdout.strip() \
        .endswith("matched 0, shown 0, applied 0, skipped 0")


def test_cli_actions_by_filter(run_cli, cq: RunnerQ) -> None:
    waiting = [cq.enqueue("mail", {}, metadata={"tenant": "x"}).activity_id for _ in range(2)]
    res = run_cli("set-priority", "--type", "mail", "--max", "5", "--yes", "high")
    assert res.code == 0, res.stderr
    assert {cq.get_activity(a).priority for a in waiting} == {3}
    res = run_cli("reschedule", "--metadata", "tenant=x", "--delay", "1h", "--max", "5", "-y")
    assert res.code == 0, res.stderr
    assert {cq.get_activity(a).status for a in waiting} == {"scheduled"}
    res = run_cli("run-now", "--type", "mail", "--max", "1", "-y", "-o", "jsonl")
    assert res.code == 0, res.stderr
    assert [json.loads(line)["status"] for line in res.stdout.splitlines()] == ["pending"]
    res = run_cli("cancel", "--type", "mail", "--max", "5", "-y")
    assert res.code == 0 and "applied 2" in res.stdout
    res = run_cli("delete", "--status", "cancelled", "--max", "5", "-y", "--reason", "cleanup")
    assert res.code == 0, res.stderr
    assert cq.context.activities.count_documents({}) == 0
    audit = [e.action for e in cq.audit_log.audit()]
    assert audit == ["delete", "cancel", "run-now", "reschedule", "set-priority"]


def test_cli_ids_still_work_and_delete_refuses_live_work(run_cli, cq: RunnerQ) -> None:
    pending = cq.enqueue("job", {}).activity_id
    res = run_cli("delete", str(pending))
    assert res.code == ExitCode.WRONG_STATE
    assert cq.get_activity(pending).status == "pending"
    dry = run_cli("cancel", str(pending), "--dry-run")
    assert dry.code == 0 and f"would cancel: {pending}" in dry.stdout
    assert cq.get_activity(pending).status == "pending"
    assert run_cli("cancel", str(pending), "--reason", "dup").code == 0
    assert run_cli("delete", str(pending), "-o", "json").code == 0
    assert cq.context.activities.count_documents({"_id": pending}) == 0
    assert run_cli("delete", str(pending)).code == ExitCode.NOT_FOUND


@pytest.mark.parametrize("args, code", [
    (["retry"], ExitCode.USAGE),  # neither ids nor a filter
    (["retry", "{id}", "--type", "charge"], ExitCode.USAGE),  # both
    (["retry", "{id}", "--max", "3"], ExitCode.USAGE),
    (["retry", "--type", "charge", "--max", "0", "-y"], ExitCode.USAGE),
    (["retry", "--type", "charge", "--max", "100000", "-y"], ExitCode.USAGE),
    (["retry", "--since", "yesterday-ish", "--max", "3", "-y"], ExitCode.USAGE),
    (["retry", "--status", "bogus", "--max", "3", "-y"], ExitCode.USAGE),
    (["retry", "--metadata", "$where=1", "--max", "3", "-y"], ExitCode.USAGE),
    (["retry", "--metadata", "novalue", "--max", "3", "-y"], ExitCode.USAGE),
    (["retry", "--error-contains", "", "--max", "3", "-y"], ExitCode.USAGE),
    (["retry", "--status", "pending", "--max", "3", "-y"], ExitCode.WRONG_STATE),
    (["cancel", "--status", "failed", "--max", "3", "-y"], ExitCode.WRONG_STATE),
    (["set-priority", "--type", "charge", "--max", "3", "-y", "urgent"], ExitCode.USAGE),
    (["reschedule", "--type", "charge", "--max", "3", "-y"], ExitCode.USAGE),
    (["retry", "--type", "charge", "--max", "3", "-y", "--reason", "x" * 2000],
     ExitCode.USAGE),
])
def test_cli_bad_input_is_one_line_and_writes_nothing(run_cli, cq: RunnerQ, args: list[str],
                                                      code: int) -> None:
    ids = cli_failed(cq, 1)
    before = snapshot(cq)
    res = run_cli(*[a.replace("{id}", str(ids[0])) for a in args])
    assert res.code == code, res.stderr
    assert res.stderr.startswith("error: ") and res.stderr.count("\n") == 1, res.stderr
    assert "Traceback" not in res.stderr
    assert snapshot(cq) == before
    assert cq.audit_log.audit() == []


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("answer, code", [("y\n", 0), ("n\n", ExitCode.USAGE)])
def test_cli_on_a_terminal_shows_the_set_and_asks(run_cli, cq: RunnerQ, monkeypatch,
                                                  answer: str, code: int) -> None:
    from runnerq_cli.cli import confirmation
    from runnerq_cli.cli.commands import actions

    ids = cli_failed(cq, 2)
    class OnATerminal:  # sys, with stdin a terminal (the runner's output streams kept)
        stdin = _Terminal()
        stdout = property(lambda self: sys.stdout)
        stderr = property(lambda self: sys.stderr)

    for module in (actions, confirmation):  # the sample (actions), the question
        monkeypatch.setattr(module, "sys", OnATerminal())
    res = run_cli("retry", "--type", "charge", "--max", "5", input=answer)
    assert res.code == code, res.stderr
    assert "2 activities match; retry 2 (--max 5)" in res.stdout
    assert all(str(a)[:8] in res.stdout for a in ids)  # the sample (as `list`), then the question
    assert "Retry 2 activities?" in res.stdout
    statuses = {cq.get_activity(a).status for a in ids}
    assert statuses == ({"pending"} if code == 0 else {"failed"})
    if code:
        assert "nothing changed" in res.stderr
