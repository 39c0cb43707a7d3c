"""Retake docs/console.png: the console's overview over a demo queue, in a real browser.

The README's picture must show the product as it is, so it is made by a script, not
by hand, and retaken whenever the overview changes:

    python docs/screenshots.py [--out docs/console.png]

The demo queue is built through the backend's API on a dev server (no document is
written by hand), in two parts:

- an hour of work (completed, failed, dead-lettered, some after retries; a type
  paused 12 minutes ago, its work piling up since) is written at past times by a
  backend on a clock of its own: `RunnerQ(settings, clock=...)` writes that clock's
  times where the server's would go, as the tests' fake clock does, so the charts have
  an hour of history to draw without waiting an hour;
- the present is made on the real clock: work pending and scheduled, two schedules, a
  flow limit whose keys hold work back, and durable orders waiting on their children.
  A real worker (`Worker`, in this process) runs the orders and the charges, and stays
  up while the picture is taken, so it is live on the page.

The console then runs as a user runs it (`python -m runnerq_cli console`) and selenium
photographs the overview headless at 1366x768. Needs Python 3.13 (the dev server), the
test extra (selenium) and Debian's chromium and chromium-driver (CONTRIBUTING.md,
"Running the tests"). The queue is random but seeded: the same data every run, at
times relative to the run.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.backend.domain.flow import make_limits
from runnerq_cli.backend.domain.schedules import ScheduleDef, Template
from runnerq_cli.backend.domain.specs import ActivitySpec
from runnerq_cli.cli.devserver import start_in_thread
from runnerq_cli.config import Settings, load_settings
from runnerq_cli.worker.durable_context import DurableContext
from runnerq_cli.worker.engine import Worker
from runnerq_cli.worker.handlers import HandlerRegistry

ROOT = Path(__file__).resolve().parent.parent
DATABASE, QUEUE = "demo", "shop"
WINDOW = (1366, 768)  # the window of the browser tests (CONTRIBUTING.md): a laptop's
HISTORY_MINUTES = 60  # the overview's default window
CHROMEDRIVER = "/usr/bin/chromedriver"


@dataclass(frozen=True)
class Kind:
    """An activity type of the demo: its share of the traffic (or, for one a schedule
    enqueues, its interval: `every` seconds), how long it runs, and how often it fails
    for good (`fail`), is dead-lettered after its retries (`dead`) or succeeds on a
    retry (`flaky`), with the errors it fails with."""

    name: str
    share: float
    run_seconds: float
    every: float | None = None
    fail: float = 0.0
    dead: float = 0.0
    flaky: float = 0.0
    error: str = "boom"


KINDS = (
    Kind("send_email", 0.33, 0.25, dead=0.01, flaky=0.03, error="SMTP 421: try again later"),
    Kind("resize_image", 0.25, 1.1, fail=0.02, error="unsupported image format: HEIC"),
    Kind("charge", 0.18, 0.6, fail=0.07, flaky=0.05, error="card declined"),
    Kind("generate_report", 0.0, 3.2, every=40, dead=0.06,
         error="timeout talking to the warehouse API after 30 s"),
    Kind("sync_crm", 0.12, 1.8, flaky=0.04, error="CRM returned 503"),
)
PAUSED = "sync_crm"
PAUSED_MINUTES_AGO = 12  # sync_crm finishes nothing after its pause
INCIDENT_MINUTES = 4  # the last minutes: the warehouse API is slow, reports time out
LEAD_SECONDS = 50.0  # the history's end after its start: about when its writing ends


class SimClock:
    """The history backend's clock: set by the script to each step's time, and never
    ahead of the real one (a time still to come is waited for), so the newest history
    meets the present."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def set(self, at: datetime) -> None:
        ahead = (at - datetime.now(UTC)).total_seconds()
        if ahead > 0:
            time.sleep(ahead)
        self.now = at


def traffic(minutes_ago: float) -> tuple[float, float]:
    """Activities per minute at a time of the hour, of every type and of a campaign's
    emails: a slow swell with a burst of emails at about -20 minutes, so the charts
    have a shape."""
    swell = 9.0 + 3.0 * math.sin((HISTORY_MINUTES - minutes_ago) / 9.0)
    burst = 12.0 * math.exp(-(((minutes_ago - 20.0) / 2.5) ** 2))
    return swell, burst


def settings_for(uri: str) -> Settings:
    """The demo queue's settings, the user's config file and environment left out."""
    return load_settings(None, overrides={"uri": uri, "database": DATABASE, "queue": QUEUE},
                         environ={"RUNNERQ_CONFIG": ""})


# ------------------------------------------------------------------------- history


