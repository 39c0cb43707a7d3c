"""Pause and resume: stored in the database, obeyed by every worker within a poll interval."""

from __future__ import annotations

import json
import time

import pytest

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.backend.domain.models import Status
from runnerq_cli.backend.domain.pause import PauseState
from runnerq_cli.cli.exits import ExitCode
from runnerq_cli.errors import InvalidArgument
from tests.test_worker_process import APP, ROOT, spawn  # noqa: F401 (fixture)
from tests.waiting import wait_until

# ----------------------------------------------------------------- backend


def test_pause_state_round_trip(queue: RunnerQ) -> None:
    assert not queue.control.paused().active
    state = queue.control.pause(["mail"], reason="smtp down", actor="ana")
    assert (state.all, state.types, state.reason, state.actor) == (False, ("mail",),
                                                                   "smtp down", "ana")
    assert queue.control.pause(["sms", "mail"]).types == ("mail", "sms")
    assert queue.control.resume(["mail"]).types == ("sms",)
    assert not queue.control.resume(["sms"]).active
    # (a partitioned queue keeps its count there too)
    assert queue.context.control.count_documents({"_id": "pause"}) == 0
    whole = queue.control.pause(reason="deploy")
    assert whole.all and whole.covers([]) and whole.covers(["x"])
    with pytest.raises(InvalidArgument, match="whole queue is paused"):
        queue.control.resume(["x"])
    assert queue.control.paused().all
    # Producers are not affected.
    assert queue.enqueue("mail", {}).created
    assert not queue.control.resume().active
    kinds = [e.action for e in queue.audit_log.audit()]
    assert kinds == ["resume", "pause", "resume", "resume", "pause", "pause"]
    events = list(queue.context.events.find({"event_type": {"$in": ["Paused", "Resumed"]}}))
    assert len(events) == 6 and all(e["activity_id"] is None for e in events)


def test_each_type_keeps_its_own_pause(queue: RunnerQ, clock) -> None:
    """Pausing a second type (or re-pausing one) leaves the others' reason, actor and time;
    resuming one leaves the others' too."""
    first = queue.control.pause(["send_email"], reason="mail server down", actor="ana")
    clock.advance(60)
    queue.control.pause(["charge"], reason="card processor", actor="bo")
    clock.advance(60)
    state = queue.control.resume(["charge"])
    note = state.note("send_email")
    assert (note.reason, note.actor, note.at) == ("mail server down", "ana", first.at)
    assert state.describe(when=lambda t: "T0").startswith(
        "paused: types send_email since T0 by ana (mail server down)")
    both = queue.control.pause(["charge"], actor="bo")
    text = both.describe(when=lambda t: "T0" if t == first.at else "T2")
    assert text == "paused: types charge since T2 by bo; send_email since T0 by ana " \
                   "(mail server down)", text
    assert both.to_json()["by_type"]["send_email"]["reason"] == "mail server down"
    assert PauseState.from_json(both.to_json()) == both


def test_a_document_without_notes_still_reads(queue: RunnerQ) -> None:
    """A pause written before per-type notes: its types show the top-level note, and
    keep it when another type is paused."""
    at = queue.now().replace(microsecond=0)
    queue.context.control.insert_one({"_id": "pause", "all": False, "types": ["mail"],
                                      "reason": "smtp down", "actor": "ana", "at": at})
    assert queue.control.paused().note("mail").reason == "smtp down"
    state = queue.control.pause(["sms"], reason="gateway", actor="bo")
    assert (state.note("mail").reason, state.note("mail").actor) == ("smtp down", "ana")
    assert state.note("sms").reason == "gateway"


def test_claim_scope() -> None:
    paused = PauseState(types=("mail",))
    assert paused.claim_scope([]) == (None, ["mail"])  # any type but mail
    assert paused.claim_scope(["mail", "sms"]) == (["sms"], [])
    assert paused.claim_scope(["mail"]) is None
    assert PauseState(all=True).claim_scope(["sms"]) is None
    assert PauseState().claim_scope([]) == (None, [])


