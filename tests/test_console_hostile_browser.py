"""The console's pages over hostile data, in a real browser (issue 33).

A page we did not write (`--ui`), here one of our making that uses innerHTML as
RunnerQ's `runnerq-console.html` does (RunnerQ's own page is not in this repository),
served over markup in every field it writes into the page: nothing runs. And our page
over malformed and hostile records: every view shows them as what they are.
The fixtures and helpers are tests/console_browser.py's (same skips).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from runnerq_cli.backend.api import RunnerQ
from tests.console_browser import (
    BROWSER_MARKS,
    WAIT,
    Console,
    browser,
    confirm_as,
    env,
    open_view,
    preview,
    rq,
    serving,
    text,
)
from tests.waiting import wait_until

pytestmark = BROWSER_MARKS
__all__ = ["browser", "env", "rq"]  # fixtures, used by name

MARKUP = '<img src=x onerror="window.__pwned=1">'

# innerHTML with the fields unescaped, as RunnerQ's page writes `id` and
# `current_worker_id`; one inline handler written as fixed text, one made from data.
THEIR_PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>theirs</title></head>
<body><button id="fixed" onclick="window.__clicked = 1">fixed handler</button>
<div id="rows"></div><div id="events"></div>
<script>
(async function () {
  const get = async (p) => (await fetch("/api/observability/" + p)).json();
  const rows = [].concat(await get("activities/pending"), await get("activities/processing"));
  document.getElementById("rows").innerHTML = rows.map((a) =>
    `<div class="row" data-id="${a.id}">${a.id} ${a.activity_type} ` +
    `${a.current_worker_id || a.last_worker_id || "-"}` +
    `<button class="made" onclick="window.__made = '${a.id}'">made</button></div>`).join("");
  const events = [];
  for (const a of rows) events.push(...await get("activities/" + a.id + "/events"));
  document.getElementById("events").innerHTML = events.map((e) =>
    `<i class="${e.event_type}">${e.event_type} ${e.worker_id || ""}</i>`).join("");
  document.body.dataset.drawn = String(rows.length);
})();
</script></body></html>
"""


def _activity(aid: Any, status: str = "pending", **fields: Any) -> dict[str, Any]:
    return {"_id": aid, "activity_type": "job", "payload": {}, "priority": 2,
            "status": status, "created_at": datetime.now(UTC), "retry_count": 0,
            "max_retries": 3, "timeout_seconds": 60, "retry_delay_seconds": 1, **fields}


@pytest.fixture(scope="module")
def hostile(rq: RunnerQ) -> dict[str, str]:
    """Markup in every field a page might write: a string `_id`, a worker id written by
    another program (ours refuse it at registration), an activity type, an event type."""
    running, typed = uuid.uuid4(), uuid.uuid4()
    now = datetime.now(UTC)
    rq.context.activities.insert_many([
        _activity(MARKUP),
        _activity(running, "processing", worker_id=MARKUP, started_at=now),
        _activity(typed, activity_type=MARKUP)])
    rq.context.events.insert_one({"_id": uuid.uuid4().hex, "activity_id": running,
                                  "timestamp": now, "ingested_at": now, "event_type": MARKUP,
                                  "worker_id": MARKUP, "detail": {}})
    rq.context.workers.insert_one({"_id": MARKUP, "host": MARKUP, "pid": 1, "queue": "tests",
                                   "types": [MARKUP], "concurrency": 1, "started_at": now,
                                   "last_heartbeat": now, "in_flight": 1, "counters": {}})
    return {"running": str(running), "typed": str(typed)}


