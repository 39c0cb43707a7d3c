"""Cron schedules across DST (docs/design.md, "The fire instants, and DST"): a 02:30 job
in Europe/Berlin fires once the night the clocks go forward (at 03:00 CEST, the first
instant after the gap) and once the night they go back (the first 02:30, CEST), as
Debian's cron does; a job with a wildcard hour follows the wall clock.

The fast tests drive the backend with a clock of their own; the proofs run the test's
server (a dev server) and a worker under libfaketime at the nights themselves, with
the worker's wall clock elsewhere: the server's clock decides."""

from __future__ import annotations

import itertools
import os
import socket
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from runnerq_cli.backend.domain.schedules import ScheduleDef, Template
from tests.chaos_support import ROOT, faketime_prefix
from tests.waiting import wait_until

BERLIN = "Europe/Berlin"
FORWARD = datetime(2027, 3, 28, 0, 59, 59, tzinfo=UTC)  # 01:59:59 CET, the gap next
BACK = datetime(2027, 10, 31, 0, 29, 59, tzinfo=UTC)  # 02:29:59 CEST, the repeat next


def nightly(expr: str = "30 2 * * *") -> ScheduleDef:
    return ScheduleDef("nightly", Template("charge"), cron=expr, timezone=BERLIN)


def fired_at(queue) -> list[str]:
    docs = queue.db[f"runnerq_{queue.queue}_activities"].find({}).sort(
        "metadata.runnerq_fire_at", 1)
    return [d["metadata"]["runnerq_fire_at"] for d in docs]


def test_spring_forward_fires_once_at_the_first_instant_after_the_gap(queue, clock):
    clock.now = FORWARD
    info = queue.schedules.add(nightly())
    assert info.next_fire_at == datetime(2027, 3, 28, 1, 0, tzinfo=UTC)  # 03:00 CEST
    clock.advance(1)
    assert queue.schedules.fire_due()["fired"] == 1
    assert fired_at(queue) == ["2027-03-28T01:00:00.000Z"]
    # The next night at 02:30 CEST again.
    assert queue.schedules.get_schedule("nightly").next_fire_at == \
        datetime(2027, 3, 29, 0, 30, tzinfo=UTC)
    clock.advance(3600 * 3)
    assert queue.schedules.fire_due()["fired"] == 0


def test_fall_back_fires_once_at_the_first_occurrence(queue, clock):
    clock.now = BACK
    queue.schedules.add(nightly())
    clock.advance(1)
    assert queue.schedules.fire_due()["fired"] == 1
    assert fired_at(queue) == ["2027-10-31T00:30:00.000Z"]  # 02:30 CEST
    clock.advance(3600)  # 01:30 UTC: 02:30 CET, the second 02:30 of the night
    assert queue.schedules.fire_due()["fired"] == 0
    assert queue.schedules.get_schedule("nightly").next_fire_at == \
        datetime(2027, 11, 1, 1, 30, tzinfo=UTC)  # 02:30 CET the next night


def test_a_wildcard_hour_follows_the_wall_clock_both_times(queue, clock):
    clock.now = BACK
    queue.schedules.add(nightly("30 * * * *"))
    for _ in range(3):  # 00:30, 01:30, 02:30 UTC: 02:30 CEST, 02:30 CET, 03:30 CET
        clock.advance(1)
        queue.schedules.fire_due()
        clock.advance(3599)
    assert fired_at(queue) == ["2027-10-31T00:30:00.000Z", "2027-10-31T01:30:00.000Z",
                               "2027-10-31T02:30:00.000Z"]


def test_show_lists_the_nights_in_the_zone_and_utc(queue, clock):
    clock.now = FORWARD - timedelta(days=1)
    queue.schedules.add(nightly())
    upcoming = queue.schedules.upcoming("nightly", 3)
    assert [t.isoformat() for t in upcoming] == [
        "2027-03-27T01:30:00+00:00", "2027-03-28T01:00:00+00:00", "2027-03-29T00:30:00+00:00"]


# ------------------------------------------------------------------ proofs under faketime


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _at(moment: datetime) -> list[str]:
    """A process whose wall clock starts at `moment` and runs on (monotonic left true)."""
    prefix = faketime_prefix("@" + moment.strftime("%Y-%m-%d %H:%M:%S"))
    if not prefix:
        pytest.skip("faketime is not installed (Debian package faketime)")
    return ["env", "TZ=UTC", "FAKETIME_DONT_FAKE_MONOTONIC=1", *prefix]


