"""What the console's browser tests share: one headless chromium (Debian's chromium and
chromium-driver, driven by selenium), `runnerq-mongo console` run as a user runs it, a
database of the module's own as the CLI's environment, and the helpers that read the page
and confirm its actions. tests/test_console_browser.py and the tests of each view
(test_console_*_browser.py) import the fixtures by name, so each test module gets its
own console, browser and database: they share nothing at run time, only this code.

Importing this module skips the importing test module when selenium is not installed;
BROWSER_MARKS (each module's `pytestmark`) skip it without chromium or chromedriver, or
with RUNNERQ_TEST_NO_BROWSER=1 (.ci/run's lowest-versions run), and keep the browser
modules on one xdist worker (one chromium at a time).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.config import load_settings
from tests.waiting import LineReader, wait_until

CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
from selenium.common.exceptions import StaleElementReferenceException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402

BROWSER_MARKS = [
    pytest.mark.xdist_group("console_browser"),
    pytest.mark.skipif(
        not (CHROMIUM and os.access(CHROMEDRIVER, os.X_OK)),
        reason="no chromium/chromedriver: apt-get install chromium chromium-driver (.ci/run does)"),
    # .ci/run's lowest-versions run: the page does not depend on them (the 3.13 run has it).
    pytest.mark.skipif(os.environ.get("RUNNERQ_TEST_NO_BROWSER") == "1",
                       reason="RUNNERQ_TEST_NO_BROWSER=1"),
]

WAIT = 20.0  # seconds for anything the page shows (the test server shares this process)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Console:
    """`runnerq-mongo console` as a user runs it: started, stopped, restarted on one port."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        self.flags: tuple[str, ...] = ()
        self.proc: subprocess.Popen[str] | None = None

    def start(self, *flags: str) -> None:
        self.flags = flags
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "runnerq_cli", "console", "--port", str(self.port), *flags],
            env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert self.proc.stdout is not None
        LineReader(self.proc.stdout).wait_for(lambda line: f":{self.port}" in line, timeout=30,
                                              message="the console's URL")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None

    def restart(self, *flags: str) -> None:
        self.stop()
        self.start(*flags)


def serving(env: dict[str, str], *flags: str) -> Iterator[Console]:
    """A console started with `flags` for a module fixture to yield from (after seeding
    what it shows), stopped when the module is done."""
    running = Console(env)
    running.start(*flags)
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def env(server: Any) -> Iterator[dict[str, str]]:
    """One database for the module (dropped at its end), as the CLI's environment."""
    from pymongo import MongoClient

    name = f"rq_test_console_{uuid.uuid4().hex[:10]}"
    environ = {k: v for k, v in os.environ.items() if not k.startswith("RUNNERQ_")}
    environ.update(RUNNERQ_MONGO_URI=server.uri, RUNNERQ_DATABASE=name, RUNNERQ_QUEUE="tests",
                   RUNNERQ_CONFIG="", NO_COLOR="1", RUNNERQ_CONNECT_TIMEOUT="30s")
    yield environ
    with MongoClient(server.uri) as client:
        client.drop_database(name)


@pytest.fixture(scope="module")
def rq(env: dict[str, str]) -> RunnerQ:
    settings = load_settings(None, overrides={
        "uri": env["RUNNERQ_MONGO_URI"], "database": env["RUNNERQ_DATABASE"], "queue": "tests",
        "connect_timeout": 30.0, "server_selection_timeout": 30.0},
        environ={"RUNNERQ_CONFIG": ""})
    backend = RunnerQ(settings)
    backend.maintenance.init_indexes()
    return backend


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1366,768",
                "--disable-dev-shm-usage"):
        options.add_argument(arg)
    if CHROMIUM:
        options.binary_location = CHROMIUM
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


