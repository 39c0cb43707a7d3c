"""Durable activities on the console page in a real browser (chromium driven by
selenium), as tests/test_console_browser.py drives the rest of the page: the overview
and the lists count waiting work; an activity's page shows its tree (every member,
indented by depth, each a link), its steps and what it waits for; with
`--allow-actions`, a signal sent from the page is asked for, previewed, confirmed with
the actor's name, wakes the activity and is audited as the console's. Text from the
database stays text.

The fixtures and helpers are tests/console_browser.py's (a console, browser and
database of this module's own).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.backend.domain.checkpoints import checkpoint_id
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
    open_view,
    page_errors,
    rows,
    rq,
    serving,
    text,
)
from tests.waiting import wait_until

pytestmark = BROWSER_MARKS
HOSTILE = '<img src=x onerror="window.__pwned=4">'
FAR = datetime(2099, 1, 1, tzinfo=UTC)
__all__ = ["browser", "env", "rq"]  # fixtures, used by name


def _claim(rq: RunnerQ, activity_type: str, worker: str = "seed-worker") -> Any:
    rq.process_scheduled()
    (found,) = rq.dequeue(worker, types=[activity_type], limit=1)
    return found


@pytest.fixture(scope="module")
def saga(rq: RunnerQ) -> dict[str, str]:
    """A saga that charged (a step), spawned two parcels and waits on the first (running
    on w9); the first parcel has a step of its own; an order waits for a signal whose
    name is markup."""
    root = rq.enqueue("saga", {}).activity_id
    held = _claim(rq, "saga")
    rq.durable.checkpoint(held, checkpoint_id(root, "run", "charge"), "Ok", {"paid": 12},
                          "run:charge")
    first = rq.durable.spawn(held, ActivitySpec("parcel", {"n": 1}))
    second = rq.durable.spawn(held, ActivitySpec("parcel", {"n": 2}))
    rq.durable.park(held, "await", "parcel:1", FAR, first.activity_id, first.activity_id)
    parcel = _claim(rq, "parcel", worker="w9")
    rq.durable.checkpoint(parcel, checkpoint_id(parcel.activity_id, "run", "pack"), "Ok", 1,
                          "run:pack")
    order = rq.enqueue(HOSTILE, {}).activity_id
    held = _claim(rq, HOSTILE)
    rq.durable.park(held, "signal", HOSTILE, FAR, checkpoint_id(order, "signal", HOSTILE))
    return {"root": str(root), "running": str(parcel.activity_id),
            "pending": str(second.activity_id if parcel.activity_id == first.activity_id
                           else first.activity_id), "order": str(order)}


@pytest.fixture(scope="module")
def console(env: dict[str, str], saga: dict[str, str]) -> Any:
    yield from serving(env)


def test_the_overview_and_the_lists_count_waiting_work(browser: Any, console: Console,
                                                       env: dict[str, str],
                                                       saga: dict[str, str]) -> None:
    open_view(browser, console, "#/", '[data-count="waiting"] .n')
    assert attr(browser, '[data-count="waiting"]', "data-value") == str(
        cli(env, "stats")["by_status"]["waiting"]) == "2"
    open_view(browser, console, "#/list/waiting", "#list tr[data-id]")
    assert sorted(attrs(browser, "#list tr[data-id]", "data-id")) == sorted(
        [saga["root"], saga["order"]])
    assert page_errors(browser) == []


def test_an_activity_page_shows_its_tree_steps_and_wait(browser: Any, console: Console,
                                                        saga: dict[str, str]) -> None:
    open_view(browser, console, f"#/activity/{saga['running']}", "#tree li")
    members = rows(browser, "#tree li", "data-id", "data-depth", "aria-current")
    assert members[0][:2] == [saga["root"], "0"]
    assert sorted(m[0] for m in members[1:]) == sorted([saga["running"], saga["pending"]])
    assert {m[1] for m in members[1:]} == {"1"}
    assert [m[0] for m in members if m[2] == "true"] == [saga["running"]]
    # Every other member is a link to its page: the root's says what it waits for.
    root_line = text(browser, f'#tree li[data-id="{saga["root"]}"]')
    assert f"waiting for child {saga['running'][:8]} since " in root_line
    assert "; the child is running on worker w9" in root_line
    assert attrs(browser, '[data-step]', "data-step") == ["pack"]
    click(browser, f'#tree li[data-id="{saga["root"]}"] a')
    wait_until(lambda: attr(browser, "#activity", "data-id") == saga["root"], timeout=WAIT,
               message="the root's page")
    wait_until(lambda: attrs(browser, "[data-step]", "data-step") == ["charge"],
               timeout=WAIT, message="the root's steps")
    assert "waiting for child" in text(browser, "#activity .kv")
    assert page_errors(browser) == []


def test_hostile_text_in_a_wait_stays_text(browser: Any, console: Console,
                                           saga: dict[str, str]) -> None:
    open_view(browser, console, f"#/activity/{saga['order']}", "#activity .kv")
    wait_until(lambda: f"waiting for signal {HOSTILE}" in text(browser, "#activity .kv"),
               timeout=WAIT, message="the wait, as text")
    assert browser.find_elements("tag name", "img") == []
    assert browser.execute_script("return window.__pwned") is None


def test_with_allow_actions_a_signal_from_the_page_wakes_it_and_is_audited(
        browser: Any, console: Console, rq: RunnerQ, saga: dict[str, str]) -> None:
    order = saga["order"]
    allow_actions(console)
    open_view(browser, console, f"#/activity/{order}", '#activity [data-action="signal"]')
    click(browser, '[data-action="signal"]')
    wait_until(lambda: browser.find_elements("css selector", "#signal[open]"), timeout=WAIT,
               message="the signal's form")
    # The name it waits for is filled in; a payload that is not JSON is refused on the page.
    assert browser.find_element("id", "signal-name").get_attribute("value") == HOSTILE
    payload = browser.find_element("id", "signal-payload")
    payload.send_keys("{nope")
    browser.find_element("id", "signal-ok").click()
    wait_until(lambda: "not JSON" in text(browser, "#signal-problem"), timeout=WAIT,
               message="the payload refused")
    payload.clear()
    payload.send_keys('{"by": "ana"}')
    browser.find_element("id", "signal-ok").click()
    wait_until(lambda: rows(browser, "#confirm[open]", "data-action", "data-count")
               == [["signal", "1"]], timeout=WAIT, message="the signal's preview")
    assert "it waits for this signal, so it wakes" in text(browser, "#confirm-summary")
    assert rq.get_activity(uuid.UUID(order)).status == "waiting"  # asked first
    confirm_as(browser, "ada from the browser")
    wait_until(lambda: rq.get_activity(uuid.UUID(order)).status == "pending", timeout=WAIT,
               message="the order woken")
    assert rq.durable.get_result(checkpoint_id(uuid.UUID(order), "signal", HOSTILE)).data == {
        "by": "ana"}
    entry = audited(rq, "signal", "ada from the browser")
    assert entry["ids"] == [order] and entry["detail"]["name"] == HOSTILE
    assert browser.find_elements("tag name", "img") == []
    # No script error (the restart with --allow-actions refused the old page's stream).
    assert [e for e in page_errors(browser) if "ERR_CONNECTION_REFUSED" not in e] == []