def plan_history(end: datetime, rng: random.Random) -> list[tuple[datetime, Kind]]:
    """The hour before `end`: when each activity is enqueued, oldest first."""
    plan: list[tuple[datetime, Kind]] = []
    for minute in range(HISTORY_MINUTES, 0, -1):
        swell, burst = traffic(minute)
        kinds = rng.choices(KINDS, weights=[k.share for k in KINDS],
                            k=round(swell * rng.uniform(0.8, 1.2)))
        kinds += [KINDS[0]] * round(burst)
        start = end - timedelta(minutes=minute)
        plan += [(start + timedelta(seconds=rng.uniform(0, 60)), kind) for kind in kinds]
    for kind in KINDS:  # a scheduled type, evenly: every bucket of the charts has some
        every = kind.every
        if every is None:
            continue
        for n in range(1, int(HISTORY_MINUTES * 60 / every)):
            at = end - timedelta(seconds=n * every)
            late = at > end - timedelta(minutes=INCIDENT_MINUTES)
            plan.append((at, replace(kind, dead=0.5) if late else kind))
    return sorted(plan, key=lambda step: step[0])


def write_history(settings: Settings, rng: random.Random) -> int:
    """An hour of work, written at past times, its newest as it happens (about
    LEAD_SECONDS after the start: about when the writing reaches it). PAUSED is paused
    at its own time; its work since then is still pending. Returns the count written."""
    end = datetime.now(UTC) + timedelta(seconds=LEAD_SECONDS)
    paused_at = end - timedelta(minutes=PAUSED_MINUTES_AGO)
    plan = plan_history(end, rng)
    clock = SimClock(end - timedelta(minutes=HISTORY_MINUTES))
    rq = RunnerQ(settings, clock=clock)
    pause_due = True
    for at, kind in plan:
        if pause_due and at >= paused_at:
            clock.set(paused_at)
            rq.control.pause([PAUSED], reason="CRM vendor maintenance", actor="grace")
            pause_due = False
        if kind.name == PAUSED and not pause_due:  # no worker claims it: it waits
            clock.set(at)
            rq.enqueue(kind.name, payload_of(kind.name, rng))
        else:
            run_one(rq, clock, kind, at, rng)
    return len(plan)


def run_one(rq: RunnerQ, clock: SimClock, kind: Kind, at: datetime,
            rng: random.Random) -> None:
    """One activity from enqueue to its end, every step at its own past time."""
    roll = rng.random()
    outcome = ("fail" if roll < kind.fail else "dead" if roll < kind.fail + kind.dead
               else "flaky" if roll < kind.fail + kind.dead + kind.flaky else "ok")
    clock.set(at)
    aid = rq.enqueue(ActivitySpec(kind.name, payload_of(kind.name, rng), max_retries=3,
                                  retry_delay_seconds=5)).activity_id
    attempts = {"ok": 1, "fail": 1, "dead": 3, "flaky": 2}[outcome]  # max_retries: 3 in all
    for attempt in range(attempts):
        due = rq.get_activity(aid).scheduled_at or clock.now
        clock.set(max(clock.now, due) + timedelta(seconds=rng.lognormvariate(-1.2, 0.7)))
        if attempt:  # a retry is due: a worker's scheduler chore makes it pending
            rq.maintenance.process_scheduled()
        [claim] = rq.dequeue("worker-a" if attempt % 2 == 0 else "worker-b", types=[kind.name])
        assert claim.activity_id == aid, "another activity of this type was due"
        clock.set(clock.now + timedelta(seconds=kind.run_seconds * rng.lognormvariate(0, 0.3)))
        if attempt == attempts - 1 and outcome in ("ok", "flaky"):
            rq.ack_success(claim, {"ok": True})
        else:
            rq.ack_failure(claim, kind.error, retryable=outcome != "fail")


def payload_of(activity_type: str, rng: random.Random) -> dict[str, Any]:
    """A payload that looks like the type's."""
    n = rng.randrange(10_000, 99_999)
    payloads: dict[str, dict[str, Any]] = {
        "send_email": {"to": f"customer{n}@example.com", "template": "receipt"},
        "resize_image": {"image": f"uploads/{n}.jpg", "width": 1200},
        "charge": {"order": f"A-{n}", "cents": rng.randrange(500, 25_000)},
        "generate_report": {"report": "daily-sales", "store": n % 40},
        "sync_crm": {"contact": n}}
    return payloads.get(activity_type, {})


# ------------------------------------------------------------------------- the present


def make_present(rq: RunnerQ, rng: random.Random) -> None:
    """What is there now, on the real clock: pending, scheduled, schedules, a limit
    (the worker, started after, makes the running and waiting work)."""
    for activity_type, count in (("send_email", 6), ("resize_image", 4)):
        for _ in range(count):
            rq.enqueue(activity_type, payload_of(activity_type, rng))
    for minutes in (5, 20, 45, 90):
        rq.enqueue(ActivitySpec("generate_report", payload_of("generate_report", rng),
                                delay_seconds=minutes * 60))
    for _ in range(3):
        rq.enqueue(ActivitySpec("send_email", payload_of("send_email", rng),
                                delay_seconds=rng.randrange(300, 3000)))
    rq.schedules.add(ScheduleDef("nightly-sales", Template("generate_report",
                                                           {"report": "daily-sales"}),
                                 cron="30 2 * * *"))
    rq.schedules.add(ScheduleDef("crm-sync", Template(PAUSED, {"full": False}),
                                 every_seconds=900))
    rq.limits.set(make_limits("charge", 2, 1, "120/1m", None))  # the payment provider's
    for tenant, count in (("acme", 3), ("globex", 2), ("initech", 1)):
        for _ in range(count):
            rq.enqueue(ActivitySpec("charge", payload_of("charge", rng), key=f"tenant-{tenant}"))
    for order in ("A-20417", "A-20418", "A-20419"):
        rq.enqueue("order", {"order": order, "parcels": rng.randrange(1, 4)})