def test_dequeue_leaves_out_excluded_types(queue: RunnerQ) -> None:
    mail = queue.enqueue("mail", {}).activity_id
    sms = queue.enqueue("sms", {}).activity_id
    claims = queue.dequeue("w", exclude_types=["mail"], limit=5)
    assert [c.activity_id for c in claims] == [sms]
    assert queue.get_activity(mail).status == "pending"


# --------------------------------------------------------------------- CLI


@pytest.fixture
def backend(settings, cli_env) -> RunnerQ:
    q = RunnerQ(settings)
    q.maintenance.init_indexes()
    return q


def test_cli_pause_resume_stats_workers_tail(run_cli, backend: RunnerQ) -> None:
    res = run_cli("pause", "--type", "mail", "--reason", "smtp down", "--actor", "ana")
    assert res.code == 0, res.stderr
    assert "paused: types mail" in res.stdout and "smtp down" in res.stdout
    stats = json.loads(run_cli("stats", "-o", "json").stdout)
    assert stats["pause"]["types"] == ["mail"] and stats["pause"]["reason"] == "smtp down"
    assert "paused" in run_cli("stats").stdout
    backend.registry.register_worker("w-mail", types=["mail"])
    backend.registry.register_worker("w-all")
    workers = json.loads(run_cli("workers", "-o", "json").stdout)
    assert {w["worker_id"]: w["paused"] for w in workers["workers"]} == {"w-mail": True,
                                                                        "w-all": False}
    text = run_cli("workers").stdout
    assert "queue paused: types mail" in text
    tail = run_cli("tail", "events", "--no-follow", "-o", "jsonl")
    events = [json.loads(line) for line in tail.stdout.splitlines()]
    assert [(e["event_type"], e["activity_id"]) for e in events] == [("Paused", None)]
    assert events[0]["detail"]["reason"] == "smtp down"
    assert "Paused" in run_cli("tail", "events", "--no-follow").stdout
    assert run_cli("enqueue", "mail").code == 0  # producers go on
    res = run_cli("resume", "-o", "json")
    assert res.code == 0 and json.loads(res.stdout)["pause"]["paused"] is False
    assert run_cli("pause").code == 0
    bad = run_cli("resume", "--type", "mail")
    assert bad.code == ExitCode.USAGE and bad.stderr.startswith("error: the whole queue")
    assert backend.control.paused().all


def test_cli_a_second_pause_keeps_the_first_reason(run_cli, backend: RunnerQ) -> None:
    assert run_cli("pause", "--type", "send_email", "--reason", "mail server down").code == 0
    assert run_cli("pause", "--type", "charge").code == 0
    res = run_cli("resume", "--type", "charge")
    assert res.code == 0, res.stderr
    assert "paused: types send_email since" in res.stdout
    assert "(mail server down)" in res.stdout, res.stdout
    assert "(mail server down)" in run_cli("stats").stdout
    stats = json.loads(run_cli("stats", "-o", "json").stdout)
    assert stats["pause"]["by_type"]["send_email"]["reason"] == "mail server down"


def test_burst_worker_on_a_paused_queue_claims_nothing(backend: RunnerQ, run_cli_subprocess):
    mail = backend.enqueue("echo", {}).activity_id
    backend.control.pause(reason="maintenance")
    res = run_cli_subprocess("worker", "--burst", *APP, "--log-format", "plain",
                             env={"PYTHONPATH": str(ROOT)})
    assert res.code == 0, res.stderr
    assert "queue paused: claiming nothing" in res.stderr and "maintenance" in res.stderr
    assert backend.get_activity(mail).status == "pending"
    # Only some types paused: the others are worked off, the paused ones wait.
    backend.control.resume()
    backend.control.pause(["echo"])
    other = backend.enqueue("payload_only", {"value": 1}).activity_id
    res = run_cli_subprocess("worker", "--burst", *APP, "--log-format", "plain",
                             env={"PYTHONPATH": str(ROOT)})
    assert res.code == 0, res.stderr
    assert backend.get_activity(other).status == "completed"
    assert backend.get_activity(mail).status == "pending"