@pytest.mark.proof
@pytest.mark.parametrize("night, fire, following", [
    (FORWARD - timedelta(seconds=3), "2027-03-28T01:00:00.000Z",
     datetime(2027, 3, 29, 0, 30, tzinfo=UTC)),
    (BACK - timedelta(seconds=3), "2027-10-31T00:30:00.000Z",
     datetime(2027, 11, 1, 1, 30, tzinfo=UTC)),
], ids=["spring-forward", "fall-back"])
def test_a_worker_fires_the_dst_night_once_by_the_servers_clock(tmp_path, night, fire,
                                                                following):
    from runnerq_cli import connect

    port = _free_port()
    uri = f"mongodb://127.0.0.1:{port}/?directConnection=true"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNNERQ_")}
    env.update(RUNNERQ_MONGO_URI=uri, RUNNERQ_DATABASE="dst", RUNNERQ_QUEUE="dst",
               XDG_CONFIG_HOME=str(tmp_path / "xdg"))
    server = subprocess.Popen([*_at(night), sys.executable, "-m", "runnerq_cli",
                               "dev-server", "--port", str(port)], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    worker = None
    try:
        rq = connect(uri, database="dst", queue="dst")
        wait_until(lambda: _pings(rq), timeout=30, message="the dev server")
        rq.maintenance.init_indexes()
        assert abs((rq.now() - night).total_seconds()) < 30  # the server is at the night
        rq.schedules.add(nightly())
        # The worker's own wall clock is two hours and a half off the server's.
        worker = subprocess.Popen(
            ["env", "FAKETIME_DONT_FAKE_MONOTONIC=1",
             *faketime_prefix("@" + (night - timedelta(hours=2, minutes=30)).strftime(
                 "%Y-%m-%d %H:%M:%S")), sys.executable, "-m", "runnerq_cli", "worker",
             "--exec", "charge=true", "--poll-interval", "0.2"],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        acts = rq.context.activities
        done = wait_until(lambda: list(acts.find({"status": "completed"})), timeout=60,
                          message="the night's fire, completed")
        assert [d["metadata"]["runnerq_fire_at"] for d in done] == [fire]
        row = rq.schedules.get_schedule("nightly")
        assert row.next_fire_at == following and row.schedule.fires == 1
        assert acts.count_documents({}) == 1
    finally:
        for proc in (worker, server):
            if proc is not None:
                proc.terminate()
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def _pings(rq) -> bool:
    try:
        rq.ping()
        return True
    except Exception:
        return False


@pytest.mark.parametrize("zone", ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe"])
@pytest.mark.parametrize("expr", ["30 2 * * *", "*/30 * * * *", "15 1-3 * * *"])
def test_missed_fires_counted_backwards_are_the_instants_forwards(zone, expr):
    """The missed-fire policies walk back from now (cronsim in reverse): across each
    zone's DST nights they must find exactly the instants a forward walk fires."""
    timeline = ScheduleDef("x", Template("t"), cron=expr, timezone=zone).timeline(
        datetime(2020, 1, 1, tzinfo=UTC))
    for start in (datetime(2027, 3, 13, 20, tzinfo=UTC), datetime(2027, 3, 27, 20, tzinfo=UTC),
                  datetime(2027, 4, 3, 10, tzinfo=UTC), datetime(2027, 10, 2, 10, tzinfo=UTC),
                  datetime(2027, 10, 30, 20, tzinfo=UTC), datetime(2027, 11, 6, 20, tzinfo=UTC)):
        end = start + timedelta(hours=30)
        forward, moment = [], start - timedelta(milliseconds=1)
        while (found := timeline.after(moment)) is not None and found <= end:
            forward.append(found)
            moment = found
        assert list(timeline.at_or_before(end, not_before=start))[::-1] == forward


def test_an_interval_is_elapsed_time_across_the_night(queue, clock):
    clock.now = FORWARD - timedelta(hours=2)
    queue.schedules.add(ScheduleDef("hourly", Template("t"), every_seconds=3600,
                                    timezone=BERLIN))
    upcoming = queue.schedules.upcoming("hourly", 4)
    assert [(b - a).total_seconds() for a, b in itertools.pairwise(upcoming)] == [3600] * 3
    assert [t.astimezone(ZoneInfo(BERLIN)).hour for t in upcoming] == [0, 1, 3, 4]