def demo_worker(rq: RunnerQ, release: threading.Event) -> Worker:
    """The worker that runs the orders (durable: they park on their parcels, which no
    worker ships) and the charges (held until the picture is taken, so the limit's
    slots are in use and its keys hold the rest back)."""
    registry = HandlerRegistry()

    @registry.handler("order")
    def order(payload: dict[str, Any], ctx: DurableContext) -> Any:
        charged = ctx.step("charge_card", lambda: {"charge": f"ch-{payload['order']}"})
        parcels = [ctx.spawn("ship_parcel", {"order": payload["order"], "parcel": n},
                             step=f"ship-{n}") for n in range(payload["parcels"])]
        return {"charged": charged, "shipped": ctx.wait_all(parcels)}

    @registry.handler("charge")
    def charge(payload: dict[str, Any], ctx: DurableContext) -> Any:
        release.wait(300)
        return {"charged": payload.get("cents")}

    return Worker(rq, registry, concurrency=4, poll_interval=0.2, worker_id="web-1",
                  shutdown_timeout=5)


def wait_for(what: str, check: Callable[[], bool], timeout: float = 60) -> None:
    """Wait until `check()` holds (the demo's state is reached), or fail saying what."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"screenshots: timed out waiting for {what}")
        time.sleep(0.2)


def count(rq: RunnerQ, status: str, activity_type: str) -> int:
    """How many activities of a type are in a state (the demo's readiness)."""
    return rq.context.activities.count_documents({"status": status,
                                                  "activity_type": activity_type})


# ------------------------------------------------------------------------- the picture


@contextmanager
def console(uri: str) -> Iterator[str]:
    """`runnerq-mongo console --allow-actions` as a user runs it; yields its URL."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNNERQ_")}
    env.update(RUNNERQ_MONGO_URI=uri, RUNNERQ_DATABASE=DATABASE, RUNNERQ_QUEUE=QUEUE,
               RUNNERQ_CONFIG="", NO_COLOR="1")
    proc = subprocess.Popen([sys.executable, "-m", "runnerq_cli", "console", "--port",
                             str(port), "--allow-actions"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # it prints its URL once it listens
            if f":{port}" in line:
                break
        else:
            raise SystemExit(f"screenshots: the console ended ({proc.wait()})")
        # Its later lines are read too, so a full pipe never blocks it.
        threading.Thread(target=proc.stdout.read, daemon=True).start()
        yield f"http://127.0.0.1:{port}/"
    finally:
        proc.terminate()
        proc.wait(10)


def photograph(url: str, out: Path) -> None:
    """The overview at 1366x768 once it has drawn (#view no longer says Loading)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--hide-scrollbars", f"--window-size={WINDOW[0]},{WINDOW[1]}"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        driver.set_page_load_timeout(30)
        # The page's own size, not the window's (whose frame takes some of it).
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
            "width": WINDOW[0], "height": WINDOW[1], "deviceScaleFactor": 1, "mobile": False})
        driver.get(url)

        def drawn() -> bool:
            text = str(driver.find_element("id", "view").text)
            return bool(text.strip()) and "Loading" not in text \
                and bool(driver.find_elements("css selector", "#overview svg"))

        wait_for("the overview to draw", drawn, 30)
        time.sleep(1.0)  # the live stream's first events, the charts' last paint
        driver.save_screenshot(str(out))
    finally:
        driver.quit()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "console.png")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    server = start_in_thread()  # in memory: gone when the script ends
    settings = settings_for(server.uri)
    rq = RunnerQ(settings)
    rq.maintenance.init_indexes()
    started = time.monotonic()
    written = write_history(settings, rng)
    print(f"history: {written} activities in {time.monotonic() - started:.0f} s")
    make_present(rq, rng)
    release = threading.Event()
    worker = demo_worker(rq, release)
    worker.start()
    try:
        wait_for("3 orders waiting", lambda: count(rq, "waiting", "order") == 3)
        wait_for("2 charges running", lambda: count(rq, "processing", "charge") == 2)
        with console(server.uri) as url:
            photograph(url, args.out)
    finally:
        release.set()
        worker.stop()
        worker.join(15)
        server.stop()
    print(f"wrote {args.out} ({args.out.stat().st_size // 1024} KB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