@pytest.mark.slow
def test_pause_stops_two_worker_processes_and_resume_restarts_them(backend: RunnerQ,
                                                                    spawn) -> None:  # noqa: F811
    poll = 0.5
    workers = [spawn(*APP, "--poll-interval", f"{poll}s", "--concurrency", "2")
               for _ in range(2)]
    held = backend.enqueue("sleep", {"seconds": 1.5}).activity_id
    wait_until(lambda: backend.get_activity(held).status == Status.PROCESSING, message="a claim")
    wait_until(lambda: len(backend.registry.list_workers()) == 2, message="two workers registered")

    paused_at = time.monotonic()
    backend.control.pause(reason="test")
    wait_until(lambda: all("queue paused: claiming nothing" in w.log for w in workers),
               timeout=20, message="both workers to see the pause")
    # Each reads the pause at most once per poll interval (plus process and log latency).
    assert time.monotonic() - paused_at < poll + 3.0
    # What a worker already holds finishes.
    wait_until(lambda: backend.get_activity(held).status == Status.COMPLETED, message="held work")

    enqueued_at = backend.context.clock()
    waiting = [backend.enqueue("echo", {"n": n}).activity_id for n in range(4)]
    # Both workers are alive and polling (a heartbeat after the enqueue, several poll
    # intervals later) and have claimed none of it.
    wait_until(lambda: all(w.last_heartbeat > enqueued_at for w in backend.registry.list_workers()),
               timeout=20, message="a heartbeat of each worker after the enqueue")
    assert {backend.get_activity(a).status for a in waiting} == {"pending"}

    resumed_at = backend.context.clock()
    backend.control.resume()
    wait_until(lambda: all(backend.get_activity(a).status == Status.COMPLETED for a in waiting),
               timeout=30, message="the work enqueued while paused")
    assert all(backend.get_activity(a).started_at >= resumed_at for a in waiting)
    wait_until(lambda: all("resumed: claiming again" in w.log for w in workers),
               message="both workers to log the resume")
    for worker in workers:
        worker.proc.terminate()
        assert worker.wait(30) == 0, worker.log


@pytest.mark.parametrize("args", [["pause", "--type", " "], ["pause", "--reason", "x" * 5000],
                                  ["resume", "--actor", "a\x00b"]])
def test_pause_bad_input(run_cli, backend: RunnerQ, args: list[str]) -> None:
    res = run_cli(*args)
    assert res.code == ExitCode.USAGE
    assert res.stderr.startswith("error: ") and res.stderr.count("\n") == 1
    assert backend.context.control.count_documents({}) == 0
    assert backend.audit_log.audit() == []


def test_a_pause_reported_while_the_state_is_read_is_read_again() -> None:
    """The pause stream's `expire` can land while `current` reads the document (the read
    answered before the pause was written, the change reported before the read returned):
    the next call must read again, or a worker on its streams (every = 5 minutes) claims
    paused work until the safety net."""
    from runnerq_cli.backend.domain.pause import PauseWatch

    states = [PauseState(), PauseState(all=True)]
    watch: PauseWatch

    def read() -> PauseState:
        state = states.pop(0)
        if not state.active:
            watch.expire()  # the change arrives mid-read
        return state

    watch = PauseWatch(read, every=300.0)
    assert watch.current()[0].active is False
    assert watch.current() == (PauseState(all=True), True)


def test_a_failed_pause_read_leaves_the_state_not_fresh() -> None:
    """A resume reported by the stream whose read then fails: the worker keeps the paused
    state and must poll (the claim loop waits 5 minutes only on a fresh state), not wait
    for a stream that has already told it."""
    from runnerq_cli.backend.domain.pause import PauseWatch

    answers: list[PauseState | Exception] = [PauseState(all=True), OSError("away"),
                                             PauseState()]

    def read() -> PauseState:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    watch = PauseWatch(read, every=300.0)
    assert watch.current()[0].all and watch.fresh
    watch.expire()  # the resume
    assert watch.current()[0].all and not watch.fresh  # the read failed: paused, stale
    assert watch.current() == (PauseState(), True) and watch.fresh
