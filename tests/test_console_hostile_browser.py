"""The console's pages over hostile data, in a real browser (issue 33).

A page we did not write (`--ui`), here one of our making that uses innerHTML as
RunnerQ's `runnerq-console.html` does (RunnerQ's own page is not in this repository),
served over markup in every field it writes into the page: nothing runs. And our page
over malformed and hostile records: every view shows them as what they are.
The fixtures and helpers are tests/test_console_browser.py's (same skips).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

import tests.test_console_browser as base
from runnerq_cli.backend.api import RunnerQ
from tests.test_console_browser import WAIT, Console, open_view, text
from tests.waiting import wait_until

pytestmark = base.pytestmark
env, rq, browser = base.env, base.rq, base.browser  # the module's fixtures, shared

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
    running = Console(env)
    running.start("--ui", str(page))
    yield running
    running.stop()


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
