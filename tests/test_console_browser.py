"""The console page in a real browser: Debian's chromium driven by selenium.

One `runnerq-mongo console` process (started as a user starts it, `python -m runnerq_cli
console --port P`) and one headless chromium serve the whole module, over one seeded
database; the tests that restart the console do it on the same port, so the open page
must find it again by itself. What is checked is what a user sees: counts equal to
`stats -o json`, lists, an activity's timeline and result, live events, a stream that
resumes across a restart with nothing lost or repeated, hostile text shown as text, a
second queue of the database shown with its own counts and lists once chosen, and (with
`--allow-actions`) retry, cancel, run-now, redrive, pause and resume done from the page:
each previews the exact set, asks first, changes what it previewed and writes an audit
record marked as the console's. The console is restarted with `--allow-actions` once,
for the first test that needs it.

Without chromium, chromium-driver (apt) or selenium (the test extra) the module is
skipped; .ci/run installs them, and runs it in its Python 3.13 suite only
(RUNNERQ_TEST_NO_BROWSER=1 in the lowest-versions run). The fixtures and the helpers
that read the page are tests/console_browser.py's, shared with the views' modules.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.backend.domain.pagination import ListFilter
from runnerq_cli.backend.domain.specs import ActivitySpec
from tests.console_browser import (
    BROWSER_MARKS,
    WAIT,
    Console,
    allow_actions,
    attr,
    attrs,
    audited,
    browser,
    cli,
    click,
    confirm_as,
    env,
    fits_the_width,
    open_view,
    page_errors,
    preview,
    rows,
    rq,
    serving,
    text,
)
from tests.helpers import drive_to
from tests.waiting import wait_until

pytestmark = BROWSER_MARKS
__all__ = ["browser", "env", "rq"]  # fixtures, used by name

# selenium after tests.console_browser, whose import skips this module without it.
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402
from selenium.webdriver.support.select import Select  # noqa: E402

# The page's hostile activity type: markup that would run script if it were parsed.
HOSTILE = '<img src=x onerror="window.__pwned=1">'
HOSTILE_PAYLOAD = {"note": "<script>window.__pwned=2</script>"}
OTHER = "reports"  # the second queue of the database


def enqueue(rq: RunnerQ, activity_type: str, payload: dict[str, Any]) -> str:
    return str(rq.enqueue(activity_type, payload).activity_id)


@pytest.fixture(scope="module")
def seeded(rq: RunnerQ) -> dict[str, list[str]]:
    """A small queue: completed with results, one failure, pending, scheduled, hostile."""
    ids: dict[str, list[str]] = {"completed": [], "failed": [], "pending": [], "hostile": []}
    for n in range(3):
        ids["completed"].append(enqueue(rq, "send_email", {"to": f"user{n}@example.com"}))
    claims = rq.dequeue("seed-worker", types=["send_email"], limit=3)
    for claim in claims:
        rq.ack_success(claim, {"sent_to": claim.activity.payload["to"]})
    ids["failed"].append(enqueue(rq, "charge", {"cents": 1200}))
    (claim,) = rq.dequeue("seed-worker", types=["charge"])
    rq.ack_failure(claim, "card declined", retryable=False)
    for image in ("cat.png", "dog.png"):
        ids["pending"].append(enqueue(rq, "resize", {"image": image}))
    ids["hostile"].append(enqueue(rq, HOSTILE, HOSTILE_PAYLOAD))
    rq.enqueue(ActivitySpec("resize", {"image": "later.png"}, delay_seconds=3600))
    return ids


@pytest.fixture(scope="module")
def other(rq: RunnerQ) -> RunnerQ:
    """A second queue of the same database: two pending, one scheduled, its own types."""
    queue = rq.for_queue(OTHER)
    for n in range(2):
        enqueue(queue, "report", {"n": n})
    queue.enqueue(ActivitySpec("report", {"n": 9}, delay_seconds=3600))
    return queue


@pytest.fixture(scope="module")
def console(env: dict[str, str], seeded: dict[str, list[str]], other: RunnerQ
            ) -> Iterator[Console]:
    yield from serving(env)


def test_the_page_loads_and_its_counts_equal_stats(browser: WebDriver, console: Console,
                                                   env: dict[str, str]) -> None:
    open_view(browser, console, "#/", "[data-count] .n")
    stats = cli(env, "stats")
    shown = {state: int(value) for state, value in rows(browser, "[data-count]", "data-count",
                                                         "data-value")}
    assert shown == stats["by_status"]
    assert browser.find_elements(By.CSS_SELECTOR, "#overview svg.chart")  # the charts drew
    # A whole window reads whole: "15 min", not "15.0 min".
    headings = [h.text for h in browser.find_elements(By.CSS_SELECTOR, "#overview h2")]
    assert "LATENCY (LAST 15 MIN)" in [h.upper() for h in headings], headings
    assert fits_the_width(browser)
    assert not browser.find_elements(By.CSS_SELECTOR, "[data-action]")  # no --allow-actions
    assert page_errors(browser) == []
    browser.set_window_size(420, 860)  # a phone or a split window: one column, no sideways
    try:
        wait_until(lambda: fits_the_width(browser), timeout=WAIT, message="the page at 420 px")
    finally:
        browser.set_window_size(1366, 768)


def test_lists_show_the_activities_and_filter_by_type(browser: WebDriver, console: Console,
                                                      rq: RunnerQ) -> None:
    listed = [str(a.id) for a in rq.inspector.list_page("pending").items]
    open_view(browser, console, "#/list/pending", "#list tr[data-id]")
    assert attrs(browser, "#list tr[data-id]", "data-id") == listed

    resizes = [str(a.id) for a in rq.inspector.list_page(
        "pending", filters=ListFilter(activity_type="resize")).items]
    assert 0 < len(resizes) < len(listed)
    open_view(browser, console, "#/list/pending?type=resize", "#list[data-state=pending]")
    wait_until(lambda: attrs(browser, "#list tr[data-id]", "data-id") == resizes, timeout=WAIT,
               message="only resize activities")


def test_an_activity_opens_with_its_timeline_and_result(browser: WebDriver, console: Console,
                                                        env: dict[str, str],
                                                        seeded: dict[str, list[str]]) -> None:
    activity_id = seeded["completed"][0]
    events = cli(env, "events", activity_id)["events"]
    open_view(browser, console, "#/", "[data-count]")
    # From the keyboard: / focuses the search, an id prefix and Enter open the activity.
    ActionChains(browser).send_keys("/").perform()
    ActionChains(browser).send_keys(activity_id[:8] + Keys.ENTER).perform()
    wait_until(lambda: browser.find_elements(By.CSS_SELECTOR, "#activity #timeline li"),
               timeout=WAIT, message="the activity found by its prefix")
    assert browser.current_url.endswith(f"#/activity/{activity_id}")
    assert attrs(browser, "#timeline li", "data-event") == [e["event_type"] for e in events]
    page = browser.find_element(By.CSS_SELECTOR, "#activity").get_attribute("textContent")
    assert f"Timeline ({len(events)} events, merged" in str(page)
    assert json.loads(text(browser, "#result")) == {
        "sent_to": "user0@example.com"}
    assert attr(browser, "#activity", "data-status") == "completed"
    assert fits_the_width(browser)
    open_view(browser, console, f"#/activity/{seeded['pending'][0]}", "#activity #timeline li")
    page = browser.find_element(By.CSS_SELECTOR, "#activity").get_attribute("textContent")
    assert "Timeline (1 event, merged" in str(page)  # its one step: Enqueued


def test_hostile_text_is_shown_as_text(browser: WebDriver, console: Console,
                                       seeded: dict[str, list[str]]) -> None:
    hostile_id = seeded["hostile"][0]
    open_view(browser, console, "#/list/pending", f'#list tr[data-id="{hostile_id}"]')
    assert HOSTILE in text(browser, f'tr[data-id="{hostile_id}"]')
    open_view(browser, console, f"#/activity/{hostile_id}", "#activity #payload")
    assert HOSTILE in text(browser, "#activity h1")
    assert json.loads(text(browser, "#payload")) == HOSTILE_PAYLOAD
    open_view(browser, console, "#/", "[data-count] .n")
    wait_until(lambda: HOSTILE in text(browser, "#overview"), timeout=WAIT,
               message="the hostile type on the overview")
    assert browser.find_elements(By.TAG_NAME, "img") == []
    assert len(browser.find_elements(By.TAG_NAME, "script")) == 1  # the page's own
    assert browser.execute_script("return window.__pwned") is None


def test_a_malformed_activity_shows_its_problem_as_text(browser: WebDriver,
                                                        console: Console,
                                                        rq: RunnerQ) -> None:
    """A stored document the readers refuse: the page says what is wrong (docs/console.md),
    as text, with the explain sentence; no error page."""
    aid = uuid.uuid4()
    rq.context.activities.insert_one(  # finished: no count or list of the other tests
        {"_id": aid, "activity_type": "job", "payload": {}, "priority": 2,
         "status": "cancelled", "created_at": "yesterday", "last_error": HOSTILE})
    try:
        open_view(browser, console, f"#/activity/{aid}", "#activity #malformed")
        assert 'created_at is "yesterday"' in text(browser, "#malformed")
        assert "malformed" in text(browser, "#explain")
        assert HOSTILE in text(browser, "#activity")  # the last error, as text
        assert browser.find_elements(By.TAG_NAME, "img") == []
    finally:
        rq.context.activities.delete_one({"_id": aid})


def test_switching_the_queue_shows_that_queues_counts_and_lists(
        browser: WebDriver, console: Console, other: RunnerQ) -> None:
    open_view(browser, console, "#/", "[data-count] .n")
    Select(browser.find_element(By.ID, "queue-select")).select_by_value(OTHER)
    counts = dict(other.inspector.stats_snapshot()["by_status"])
    wait_until(lambda: f"queue={OTHER}" in browser.current_url and {
        state: int(value) for state, value in rows(browser, "[data-count]", "data-count",
                                                   "data-value")} == counts,
               timeout=WAIT, message=f"the counts of {OTHER}")
    assert browser.find_element(By.ID, "queue-select").get_attribute("value") == OTHER
    pending = [str(a.id) for a in other.inspector.list_page("pending").items]
    click(browser, 'nav a[data-view="list"]')  # a view of the same queue: the queue stays
    wait_until(lambda: attrs(browser, "#list tr[data-id]", "data-id") == pending, timeout=WAIT,
               message=f"the pending activities of {OTHER}")
    assert f"queue={OTHER}" in browser.current_url


def _live_events(browser: WebDriver) -> list[tuple[str, str, str]]:
    """(event id, activity id, event type) of every event the live view shows."""
    return [(event_id, activity_id, event) for event_id, activity_id, event in rows(
        browser, "#live-events li", "data-event-id", "data-activity-id", "data-event")]


def _open_live(browser: WebDriver, console: Console) -> None:
    open_view(browser, console, "#/live", "#live-events")
    wait_until(lambda: browser.find_element(By.ID, "live-status").get_attribute("data-state")
               == "open", timeout=WAIT, message="the stream open")


def _enqueued_live(browser: WebDriver, activity_id: str) -> bool:
    return (activity_id, "Enqueued") in {(a, t) for _, a, t in _live_events(browser)}


def test_a_new_activity_appears_live(browser: WebDriver, console: Console, rq: RunnerQ) -> None:
    _open_live(browser, console)
    new_id = enqueue(rq, "send_email", {"to": "live@example.com"})
    wait_until(lambda: _enqueued_live(browser, new_id), timeout=WAIT,
               message="the new activity's Enqueued event on the page")


def test_after_a_restart_the_stream_resumes_with_nothing_lost_or_repeated(
        browser: WebDriver, console: Console, rq: RunnerQ) -> None:
    _open_live(browser, console)
    before = enqueue(rq, "resize", {"image": "before.png"})
    wait_until(lambda: _enqueued_live(browser, before), timeout=WAIT, message="before the restart")

    console.stop()
    wait_until(lambda: browser.find_element(By.ID, "live-status").get_attribute("data-state")
               != "open", timeout=WAIT, message="the page to see the console gone")
    while_down = [enqueue(rq, "resize", {"image": f"down{n}.png"}) for n in range(2)]
    console.start(*console.flags)
    after = enqueue(rq, "resize", {"image": "after.png"})

    for activity_id in [*while_down, after]:
        wait_until(lambda a=activity_id: _enqueued_live(browser, a), timeout=WAIT,
                   message=f"{activity_id}'s Enqueued event after the restart")
    shown = _live_events(browser)
    repeated = [event for event, n in Counter(e for e, _, _ in shown).items() if n > 1]
    assert repeated == []
    assert all(event_id for event_id, _, _ in shown)


def test_with_allow_actions_a_retry_from_the_page_changes_it_and_is_audited(
        browser: WebDriver, console: Console, rq: RunnerQ,
        seeded: dict[str, list[str]]) -> None:
    failed_id = seeded["failed"][0]
    allow_actions(console)
    open_view(browser, console, f"#/activity/{failed_id}", '#activity [data-action="retry"]')
    click(browser, '[data-action="retry"]')
    wait_until(lambda: rows(browser, "#confirm[open]", "data-count") == [["1"]], timeout=WAIT,
               message="the preview of exactly this activity")
    assert attrs(browser, "#confirm-ids [data-id]", "data-id") == [failed_id]
    confirm_as(browser, "ada from the browser")

    wait_until(lambda: rq.get_activity(failed_id).status == "pending", timeout=WAIT,
               message="the activity retried")
    assert audited(rq, "retry", "ada from the browser")["ids"] == [failed_id]
    wait_until(lambda: attr(browser, "#activity", "data-status") == "pending", timeout=WAIT,
               message="the page showing it pending")
    # The failing view is stats --by error's grouping: the failure stays listed after it.
    open_view(browser, console, "#/failing", '#failing tr[data-type="charge"]')
    assert rows(browser, '#failing tr[data-type="charge"]', "data-count", "data-failed") \
        == [["1", "1"]]
    assert "card declined" in text(browser, '#failing tr[data-type="charge"]')


def test_with_allow_actions_cancel_asks_first_then_cancels_the_previewed_set(
        browser: WebDriver, console: Console, rq: RunnerQ) -> None:
    ids = [enqueue(rq, "cancel_me", {"n": n}) for n in range(2)]
    allow_actions(console)
    open_view(browser, console, "#/list/pending?type=cancel_me", "#list tr[data-id]")
    assert sorted(preview(browser, "cancel", 2)) == sorted(ids)
    click(browser, "#confirm-cancel")  # asked, and answered no: nothing changes
    wait_until(lambda: not browser.find_elements(By.CSS_SELECTOR, "#confirm[open]"),
               timeout=WAIT, message="the dialog closed")
    assert {rq.get_activity(i).status for i in ids} == {"pending"}

    assert sorted(preview(browser, "cancel", 2)) == sorted(ids)
    confirm_as(browser, "grace")
    wait_until(lambda: {rq.get_activity(i).status for i in ids} == {"cancelled"},
               timeout=WAIT, message="both cancelled")
    assert sorted(audited(rq, "cancel", "grace")["ids"]) == sorted(ids)
    wait_until(lambda: attrs(browser, "#list tr[data-id]", "data-id") == [], timeout=WAIT,
               message="the list without them")


def test_with_allow_actions_run_now_and_redrive_change_exactly_the_previewed_one(
        browser: WebDriver, console: Console, rq: RunnerQ) -> None:
    later = str(drive_to(rq, "scheduled", "later_job"))
    dead = str(drive_to(rq, "dead_letter", "dead_job"))
    allow_actions(console)

    open_view(browser, console, f"#/activity/{later}", '#activity [data-action="run-now"]')
    assert preview(browser, "run-now", 1) == [later]
    confirm_as(browser, "grace")
    wait_until(lambda: attr(browser, "#activity", "data-status") == "pending", timeout=WAIT,
               message="the page showing it pending")
    assert rq.get_activity(later).status == "pending"
    assert audited(rq, "run-now", "grace")["ids"] == [later]

    open_view(browser, console, "#/list/dead_letter?type=dead_job", "#list tr[data-id]")
    assert preview(browser, "redrive", 1) == [dead]
    confirm_as(browser, "grace")
    wait_until(lambda: rq.get_activity(dead).status == "pending", timeout=WAIT,
               message="the dead letter redriven")
    assert audited(rq, "redrive", "grace")["ids"] == [dead]


def test_with_allow_actions_pause_and_resume_from_the_page(
        browser: WebDriver, console: Console, rq: RunnerQ) -> None:
    allow_actions(console)
    open_view(browser, console, "#/pauses", "#pause-types")
    browser.find_element(By.ID, "pause-types").send_keys("report_pdf")
    browser.find_element(By.ID, "pause-reason").send_keys("printer on fire")
    preview(browser, "pause", 0)  # a pause previews the state, not activities
    assert "report_pdf" in text(browser, "#confirm-summary")
    confirm_as(browser, "grace")
    wait_until(lambda: rq.control.paused().types == ("report_pdf",), timeout=WAIT,
               message="report_pdf paused")
    assert audited(rq, "pause", "grace")["reason"] == "printer on fire"
    wait_until(lambda: "report_pdf" in text(browser, "#pauses table"), timeout=WAIT,
               message="the page listing the pause")

    preview(browser, "resume", 0)
    confirm_as(browser, "grace")
    wait_until(lambda: not rq.control.paused().active, timeout=WAIT, message="resumed")
    audited(rq, "resume", "grace")
