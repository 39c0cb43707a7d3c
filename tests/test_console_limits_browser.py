"""The console's Limits view in a real browser (chromium driven by selenium), as
tests/test_console_browser.py drives the rest of the page: every flow limit with its
values, the slots in use, the busiest keys, the work it holds back and why; a type or a
key that is markup shown as text; with `--allow-actions`, a limit set from the page,
previewed with its before and after, confirmed with the actor's name and audited as the
console's, and a bad value refused with nothing written.

The fixtures and helpers are tests/console_browser.py's (a console, browser and
database of this module's own).
"""

from __future__ import annotations

from typing import Any

import pytest

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.backend.domain.flow import make_limits
from runnerq_cli.backend.domain.specs import ActivitySpec
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
HOSTILE_KEY = '<img src=x onerror="window.__pwned=4">'
HOSTILE_TYPE = '<img src=x onerror="window.__pwned=5">\u202e'  # markup and a bidi override
HOSTILE_TYPE_SHOWN = '<img src=x onerror="window.__pwned=5">\\u202e'
__all__ = ["browser", "env", "rq"]  # fixtures, used by name


@pytest.fixture(scope="module")
def console(env: dict[str, str], rq: RunnerQ) -> Any:
    """charge: concurrency 2, both slots taken by w1, 3 more pending (held back); mail: 1
    per key and 100 a minute, the hostile key's one running and 2 more held; a limit on a
    hostile type with nothing of it yet. Then the console."""
    rq.limits.set(make_limits("charge", concurrency=2))
    rq.limits.set(make_limits("mail", key_limit=1, rate="100/1m"))
    rq.limits.set(make_limits(HOSTILE_TYPE, concurrency=4))
    for i in range(5):
        rq.enqueue(ActivitySpec("charge", {"i": i}))
    for i in range(3):
        rq.enqueue(ActivitySpec("mail", {"i": i}, key=HOSTILE_KEY))
    assert len(rq.dequeue("w1", types=["charge"], limit=5)) == 2
    assert len(rq.dequeue("w2", types=["mail"], limit=3)) == 1
    yield from serving(env)


def row(browser: Any, activity_type: str) -> str:
    found = [r for r in rows(browser, "#limits tr[data-limit]", "data-limit")]
    index = [r[0] for r in found].index(activity_type)
    shown: str = browser.execute_script(
        "return document.querySelectorAll('#limits tr[data-limit]')[arguments[0]].innerText;",
        index)
    return shown


def test_the_overview_says_how_many_limits_and_what_they_hold(browser: Any,
                                                               console: Console) -> None:
    open_view(browser, console, "#/", "#overview-limits")
    line = text(browser, "#overview-limits")
    assert "3 flow limits, 3 slots in use, 1 full; 5 pending held back" in line
    assert page_errors(browser) == []


def test_the_limits_view_shows_values_slots_keys_and_held_back(browser: Any,
                                                               console: Console) -> None:
    open_view(browser, console, "#/limits", "#limits tr[data-limit]")
    assert sorted(attrs(browser, "#limits tr[data-limit]", "data-limit")) == sorted(
        ["charge", "mail", HOSTILE_TYPE])
    assert sorted(rows(browser, "#limits tr[data-limit]", "data-limit", "data-in-use",
                       "data-held-back", "data-full")) == sorted([
        ["charge", "2", "3", "1"], ["mail", "1", "2", "0"], [HOSTILE_TYPE, "0", "0", "0"]])
    charge = row(browser, "charge")
    assert "2 of 2" in charge and "on w1" in charge and "full" in charge
    assert "2 of 2 running" in charge  # why nothing of it starts now, as stats says
    mail = row(browser, "mail")
    assert "per key 1, rate 100/1m" in mail and HOSTILE_KEY + " × 1" in mail and "on w2" in mail
    assert "key full" in mail and "room" in row(browser, HOSTILE_TYPE)  # only a key is at its limit
    hostile = row(browser, HOSTILE_TYPE)
    assert hostile.startswith(HOSTILE_TYPE_SHOWN)  # the override escaped, as the CLI shows it
    assert "concurrency 4" in hostile and "0 of 4" in hostile
    assert browser.execute_script("return window.__pwned || null") is None
    assert attrs(browser, '#limits tr[data-limit="charge"] a', "href") == [
        "#/list/pending?type=charge"]  # the held back, listed
    assert "3 limits, 3 slots in use, 5 pending held back" in text(browser, "#limits-count")
    assert not browser.find_elements("css selector", "#limits [data-action]")  # read-only
    assert page_errors(browser) == []