def cli(env: dict[str, str], *args: str) -> Any:
    """`runnerq-mongo ARGS -o json` as a subprocess, its JSON."""
    proc = subprocess.run([sys.executable, "-m", "runnerq_cli", *args, "-o", "json"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def open_view(browser: WebDriver, console: Console, route: str, ready: str) -> None:
    """Load the page at `route` (a new load, not a hash change) and wait until the CSS
    selector `ready` is shown."""
    browser.get("about:blank")
    browser.get(console.url + route)
    wait_until(lambda: browser.find_elements(By.CSS_SELECTOR, ready), timeout=WAIT,
               message=f"{ready} on {route}")


def rows(browser: WebDriver, selector: str, *names: str) -> list[list[str]]:
    """The attributes `names` of every element matching `selector`, read at one instant
    (one script: the page may redraw between two reads)."""
    found: list[list[str]] = browser.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0]))"
        ".map((el) => arguments[1].map((name) => el.getAttribute(name) || ''));",
        selector, list(names))
    return found


def attrs(browser: WebDriver, selector: str, name: str) -> list[str]:
    return [row[0] for row in rows(browser, selector, name)]


def attr(browser: WebDriver, selector: str, name: str) -> str | None:
    found = attrs(browser, selector, name)
    return found[0] if found else None


def text(browser: WebDriver, selector: str) -> str:
    """The text the first element matching `selector` shows ("" when there is none)."""
    shown: str = browser.execute_script(
        "const el = document.querySelector(arguments[0]); return el ? el.innerText : '';",
        selector)
    return shown


def click(browser: WebDriver, selector: str) -> None:
    """Click it, again if the view redrew it between finding and clicking."""
    def clicked() -> bool:
        try:
            browser.find_element(By.CSS_SELECTOR, selector).click()
            return True
        except StaleElementReferenceException:
            return False
    wait_until(clicked, timeout=WAIT, message=f"a click on {selector}")


def fits_the_width(browser: WebDriver) -> bool:
    """Nothing sticks out sideways: the page needs no horizontal scrolling at its width."""
    fits: bool = browser.execute_script(
        "return document.documentElement.scrollWidth <= document.documentElement.clientWidth;")
    return fits


def page_errors(browser: WebDriver) -> list[str]:
    """Errors the page logged (script errors, CSP refusals), the favicon's 404 aside."""
    return [entry["message"] for entry in browser.get_log("browser")
            if entry["level"] == "SEVERE" and "favicon" not in entry["message"]]


def allow_actions(console: Console) -> None:
    """The module's console with --allow-actions (restarted once, for the first test)."""
    if "--allow-actions" not in console.flags:
        console.restart("--allow-actions")


def preview(browser: WebDriver, action: str, count: int) -> list[str]:
    """Click the page's `action` button; wait for its confirmation dialog previewing
    `count` activities; the ids it lists."""
    click(browser, f'[data-action="{action}"]')
    wait_until(lambda: rows(browser, "#confirm[open]", "data-action", "data-count")
               == [[action, str(count)]], timeout=WAIT, message=f"the {action} preview")
    return attrs(browser, "#confirm-ids [data-id]", "data-id")


def confirm_as(browser: WebDriver, actor: str) -> None:
    """Give the actor's name and confirm the open dialog."""
    field = browser.find_element(By.ID, "confirm-actor")
    field.clear()
    field.send_keys(actor)
    browser.find_element(By.ID, "confirm-ok").click()


def audited(rq: RunnerQ, action: str, actor: str) -> dict[str, Any]:
    """The newest audit record of `action` once done (the record is written first, with
    the intent, and completed after the change), checked to be the console's, by `actor`."""
    def done() -> dict[str, Any] | None:
        entries = rq.audit_log.audit(action=action, limit=1)
        return entries[0].to_json() if entries and entries[0].state == "done" else None
    entry = wait_until(done, timeout=WAIT, message=f"the {action} audit record done")
    assert entry["actor"] == actor and entry["detail"]["command"] == "console", entry
    return entry