@pytest.fixture(scope="module")
def their_console(env: dict[str, str], hostile: dict[str, str],
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    page = tmp_path_factory.mktemp("ui") / "their-console.html"
    page.write_text(THEIR_PAGE)
    yield from serving(env, "--ui", str(page))


def test_a_page_we_did_not_write_runs_nothing_stored(browser: Any, their_console: Console,
                                                     hostile: dict[str, str]) -> None:
    open_view(browser, their_console, "", "body[data-drawn]")
    # The listable activities, not the one whose id is markup (kept out, counted).
    assert browser.execute_script("return document.body.dataset.drawn") == "2"
    shown = text(browser, "#rows")
    assert hostile["running"] in shown and hostile["typed"] in shown
    # Its own script ran and its fixed handler runs; what data brought in never does:
    # the activity type's <img onerror> is in the page, its handler blocked by the CSP.
    browser.find_element("id", "fixed").click()
    assert browser.execute_script("return window.__clicked") == 1
    wait_until(lambda: browser.execute_script(
        "return Array.from(document.images).every((i) => i.complete)"), timeout=WAIT,
        message="the injected images to fail loading")
    assert browser.find_elements("css selector", "#rows img")  # markup did land...
    assert browser.execute_script("return window.__pwned") is None  # ...and ran nothing
    # The worker id and the event type that are markup never reached the page.
    assert "onerror" not in browser.execute_script(
        "return document.getElementById('events').innerHTML + "
        "Array.from(document.querySelectorAll('.row')).map((r) => r.lastChild.previousSibling"
        " ? r.textContent : '').join('')")


# ------------------------------------------------------------------ our page over the data

BIDI = "refund\u202eexe.txt"


@pytest.fixture(scope="module")
def malformed(rq: RunnerQ, hostile: dict[str, str]) -> dict[str, str]:
    """Records other programs (or hand edits) wrote: each view must show them."""
    now = datetime.now(UTC)
    bad_priority = uuid.uuid4()
    rq.context.activities.insert_one(_activity(bad_priority, priority="high"))
    bidi = str(rq.enqueue(BIDI, {"note": "a\u202eb"}).activity_id)
    rq.context.events.insert_one({
        "_id": uuid.uuid4().hex, "activity_id": None, "timestamp": now, "ingested_at": now,
        "event_type": "OperatorAction", "worker_id": None,
        "detail": {"action": "pause", "types": "a-string-not-a-list", "actor": "mallory",
                   "ids": "not-a-list", "state": "done"}})
    rq.context.workers.insert_one({"_id": "w-malformed", "host": "h", "pid": 2,
                                   "queue": "tests", "types": "not-a-list", "concurrency": 1,
                                   "started_at": now, "last_heartbeat": "yesterday",
                                   "in_flight": 0, "counters": {}})
    return {"bad_priority": str(bad_priority), "bidi": bidi}


@pytest.fixture(scope="module")
def our_console(env: dict[str, str], malformed: dict[str, str]) -> Iterator[Console]:
    yield from serving(env, "--allow-actions")


def _open(browser: Any, console: Console, route: str, ready: str) -> None:
    """open_view, with the browser's log of the pages before left behind."""
    browser.get_log("browser")
    open_view(browser, console, route, ready)


def _no_script_errors(browser: Any) -> None:
    errors = [e["message"] for e in browser.get_log("browser")
              if e["level"] == "SEVERE" and "favicon" not in e["message"]]
    assert errors == []


def test_lists_show_malformed_documents_and_counts_agree(
        browser: Any, our_console: Console, rq: RunnerQ, malformed: dict[str, str]) -> None:
    _open(browser, our_console, "#/list/pending", "#list-count")
    wait_until(lambda: text(browser, '#list [data-state="pending"] .muted') != "", timeout=WAIT,
               message="the tab's count")
    tab = int(text(browser, '#list [data-state="pending"] .muted').replace(",", ""))
    count = browser.find_element("id", "list-count")
    assert int(count.get_attribute("data-rows")) == tab  # 16 said, 16 shown
    assert int(count.get_attribute("data-malformed")) == 1  # the priority that is text
    row = text(browser, f'tr[data-id="{malformed["bad_priority"]}"]')
    assert "malformed" in row and "priority" in row
    assert MARKUP in text(browser, "#list")  # the string _id: readable, shown as text
    assert browser.execute_script("return window.__pwned") is None
    _no_script_errors(browser)


def test_workers_view_counts_what_the_overview_counts(browser: Any,
                                                     our_console: Console) -> None:
    _open(browser, our_console, "#/", "[data-count] .n")
    wait_until(lambda: text(browser, '#overview a[href="#/workers"]'), timeout=WAIT,
               message="the overview's workers")
    summary = text(browser, '#overview a[href="#/workers"]')
    _open(browser, our_console, "#/workers", "#workers-count")
    view = browser.find_element("id", "workers")
    live, stale = view.get_attribute("data-live"), view.get_attribute("data-stale")
    assert summary.startswith(f"{live} live, {stale} stale")
    assert "not-a-list" in text(browser, 'tr[data-worker="w-malformed"]')
    assert "malformed" in text(browser, 'tr[data-worker="w-malformed"]')
    _no_script_errors(browser)


def test_the_audit_view_survives_a_malformed_entry(browser: Any, our_console: Console) -> None:
    _open(browser, our_console, "#/audit", "#audit-count")
    assert "a-string-not-a-list" in text(browser, 'tr[data-actor="mallory"]')
    _no_script_errors(browser)


def test_format_characters_are_shown_visibly(browser: Any, our_console: Console,
                                             malformed: dict[str, str]) -> None:
    _open(browser, our_console, f"#/activity/{malformed['bidi']}", "#activity #payload")
    assert "refund\\u202eexe.txt" in text(browser, "#activity h1")
    assert "\u202e" not in text(browser, "#activity")
    assert "a\\u202eb" in text(browser, "#payload")


def test_invisible_format_characters_are_shown_too(browser: Any, our_console: Console,
                                                   rq: RunnerQ) -> None:
    # A zero-width space, a word joiner and a BOM: `job` and `job\u200b` must not look alike.
    aid = str(rq.enqueue("job\u200b\u2060\ufeff", {"note": "a\u200bb\U000e0041"}).activity_id)
    _open(browser, our_console, f"#/activity/{aid}", "#activity #payload")
    assert "job\\u200b\\u2060\\ufeff" in text(browser, "#activity h1")
    assert "a\\u200bb\\U000e0041" in text(browser, "#payload")
    shown = text(browser, "#activity")
    assert not any(c in shown for c in "\u200b\u2060\ufeff\U000e0041")
    _no_script_errors(browser)


def test_a_schedule_stored_under_a_name_no_action_takes_offers_none(
        browser: Any, our_console: Console, rq: RunnerQ) -> None:
    # Another program's schedule documents: one named with markup, one of our names but
    # malformed. The first gets no buttons that could only fail; the second keeps its own.
    rq.context.schedules.insert_many([{"_id": MARKUP, "name": MARKUP, "paused": True},
                                      {"_id": "half-written", "name": "half-written"}])
    _open(browser, our_console, "#/schedules", "#schedules-count")
    theirs = browser.find_element("css selector", 'tr[data-schedule="half-written"]')
    assert [b.text for b in theirs.find_elements("css selector", "button")] == ["Pause…"]
    rows = [r for r in browser.find_elements("css selector", "#schedules tr[data-schedule]")
            if r.get_attribute("data-schedule") == MARKUP]
    assert len(rows) == 1 and not rows[0].find_elements("css selector", "button")
    assert rows[0].find_elements("css selector", "[data-no-actions]")
    assert browser.execute_script("return window.__pwned") is None
    _no_script_errors(browser)


@pytest.mark.parametrize("route", ["#/constructor", "#/__proto__", "#/list/constructor",
                                   "#/toString"])
def test_hash_routes_that_are_not_views_say_so(browser: Any, our_console: Console,
                                               route: str) -> None:
    _open(browser, our_console, route, "#view p.empty")
    wait_until(lambda: "No " in text(browser, "#view") and "called" in text(browser, "#view"),
               timeout=WAIT, message="no view")
    _no_script_errors(browser)


def test_an_actions_error_stays_until_dismissed(browser: Any, our_console: Console,
                                                rq: RunnerQ) -> None:
    _open(browser, our_console, "#/pauses", "#pause-types")
    browser.find_element("id", "pause-types").send_keys("x" * 300)  # refused on confirm
    preview(browser, "pause", 0)
    confirm_as(browser, "grace")
    wait_until(lambda: browser.find_elements("id", "action-error"), timeout=WAIT,
               message="the action's error")
    ready = browser.find_element("id", "view").get_attribute("data-ready")
    wait_until(lambda: browser.find_element("id", "view").get_attribute("data-ready") != ready,
               timeout=WAIT, message="the view refreshed")  # the refresh keeps the error
    assert "invalid activity type" in text(browser, "#action-error")
    browser.find_element("id", "action-error-dismiss").click()
    assert not browser.find_elements("id", "action-error")
    assert not rq.control.paused().active