def fill(browser: Any, field: str, value: str) -> None:
    """Type `value` into a field of the form. The view's refresh may replace the form
    between two fields (it keeps the values typed and waits only while a field has the
    focus): a field replaced under the driver is found again and typed into anew."""
    from selenium.common.exceptions import StaleElementReferenceException

    for _ in range(5):
        try:
            box = browser.find_element("id", "limit-" + field)
            box.clear()
            if value:
                box.send_keys(value)
            if box.get_attribute("value") == value:
                return
        except StaleElementReferenceException:
            continue
    raise AssertionError(f"could not type {value!r} into limit-{field}")


def test_with_allow_actions_a_limit_is_set_from_the_page(
        browser: Any, console: Console, rq: RunnerQ) -> None:
    allow_actions(console)
    change = '#limits tr[data-limit="charge"] [data-action="limit-edit"]'
    open_view(browser, console, "#/limits", change)
    click(browser, change)
    assert browser.find_element("id", "limit-type").get_attribute("value") == "charge"
    assert browser.find_element("id", "limit-concurrency").get_attribute("value") == "2"
    fill(browser, "concurrency", "0")  # refused by the server, nothing written
    click(browser, '#limits [data-action="limit-set"]')
    wait_until(lambda: "concurrency" in text(browser, "#action-error"), timeout=WAIT,
               message="the refusal in a banner")
    assert not browser.find_elements("css selector", "#confirm[open]")
    click(browser, "#action-error-dismiss")

    fill(browser, "concurrency", "3")
    fill(browser, "reason", "provider raised")
    click(browser, '#limits [data-action="limit-set"]')
    wait_until(lambda: rows(browser, "#confirm[open]", "data-action", "data-count")
               == [["limit-set", "1"]], timeout=WAIT, message="the limit-set preview")
    assert "Set the limits of charge to concurrency 3 (now: concurrency 2)." in text(
        browser, "#confirm-summary")
    assert rq.limits.get("charge").limits.concurrency == 2  # a preview reads only
    confirm_as(browser, "ada")
    wait_until(lambda: rq.limits.get("charge").limits.concurrency == 3, timeout=WAIT,
               message="charge's concurrency raised")
    entry = audited(rq, "limit set", "ada")
    assert entry["reason"] == "provider raised"
    wait_until(lambda: "2 of 3" in row(browser, "charge"), timeout=WAIT,
               message="the page showing the new limit")

    click(browser, '#limits [data-action="limit-set"]')  # the same again: nothing to do
    wait_until(lambda: rows(browser, "#confirm[open]", "data-action", "data-count")
               == [["limit-set", "0"]], timeout=WAIT, message="the unchanged preview")
    assert "already concurrency 3: nothing to change" in text(browser, "#confirm-summary")
    assert browser.find_element("id", "confirm-ok").get_attribute("disabled") is not None
    click(browser, "#confirm-cancel")

    # Its name has quotes no CSS selector takes as written: the row found by its data.
    browser.execute_script(
        "Array.from(document.querySelectorAll('#limits tr[data-limit]'))"
        ".find((tr) => tr.dataset.limit === arguments[0])"
        ".querySelector('[data-action=limit-edit]').click();", HOSTILE_TYPE)
    assert browser.find_element("id", "limit-type").get_attribute("value") == HOSTILE_TYPE
    fill(browser, "concurrency", "")
    fill(browser, "key-limit", "2")
    click(browser, '#limits [data-action="limit-set"]')
    wait_until(lambda: rows(browser, "#confirm[open]", "data-action") == [["limit-set"]],
               timeout=WAIT, message="the hostile type's preview")
    assert HOSTILE_TYPE_SHOWN + " to per key 2 (now: concurrency 4)" in text(
        browser, "#confirm-summary")
    confirm_as(browser, "ada")
    wait_until(lambda: rq.limits.get(HOSTILE_TYPE).limits.key_concurrency == 2,
               timeout=WAIT, message="the hostile type's limit set")
    assert rq.limits.get(HOSTILE_TYPE).limits.concurrency is None  # left empty: removed
    audited(rq, "limit set", "ada")
    assert browser.execute_script("return window.__pwned || null") is None
    # The console's restart with --allow-actions refused the stream for a moment, and the
    # refused concurrency 0 was a 400 the browser logs: neither is the page's error.
    assert [e for e in page_errors(browser) if "ERR_CONNECTION_REFUSED" not in e
            and "limit-set/preview" not in e] == []
