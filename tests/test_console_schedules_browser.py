"""The console's Schedules view in a real browser (chromium driven by selenium), as
tests/test_console_browser.py drives the rest of the page: each schedule's when, zone,
next and last fire (and how its activity ended), paused or not; a malformed one shown as
a row saying so, its text as text; with `--allow-actions`, pause, resume and trigger from
the page, each previewed, confirmed with the actor's name and audited as the console's.

The fixtures and helpers are tests/console_browser.py's (a console, browser and
database of this module's own).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.backend.domain.schedules import ScheduleDef, Template
from tests.console_browser import (
    BROWSER_MARKS,
    WAIT,
    Console,
    allow_actions,
    attrs,
    audited,
    browser,
    click,
    confirm_as,
    env,
    open_view,
    page_errors,
    rows,
    rq,
    serving,
    text,
)
from tests.waiting import wait_until

pytestmark = BROWSER_MARKS
HOSTILE = '<img src=x onerror="window.__pwned=3">'
__all__ = ["browser", "env", "rq"]  # fixtures, used by name


@pytest.fixture(scope="module")
def console(env: dict[str, str], rq: RunnerQ) -> Any:
    """Three schedules (one fired and completed, one paused with a hostile reason) and a
    malformed one whose problem is markup; then the console."""
    rq.schedules.add(ScheduleDef("nightly", Template("report"), cron="30 2 * * *",
                                 timezone="Europe/Berlin"))
    rq.schedules.add(ScheduleDef("tick", Template("ping"), every_seconds=600))
    rq.schedules.add(ScheduleDef("held", Template("ping"), every_seconds=60), paused=True,
                     reason=HOSTILE)
    fired = rq.schedules.trigger("tick")
    (claim,) = rq.dequeue("seed-worker", types=["ping"])
    rq.ack_success(claim, "ok")
    assert claim.activity.id == fired.activity_id
    rq.db["runnerq_tests_schedules"].update_one({"_id": "tick"}, {"$set": {  # buffer_one's
        "buffered": {"at": datetime(2027, 1, 4, 12, 0, tzinfo=UTC), "kind": "catchup"}}})
    rq.db["runnerq_tests_schedules"].insert_one({
        "_id": "broken", "activity": {"activity_type": HOSTILE}, "every_seconds": "often",
        "paused": False, "revision": 1, "created_at": datetime.now(UTC)})
    yield from serving(env)


def test_the_overview_says_how_many_schedules(browser: Any, console: Console) -> None:
    open_view(browser, console, "#/", "#overview-schedules")
    line = text(browser, "#overview-schedules")
    assert "4 schedules" in line and "1 paused" in line and "1 malformed" in line
    assert page_errors(browser) == []


def test_the_schedules_view_shows_each_with_its_fires(browser: Any, console: Console) -> None:
    open_view(browser, console, "#/schedules", "#schedules tr[data-schedule]")
    assert sorted(attrs(browser, "#schedules tr[data-schedule]", "data-schedule")) == [
        "broken", "held", "nightly", "tick"]
    nightly = text(browser, '#schedules tr[data-schedule="nightly"]')
    assert "Europe/Berlin" in nightly and "30 2 * * *" in nightly and "never" in nightly
    tick = text(browser, '#schedules tr[data-schedule="tick"]')
    assert "trigger" in tick and "completed" in tick  # the last fire and how it ended
    assert "1 fire buffered (2027-01-04 12:00:00.000Z)" in tick  # one held back
    assert len(browser.find_elements("css selector", "#schedules [data-buffered]")) == 1
    held = text(browser, '#schedules tr[data-schedule="held"]')
    assert "paused" in held and HOSTILE in held  # the reason, as text
    assert rows(browser, '#schedules tr[data-schedule="broken"]', "data-malformed") == [["1"]]
    assert "malformed" in text(browser, '#schedules tr[data-schedule="broken"]')
    assert "4 schedules" in text(browser, "#schedules-count")
    assert browser.execute_script("return window.__pwned || null") is None
    assert not browser.find_elements("css selector", "#schedules [data-action]")  # read-only
    assert page_errors(browser) == []


def test_with_allow_actions_pause_trigger_resume_from_the_page(
        browser: Any, console: Console, rq: RunnerQ) -> None:
    allow_actions(console)
    open_view(browser, console, "#/schedules",
              '#schedules tr[data-schedule="nightly"] [data-action="schedule-pause"]')
    pause = '#schedules tr[data-schedule="nightly"] [data-action="schedule-pause"]'
    click(browser, pause)
    wait_until(lambda: rows(browser, "#confirm[open]", "data-action", "data-count")
               == [["schedule-pause", "1"]], timeout=WAIT, message="the pause preview")
    assert "Pause schedule nightly" in text(browser, "#confirm-summary")
    assert rq.schedules.get_schedule("nightly").paused is False  # a preview reads only
    confirm_as(browser, "ada")
    wait_until(lambda: rq.schedules.get_schedule("nightly").paused, timeout=WAIT,
               message="nightly paused")
    audited(rq, "schedule pause", "ada")

    trigger = '#schedules tr[data-schedule="nightly"] [data-action="schedule-trigger"]'
    wait_until(lambda: browser.find_elements("css selector", trigger), timeout=WAIT,
               message="the redrawn row")
    click(browser, trigger)
    wait_until(lambda: rows(browser, "#confirm[open]", "data-action")
               == [["schedule-trigger"]], timeout=WAIT, message="the trigger preview")
    confirm_as(browser, "ada")
    wait_until(lambda: rq.audit_log.audit(action="schedule trigger", limit=1)[0].actor
               == "ada", timeout=WAIT, message="the page's trigger audited (the seed's first)")
    entry = audited(rq, "schedule trigger", "ada")
    assert entry["detail"]["schedule"] == "nightly"
    wait_until(lambda: "trigger" in text(browser, '#schedules tr[data-schedule="nightly"]'),
               timeout=WAIT, message="the page showing the trigger as its last fire")

    resume = '#schedules tr[data-schedule="nightly"] [data-action="schedule-resume"]'
    click(browser, resume)
    wait_until(lambda: rows(browser, "#confirm[open]", "data-action")
               == [["schedule-resume"]], timeout=WAIT, message="the resume preview")
    confirm_as(browser, "ada")
    wait_until(lambda: not rq.schedules.get_schedule("nightly").paused, timeout=WAIT,
               message="nightly resumed")
    audited(rq, "schedule resume", "ada")
    # The console's restart with --allow-actions refused the stream for a moment: not ours.
    assert [e for e in page_errors(browser) if "ERR_CONNECTION_REFUSED" not in e] == []
