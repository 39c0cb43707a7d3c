"""Recurring schedules through the backend's API (docs/design.md, "Schedules"): the store,
the fire instants, the missed-fire and overlap policies, exactly one activity per fire
with firers racing or killed mid-fire, and the views' reads."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest

from runnerq_cli.backend.domain.schedules import (
    ScheduleDef,
    Template,
    definition_from_data,
    fire_key,
)
from runnerq_cli.errors import AlreadyExists, InvalidArgument, NotFound

T0 = datetime(2027, 1, 4, 12, 0, 0, tzinfo=UTC)  # a Monday, 12:00 UTC


def every(name: str = "tick", seconds: float = 60, **options) -> ScheduleDef:
    return ScheduleDef(name, Template("report"), every_seconds=seconds, **options)


def cron(expr: str, name: str = "nightly", **options) -> ScheduleDef:
    return ScheduleDef(name, Template("report", {"n": 1}), cron=expr, **options)


def activities(queue, name: str) -> list[dict]:
    return list(queue.db[f"runnerq_{queue.queue}_activities"].find(
        {"metadata.runnerq_schedule": name}).sort("metadata.runnerq_fire_at", 1))


def fire_racing(queue, firers: int) -> list[dict[str, int]]:
    """`fire_due` from `firers` threads released at once: each one's counts."""
    start = threading.Barrier(firers)
    counts: list[dict[str, int]] = []

    def fire() -> None:
        start.wait()
        counts.append(queue.schedules.fire_due())

    threads = [threading.Thread(target=fire) for _ in range(firers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not any(thread.is_alive() for thread in threads)
    return counts


@pytest.fixture
def at_t0(clock):
    clock.now = T0
    return clock


def test_add_list_show_next_and_last_fire(queue, at_t0):
    info = queue.schedules.add(cron("*/5 * * * *"))
    assert info.next_fire_at == T0 + timedelta(minutes=5)
    assert queue.schedules.fire_due() == {"fired": 0, "missed": 0, "skipped": 0, "buffered": 0,
                                          "malformed": 0, "lost": 0}
    at_t0.advance(300)
    assert queue.schedules.fire_due()["fired"] == 1
    [row] = queue.schedules.list_schedules()
    assert row.next_fire_at == T0 + timedelta(minutes=10)
    assert row.last_fire is not None and row.last_fire.kind == "on_time"
    assert row.last_status == "pending"
    [act] = activities(queue, "nightly")
    assert act["metadata"] == {"runnerq_schedule": "nightly",
                               "runnerq_fire_at": "2027-01-04T12:05:00.000Z",
                               "runnerq_fire": "on_time"}
    assert act["idempotency_key"] == "schedule:nightly:2027-01-04T12:05:00.000Z"
    assert row.to_json()["last_fire"]["activity_id"] == str(act["_id"])
    assert queue.schedules.upcoming("nightly", 3) == [
        T0 + timedelta(minutes=m) for m in (10, 15, 20)]
    # A second tick at the same instant fires nothing more.
    assert queue.schedules.fire_due()["fired"] == 0
    assert len(activities(queue, "nightly")) == 1


def test_name_taken_is_refused_and_nothing_written(queue, at_t0):
    queue.schedules.add(every())
    with pytest.raises(AlreadyExists):
        queue.schedules.add(every(seconds=30))
    assert queue.schedules.get_schedule("tick").schedule.definition.every_seconds == 60
    queue.schedules.add(every(seconds=30), replace=True)
    assert queue.schedules.get_schedule("tick").schedule.definition.every_seconds == 30
    with pytest.raises(NotFound):
        queue.schedules.get_schedule("nope")


@pytest.mark.parametrize("data, message", [
    ({"name": "a", "type": "t", "cron": "61 * * * *"}, "invalid cron expression"),
    ({"name": "a", "type": "t", "cron": "0 0 30 2 *"}, "never matches"),
    ({"name": "a", "type": "t", "cron": "@reboot"}, "known names"),
    ({"name": "a", "type": "t", "cron": "* * * *"}, "5 fields"),
    ({"name": "a", "type": "t", "cron": "0 0 * * * *"}, "5 fields"),
    ({"name": "a", "type": "t", "cron": "@daily", "timezone": "Mars/Olympus"}, "time zone"),
    ({"name": "a", "type": "t", "every": "0s"}, "more than 0"),
    ({"name": "a", "type": "t", "every": "10m", "start": "2027-01-02T00:00:00Z",
      "end": "2027-01-01T00:00:00Z"}, "not before end"),
    ({"name": "a", "type": "t"}, "cron expression or an interval"),
    ({"name": "a", "type": "t", "cron": "@daily", "every": "1m"}, "one of them"),
    ({"name": "a b", "type": "t", "every": "1m"}, "invalid schedule name"),
    ({"name": "a", "every": "1m"}, "activity type"),
    ({"name": "a", "type": "t", "every": "1m", "missed": "some"}, "missed-fire policy"),
    ({"name": "a", "type": "t", "every": "1m", "overlap": "queue"}, "overlap policy"),
    ({"name": "a", "type": "t", "every": "1m", "color": "red"}, "unknown field"),
    ({"name": "a", "type": "t", "every": "1m", "priority": "urgent"}, "priority"),
])
def test_bad_definitions_are_refused(data, message):
    with pytest.raises(InvalidArgument, match=message):
        definition_from_data(data)


def test_never_firing_definition_is_refused_and_nothing_written(queue, at_t0):
    ended = every(end_at=T0 - timedelta(days=1))
    with pytest.raises(InvalidArgument, match="never fires"):
        queue.schedules.add(ended)
    with pytest.raises(InvalidArgument, match="never fires"):
        queue.schedules.apply([every("other"), ended])
    assert queue.schedules.list_schedules() == []


def test_interval_is_elapsed_time_from_its_anchor(queue, at_t0):
    queue.schedules.add(every(seconds=600, start_at=T0 + timedelta(seconds=30)))
    assert queue.schedules.upcoming("tick", 3) == [
        T0 + timedelta(seconds=s) for s in (30, 630, 1230)]


def test_missed_fires_after_all_workers_were_down(queue, at_t0):
    """Three schedules of one minute, every worker down for 10 minutes and 30 s."""
    for policy in ("skip", "latest", "all"):
        queue.schedules.add(ScheduleDef(policy, Template("report"), cron="* * * * *",
                                        missed=policy, max_catchup=4))
    at_t0.advance(630)  # the instants 12:01 ... 12:10 are due, the newest 30 s late
    counts = queue.schedules.fire_due()
    assert counts["fired"] == 1 + 1 + 4
    fired = {p: [a["metadata"]["runnerq_fire_at"][11:16] for a in activities(queue, p)]
             for p in ("skip", "latest", "all")}
    assert fired == {"skip": ["12:10"], "latest": ["12:10"],
                     "all": ["12:07", "12:08", "12:09", "12:10"]}
    rows = {r.name: r.schedule for r in queue.schedules.list_schedules()}
    assert {p: rows[p].missed_fires for p in rows} == {"skip": 9, "latest": 9, "all": 6}
    assert all(rows[p].next_fire_at == T0 + timedelta(minutes=11) for p in rows)
    # Longer than the grace: skip fires nothing, latest the newest, late.
    at_t0.advance(60 * 5)  # 12:15:30: instants 12:11 .. 12:15, the newest 30 s late
    at_t0.advance(60)  # 12:16:30: the newest (12:16) 30 s late, on time
    queue.schedules.fire_due()
    assert [a["metadata"]["runnerq_fire"] for a in activities(queue, "skip")] == \
        ["on_time", "on_time"]


def test_skip_fires_nothing_late_and_latest_fires_late(queue, at_t0):
    queue.schedules.add(ScheduleDef("s", Template("r"), every_seconds=3600, missed="skip",
                                    start_at=T0 + timedelta(hours=1)))
    queue.schedules.add(ScheduleDef("l", Template("r"), every_seconds=3600, missed="latest",
                                    start_at=T0 + timedelta(hours=1)))
    at_t0.advance(3600 * 3 + 600)  # 10 minutes past the third instant: late
    queue.schedules.fire_due()
    assert activities(queue, "s") == []
    [late] = activities(queue, "l")
    assert late["metadata"]["runnerq_fire"] == "catchup"
    assert queue.schedules.get_schedule("s").schedule.missed_fires == 3


def fire_twice(queue, clock, definition: ScheduleDef) -> dict[str, int]:
    """Add `definition` (every minute), fire its first instant, then its second while
    the first one's activity is still pending: the second fire's counts."""
    queue.schedules.add(definition)
    clock.advance(60)
    queue.schedules.fire_due()
    clock.advance(60)
    return queue.schedules.fire_due()


def test_overlap_skip_waits_for_the_previous_activity(queue, at_t0):
    counts = fire_twice(queue, at_t0, every("busy", 60, overlap="skip"))
    assert counts == {**counts, "fired": 0, "skipped": 1}
    assert len(activities(queue, "busy")) == 1
    assert queue.schedules.get_schedule("busy").last_fire.kind == "skipped"
    # The previous one ends: the next fire goes ahead.
    claim = queue.dequeue("w", types=["report"])[0]
    queue.ack_success(claim, {"ok": True})
    at_t0.advance(60)
    assert queue.schedules.fire_due()["fired"] == 1
    assert len(activities(queue, "busy")) == 2


def test_overlap_skip_keeps_skipping_while_the_same_activity_runs(queue, at_t0):
    """A skipped fire keeps the previous fire's activity in last_fire: the next fire is
    judged against the same one (it used to go ahead after one skip)."""
    queue.schedules.add(every("busy", 60, overlap="skip"))
    at_t0.advance(60)
    queue.schedules.fire_due()
    [first] = activities(queue, "busy")
    for _ in range(3):
        at_t0.advance(60)
        assert queue.schedules.fire_due()["skipped"] == 1
        last = queue.schedules.get_schedule("busy").last_fire
        assert last.kind == "skipped" and last.activity_id == first["_id"]
    assert len(activities(queue, "busy")) == 1
    assert queue.schedules.get_schedule("busy").schedule.skipped_fires == 3


def _finish(queue, status: str = "ok") -> None:
    claim = queue.dequeue("w", types=["report"])[0]
    if status == "ok":
        queue.ack_success(claim, {"ok": True})
    else:
        queue.ack_failure(claim, "boom", retryable=False)


def test_overlap_buffer_one_holds_one_fire_until_the_previous_ends(queue, at_t0):
    queue.schedules.add(every("one", 60, overlap="buffer_one"))
    at_t0.advance(60)  # 12:01: fires
    assert queue.schedules.fire_due()["fired"] == 1
    at_t0.advance(60)  # 12:02: the first still pending: buffered
    assert queue.schedules.fire_due() == {"fired": 0, "missed": 0, "skipped": 0, "buffered": 1,
                                          "malformed": 0, "lost": 0}
    info = queue.schedules.get_schedule("one")
    assert info.schedule.buffered.at == T0 + timedelta(minutes=2)
    assert info.to_json()["buffered"] == {"at": "2027-01-04T12:02:00.000Z", "kind": "on_time"}
    assert info.next_fire_at == T0 + timedelta(minutes=3)
    at_t0.advance(120)  # 12:04: one buffered already: 12:04 skipped (12:03 is missed)
    assert queue.schedules.fire_due() == {"fired": 0, "missed": 1, "skipped": 1, "buffered": 0,
                                          "malformed": 0, "lost": 0}
    assert len(activities(queue, "one")) == 1
    # Nothing due and the previous still runs: the buffered fire costs no write.
    revision = queue.schedules.get_schedule("one").schedule
    assert queue.schedules.fire_due() == {"fired": 0, "missed": 0, "skipped": 0, "buffered": 0,
                                          "malformed": 0, "lost": 0}
    assert queue.schedules.get_schedule("one").schedule == revision
    _finish(queue, "failed")  # finished (failed counts as finished): the buffered one goes
    assert queue.schedules.fire_due()["fired"] == 1
    fired = [a["metadata"]["runnerq_fire_at"][11:16] for a in activities(queue, "one")]
    assert fired == ["12:01", "12:02"]
    info = queue.schedules.get_schedule("one")
    assert info.schedule.buffered is None and info.last_fire.kind == "on_time"
    assert info.last_fire.activity_id == activities(queue, "one")[1]["_id"]
    assert queue.schedules.fire_due()["fired"] == 0  # released once, and that one runs
    at_t0.advance(60)  # 12:05 due while 12:02's activity runs: buffered in its turn
    queue.schedules.fire_due()
    assert queue.schedules.get_schedule("one").schedule.buffered.at == \
        T0 + timedelta(minutes=5)
    assert queue.schedules.get_schedule("one").schedule.skipped_fires == 1


def test_buffer_one_catch_up_runs_one_buffers_one_and_skips_the_rest(queue, at_t0):
    queue.schedules.add(every("cu", 60, overlap="buffer_one", missed="all", max_catchup=5))
    at_t0.advance(60 * 4 + 90)  # 12:05:30: 12:01 .. 12:05 due, all but the newest late
    counts = queue.schedules.fire_due()
    assert counts["fired"] == 1 and counts["skipped"] == 3
    [act] = activities(queue, "cu")
    assert act["metadata"]["runnerq_fire_at"][11:16] == "12:01"
    held = queue.schedules.get_schedule("cu").schedule.buffered
    assert held.at == T0 + timedelta(minutes=2) and held.kind == "catchup"
    _finish(queue)
    assert queue.schedules.fire_due()["fired"] == 1
    assert [a["metadata"]["runnerq_fire"] for a in activities(queue, "cu")] == \
        ["catchup", "catchup"]


def test_a_buffered_fire_released_by_racing_firers_is_one_activity(queue, at_t0):
    queue.schedules.add(every("race", 60, overlap="buffer_one"))
    at_t0.advance(60)
    queue.schedules.fire_due()
    at_t0.advance(30)
    at_t0.advance(30)
    queue.schedules.fire_due()  # 12:02 buffered
    _finish(queue)
    results = fire_racing(queue, 4)
    assert len(activities(queue, "race")) == 2
    assert sum(r["fired"] for r in results) == 1  # the compare-and-set that won
    assert queue.schedules.get_schedule("race").schedule.fires == 2


def test_a_change_of_definition_drops_the_buffered_fire(queue, at_t0):
    fire_twice(queue, at_t0, every("chg", 60, overlap="buffer_one"))
    assert queue.schedules.get_schedule("chg").schedule.buffered is not None
    queue.schedules.pause("chg")
    queue.schedules.resume("chg")  # kept by pause and resume
    assert queue.schedules.get_schedule("chg").schedule.buffered is not None
    queue.schedules.add(every("chg", 120, overlap="buffer_one"), replace=True)
    assert queue.schedules.get_schedule("chg").schedule.buffered is None


@pytest.mark.parametrize("held", [5, "x", {"kind": "on_time"}, {"at": "2027-01-01"}])
def test_a_malformed_buffered_fire_makes_the_schedule_malformed(queue, at_t0, held):
    queue.schedules.add(every("bad", 60, overlap="buffer_one"))
    queue.db[f"runnerq_{queue.queue}_schedules"].update_one({"_id": "bad"},
                                                            {"$set": {"buffered": held}})
    info = queue.schedules.get_schedule("bad")
    assert info.schedule is None and "buffered" in info.problem


def test_pause_resume_trigger_remove_are_audited(queue, at_t0):
    queue.schedules.add(every())
    assert queue.schedules.pause("tick", reason="deploy") is True
    assert queue.schedules.pause("tick") is False
    at_t0.advance(120)
    assert queue.schedules.fire_due()["fired"] == 0
    result = queue.schedules.trigger("tick")
    [act] = activities(queue, "tick")
    assert act["_id"] == result.activity_id and act["metadata"]["runnerq_fire"] == "trigger"
    assert queue.schedules.resume("tick") is True
    at_t0.advance(30)  # the instant 12:02 is 30 s late: on time; 12:01 missed (skip)
    assert queue.schedules.fire_due() == {"fired": 1, "missed": 1, "skipped": 0, "buffered": 0,
                                          "malformed": 0, "lost": 0}
    queue.schedules.remove("tick")
    assert queue.schedules.list_schedules() == []
    actions = [e.to_json()["action"] for e in queue.audit_log.audit()]
    assert actions == ["schedule remove", "schedule resume", "schedule trigger",
                       "schedule pause", "schedule add"]


def test_apply_is_idempotent_with_prune_and_dry_run(queue, at_t0):
    first = queue.schedules.apply([every("a"), cron("@daily", "b")])
    assert (first.count("create"), first.changed) == (2, True)
    again = queue.schedules.apply([every("a"), cron("@daily", "b")])
    assert again.changed is False and again.count("unchanged") == 2
    plan = queue.schedules.apply([every("a", 30)], prune=True, dry_run=True)
    assert [(c.name, c.action, c.fields) for c in plan.changes] == [
        ("a", "update", ("every_seconds",)), ("b", "remove", ())]
    assert len(queue.schedules.list_schedules()) == 2  # the dry run wrote nothing
    queue.schedules.apply([every("a", 30)], prune=True)
    [row] = queue.schedules.list_schedules()
    assert row.schedule.definition.every_seconds == 30 and row.schedule.revision == 2
    assert [e.to_json()["action"] for e in queue.audit_log.audit()] == [
        "schedule apply", "schedule apply"]


def test_a_malformed_schedule_is_set_aside_once(queue, at_t0):
    coll = queue.db[f"runnerq_{queue.queue}_schedules"]
    queue.schedules.add(every("good"))
    coll.insert_one({"_id": "bad", "activity": {"activity_type": 7}, "every_seconds": 60,
                     "paused": False, "revision": 1, "created_at": T0,
                     "next_fire_at": T0})
    at_t0.advance(60)
    assert queue.schedules.fire_due() == {"fired": 1, "missed": 0, "skipped": 0, "buffered": 0,
                                          "malformed": 1, "lost": 0}
    bad = coll.find_one({"_id": "bad"})
    assert "next_fire_at" not in bad and "activity_type is 7" in bad["problem"]
    rows = {r.name: r for r in queue.schedules.list_schedules()}
    assert rows["bad"].schedule is None and "activity_type" in rows["bad"].problem
    assert rows["bad"].to_json()["problem"] == rows["bad"].problem
    at_t0.advance(60)
    assert queue.schedules.fire_due()["malformed"] == 0  # read once, not at every tick
    # apply rewrites it whole
    queue.schedules.apply([every("bad"), every("good")])
    assert queue.schedules.get_schedule("bad").problem is None


def test_racing_firers_enqueue_one_activity_per_fire(queue, at_t0):
    """Eight threads fire the same due instants at once, several times over."""
    queue.schedules.add(every("race", 60, missed="all", max_catchup=5))
    at_t0.advance(60 * 5)
    counts = fire_racing(queue, 8)
    acts = activities(queue, "race")
    assert [a["metadata"]["runnerq_fire_at"][11:16] for a in acts] == [
        "12:01", "12:02", "12:03", "12:04", "12:05"]
    assert sum(c["fired"] for c in counts) == 5
    assert queue.schedules.get_schedule("race").schedule.fires == 5


def test_a_firer_that_dies_before_its_compare_and_set_loses_and_doubles_nothing(
        queue, at_t0, monkeypatch):
    queue.schedules.add(every("crash", 60))
    at_t0.advance(60)
    coll = queue.schedules._coll
    real = type(coll).update_one

    def die(self, filter, *args, **kwargs):
        if "next_fire_at" in filter:  # the compare-and-set
            raise SystemExit("killed between the enqueue and the compare-and-set")
        return real(self, filter, *args, **kwargs)

    monkeypatch.setattr(type(coll), "update_one", die)
    with pytest.raises(SystemExit):
        queue.schedules.fire_due()
    assert len(activities(queue, "crash")) == 1  # enqueued, next_fire_at not moved
    monkeypatch.setattr(type(coll), "update_one", real)
    assert queue.schedules.fire_due()["fired"] == 1  # answered the same activity
    [act] = activities(queue, "crash")
    row = queue.schedules.get_schedule("crash")
    assert row.last_fire.activity_id == act["_id"]
    assert row.next_fire_at == T0 + timedelta(minutes=2)
    assert act["idempotency_key"] == fire_key("crash", T0 + timedelta(minutes=1))


def test_a_firer_that_dies_between_key_and_activity_leaves_the_fire_due(queue, at_t0):
    """A key with no activity (a firer killed inside its enqueue) is answered for a minute:
    the fire waits, then takes the key over; one activity in the end."""
    queue.schedules.add(every("orphan", 60, missed="all"))
    at_t0.advance(60)
    instant = T0 + timedelta(minutes=1)
    import uuid

    queue.db[f"runnerq_{queue.queue}_idempotency"].insert_one(
        {"_id": {"activity_type": "report", "key": fire_key("orphan", instant)},
         "activity_id": uuid.uuid4(), "created_at": at_t0.now,
         "activity_type": "report", "key": fire_key("orphan", instant)})
    assert queue.schedules.fire_due()["fired"] == 0
    assert queue.schedules.get_schedule("orphan").next_fire_at == instant
    at_t0.advance(61)  # the orphan key is taken over; the fire, 61 s late, is a catchup
    assert queue.schedules.fire_due()["fired"] == 2  # 12:01 (its key taken over), 12:02
    assert [a["metadata"]["runnerq_fire_at"][11:16] for a in activities(queue, "orphan")] \
        == ["12:01", "12:02"]


def test_jitter_delays_each_fire_the_same_way(queue, at_t0):
    queue.schedules.add(every("j", 60, jitter_seconds=30))
    at_t0.advance(60)
    queue.schedules.fire_due()
    [act] = activities(queue, "j")
    assert act["status"] == "scheduled"
    delay = (act["scheduled_at"].replace(tzinfo=UTC) - at_t0.now).total_seconds()
    assert 0 <= delay < 30


def test_views_see_ended_late_and_paused(queue, at_t0):
    queue.schedules.add(every("ends", 60, end_at=T0 + timedelta(seconds=90)))
    queue.schedules.add(every("late", 60))
    at_t0.advance(60 + 61)  # both past their first instant by more than the grace
    rows = {r.name: r for r in queue.schedules.list_schedules()}
    assert rows["late"].late_by(at_t0.now) == pytest.approx(1.0)
    queue.schedules.fire_due()  # "ends" fires nothing on time (skip) and has no instant left
    rows = {r.name: r for r in queue.schedules.list_schedules()}
    assert rows["ends"].ended and rows["ends"].to_json()["ended"] is True
    assert rows["late"].late_by(at_t0.now) is None and not rows["late"].ended
    queue.schedules.pause("late")
    at_t0.advance(3600)
    assert queue.schedules.get_schedule("late").late_by(at_t0.now) is None


def test_the_documented_key_and_jitter_of_a_fire() -> None:
    """docs/design.md's worked example: the key's instant text and the jitter's hash."""
    from runnerq_cli.backend.domain.schedules import jitter_for

    instant = datetime(2027, 3, 28, 1, 0, tzinfo=UTC)
    assert fire_key("nightly", instant) == "schedule:nightly:2027-03-28T01:00:00.000Z"
    assert jitter_for("nightly", instant, 60) == 10.076


@pytest.mark.parametrize("breakage", [
    {"$set": {"last_fire": 5}},  # a malformed last_fire
    {"$set": {"cron": "0 * * * *"}},  # both cron and every_seconds: malformed
    {"$set": {"buffered": [{"at": T0}]}},  # a list of buffered fires: malformed
])
def test_a_schedule_set_aside_with_a_buffered_fire_is_due_no_more(queue, at_t0, breakage):
    """Set aside means read once, not at every tick (design.md, "Malformed schedules"):
    the buffered branch of the firing query must not find it again, and the set-aside's
    fence must match whatever `buffered` it read."""
    from runnerq_cli.backend.domain import queries

    coll = queue.db[f"runnerq_{queue.queue}_schedules"]
    queue.schedules.add(every("aside", 60, overlap="buffer_one"))
    at_t0.advance(60)
    queue.schedules.fire_due()  # 12:01 fires (pending)
    at_t0.advance(60)
    queue.schedules.fire_due()  # 12:02 buffered
    coll.update_one({"_id": "aside"}, breakage)
    assert queue.schedules.fire_due()["malformed"] == 1
    assert coll.count_documents(queries.due_schedules(at_t0.now).filter) == 0
    at_t0.advance(30)
    assert queue.schedules.fire_due()["malformed"] == 0  # not found: nothing sent
    assert "problem" in coll.find_one({"_id": "aside"})


def test_the_buffered_fires_index_holds_only_schedules_with_a_buffered_fire() -> None:
    """design.md, "Firing": the second branch's index holds only the schedules with a
    buffered fire. MongoDB's sparse rule for a compound index is "indexed when the document
    has any of its keys": with `paused` (which every schedule has) among them, it held every
    schedule. Only keys under `buffered` keep it to those."""
    from runnerq_cli.backend.domain.index_specs import index_plan
    from runnerq_cli.config import Settings

    [spec] = [s for s in index_plan(Settings()) if s.why.startswith("buffered fires")]
    assert spec.options.get("sparse") is True
    assert all(key.startswith("buffered.") for key, _ in spec.keys), spec.keys


def test_a_full_page_of_waiting_buffered_fires_hides_no_due_schedule(queue, at_t0):
    """Three ended schedules whose buffered fires wait (null next_fire_at: first in the
    order) fill a page of 3: the next page still finds the due one."""
    coll = queue.db[f"runnerq_{queue.queue}_schedules"]
    for n in range(3):
        fire_twice(queue, at_t0, every(f"w{n}", 60, overlap="buffer_one"))
        coll.update_one({"_id": f"w{n}"}, {"$set": {"next_fire_at": None}})
    queue.schedules.add(every("due", 60))
    at_t0.advance(60)
    counts = queue.schedules.fire_due(limit=3)
    assert counts["fired"] == 1
    assert len(activities(queue, "due")) == 1


def test_a_trigger_racing_a_release_leaves_the_released_fire_as_the_previous(
        queue, at_t0, monkeypatch):
    """A trigger that read the schedule before a buffered fire was released records
    nothing (its activity stands): the released activity stays the one the next fire
    waits for."""
    fire_twice(queue, at_t0, every("tr", 60, overlap="buffer_one"))
    stale = queue.schedules.get_schedule("tr")
    assert stale.schedule.buffered is not None
    _finish(queue)
    assert queue.schedules.fire_due()["fired"] == 1  # the release
    released = queue.schedules.get_schedule("tr").last_fire.activity_id
    monkeypatch.setattr(queue.schedules, "get_schedule", lambda name: stale)
    triggered = queue.schedules.trigger("tr")
    monkeypatch.undo()
    assert queue.schedules.get_schedule("tr").last_fire.activity_id == released
    assert queue.get_activity(triggered.activity_id).status == "pending"
