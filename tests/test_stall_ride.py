"""Long-running commands ride out a server that stalls: alive, its port open, no answer.

A server that closes its port (a restart, a stepdown) is tests/test_ride_out.py's. One
that stops answering without closing anything (stopped with `kill -STOP`, swapping, a
disk that stalls, a long lock) looks different to the driver: its commands time out
(socket_timeout), or its check of the server does (connect_timeout) and it cancels the
commands in flight. Both are `TimedOut`, "reachable": for a one-shot command the
advice is to ask less at once (exit 6, tests/test_oncall_errors.py). A long-running one
takes it as an outage once the server has answered it (domain/outage.py, `is_away`):
it says so on stderr with since when, keeps its position, and carries on when the
server answers.

The proof holds every byte to the server for 30 s (tests/stalling_proxy.py, `hold`:
nothing is dropped or closed, the requests sent meanwhile are answered late, as a
continued process answers them) under `tail events`, `stats --watch`, `metrics serve`,
the console and a worker, all at once; the rules are checked first without a server.
"""

from __future__ import annotations

import collections
import json
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from runnerq_cli.backend.domain.outage import OutageWatch, is_away, unavailable_line
from runnerq_cli.errors import TimedOut, Unavailable
from tests.helpers import http_get
from tests.stalling_proxy import StallingProxy
from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "stall-ride-token-0123456789"
STALL = 30.0  # seconds the server answers nothing: the 20 s asked and a margin, for a
# busy machine (CI runs two suites at once) takes seconds to notice


# ------------------------------------------------------------ the rules alone

def _stalled(seconds: float = 5.0) -> TimedOut:
    return TimedOut(f"MongoDB at mongodb://u:secret@h timed out after {seconds:g} s: it "
                    "stopped answering during this command", seconds)


def test_a_stall_is_an_outage_for_a_command_that_has_read_and_a_refusal_is_not() -> None:
    assert is_away(_stalled())
    assert is_away(Unavailable("unreachable"))
    assert not is_away(Unavailable("refused the credentials", reachable=True))
    watch = OutageWatch()
    with pytest.raises(TimedOut):  # before any answer: the command's own failure (exit 6)
        watch.failed(_stalled())
    watch.succeeded()
    assert watch.failed(_stalled()).attempts == 1
    with pytest.raises(Unavailable):
        watch.failed(Unavailable("refused the credentials", reachable=True))


def test_a_view_waits_through_a_stall_and_says_since_when() -> None:
    seen: list[str] = []
    slept: list[float] = []
    watch = OutageWatch(lambda o: seen.append(o.away_line()), lambda o: seen.append("back"),
                        answered=True, sleep=lambda s: bool(slept.append(s)))
    since = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    tries = iter(range(4))

    def read() -> str:
        if next(tries) < 3:
            exc = _stalled()
            exc.since = since
            raise exc
        return "answer"

    assert watch.call(read) == "answer"
    assert slept == [0.5, 1.0, 2.0]
    assert seen[0].startswith("the server is away since 03:04:05 UTC (5 s), "), seen
    assert "stopped answering" in seen[0] and "secret" not in "".join(seen)
    assert seen[-1] == "back"


def test_the_consoles_line_says_since_when_of_a_stall() -> None:
    exc = _stalled()
    exc.since = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert unavailable_line(exc, exc.since + timedelta(seconds=9)) == (
        "the database is unavailable since 03:04:05 UTC (9 s): retrying")


def test_the_driver_boundary_dates_a_stall_from_the_command_it_cancelled(
        cli_env: dict[str, str]) -> None:
    """A command the driver gave up on after `connect_timeout` (its check of the server
    had no answer) waited at least that long: the stall is dated from then, not from the
    error, and every failure of the same outage carries the same time until the server
    answers."""
    from runnerq_cli import connect
    from runnerq_cli.backend.store import connection
    from runnerq_cli.config import Settings

    proxy = StallingProxy(cli_env["RUNNERQ_MONGO_URI"], set())
    uri = proxy.uri(cli_env["RUNNERQ_MONGO_URI"])
    uri += ("&" if "?" in uri else "?") + "heartbeatFrequencyMS=500"
    try:
        queue = connect(settings=Settings(uri=uri, database=cli_env["RUNNERQ_DATABASE"],
                                          queue="tests", connect_timeout=1.0,
                                          server_selection_timeout=1.0))
        queue.inspector.stats()
        proxy.hold()
        before = datetime.now(UTC)
        with pytest.raises(TimedOut) as first:
            queue.inspector.stats()
        raised = datetime.now(UTC)
        since = first.value.since
        assert since is not None  # dated within the stall, before the error said so
        assert before - timedelta(seconds=1) <= since <= raised - timedelta(seconds=0.9), (
            before, since, raised)
        with pytest.raises(Unavailable) as second:
            queue.inspector.stats()
        assert second.value.since == first.value.since
        proxy.release()
        wait_until(lambda: _answers(queue), timeout=30, message="the server to answer")
        assert connection._away.get(uri) is None
    finally:
        proxy.close()
        from runnerq_cli.backend.store.connection import close_clients

        close_clients()


def _answers(queue: Any) -> bool:
    try:
        queue.inspector.stats()
    except Unavailable:
        return False
    return True


# ------------------------------------------------------------ under a real stall

def _spawn(env: dict[str, str], out: Path, *args: str) -> subprocess.Popen[bytes]:
    """`runnerq-mongo ARGS`, stdout to OUT.out and stderr to OUT.err."""
    with open(f"{out}.out", "w") as stdout, open(f"{out}.err", "w") as stderr:
        return subprocess.Popen([sys.executable, "-m", "runnerq_cli", *args], cwd=ROOT,
                                env=env, stdout=stdout, stderr=stderr)


def _text(base: Path, stream: str) -> str:
    return Path(f"{base}.{stream}").read_text()


def _line(base: Path, stream: str, needle: str, timeout: float = 60) -> str:
    def found() -> str:
        lines = [line for line in _text(base, stream).splitlines() if needle in line]
        return lines[0] if lines else ""

    return wait_until(found, timeout=timeout, interval=0.2,
                      message=f"{needle!r} in {base.name}.{stream}")


def _get(url: str, timeout: float = 30) -> tuple[int, str]:
    return http_get(url, TOKEN, timeout)


def _tailed(base: Path) -> list[tuple[str, str, str]]:
    """(event id, activity id, event type) of every event the tail printed, in order."""
    found = []
    for line in _text(base, "out").splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        found.append((event["id"], event["activity_id"], event["event_type"]))
    return found


def _acks(base: Path) -> dict[str, list[str]]:
    """Each activity's acknowledged outcomes, from the worker's JSON log."""
    acks: dict[str, list[str]] = collections.defaultdict(list)
    for line in (_text(base, "out") + _text(base, "err")).splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("event") == "activity":
            acks[record["activity_id"]].append(record["outcome"])
    return acks


@pytest.mark.proof
def test_long_running_commands_and_a_worker_ride_out_a_stalled_server(
        cli_env: dict[str, str], tmp_path: Path) -> None:
    from runnerq_cli import connect

    proxy = StallingProxy(cli_env["RUNNERQ_MONGO_URI"], set())
    history = tmp_path / "history.txt"
    history.touch()
    env = {**cli_env, "RUNNERQ_MONGO_URI": proxy.uri(cli_env["RUNNERQ_MONGO_URI"]),
           # The product's defaults, as in the field: the driver's check of the server
           # gives up after 5 s and cancels what is in flight.
           "RUNNERQ_CONNECT_TIMEOUT": "5s", "RUNNERQ_SERVER_SELECTION_TIMEOUT": "5s",
           "RUNNERQ_CONSOLE_TOKEN": TOKEN, "PYTHONPATH": str(ROOT),
           "TOPOLOGY_HISTORY_FILE": str(history)}
    queue = connect(cli_env["RUNNERQ_MONGO_URI"], database=cli_env["RUNNERQ_DATABASE"],
                    queue="tests")
    queue.maintenance.init_indexes()
    ids = [str(queue.enqueue("record", {"n": n, "seconds": 0.05}).activity_id)
           for n in range(4)]
    names = ("tail", "stats", "metrics", "console", "worker")
    base = {name: tmp_path / name for name in names}
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        procs["tail"] = _spawn(env, base["tail"], "tail", "events", "--since", "1h",
                               "--mode", "poll", "--poll-interval", "0.2", "-o", "jsonl")
        # Its own commands time out first (socket_timeout): the other kind of stall.
        procs["stats"] = _spawn({**env, "RUNNERQ_SOCKET_TIMEOUT": "2s"}, base["stats"],
                                "stats", "--watch", "--interval", "1s")
        procs["metrics"] = _spawn(env, base["metrics"], "metrics", "serve", "--port", "0",
                                  "--min-interval", "0s")
        # The console's request during the stall is to fail within it: the driver checks
        # its server every 2 s there (10 s by default: check, cancel, retry could take 20).
        quick = env["RUNNERQ_MONGO_URI"] + ("&" if "?" in env["RUNNERQ_MONGO_URI"] else "?")
        procs["console"] = _spawn({**env, "RUNNERQ_MONGO_URI": quick + "heartbeatFrequencyMS=2000"},
                                  base["console"], "console", "--port", "0")
        procs["worker"] = _spawn(env, base["worker"], "worker", "--app",
                                 "tests.topology_handlers", "--concurrency", "2",
                                 # Renewed every third of it: a lease outlives the stall.
                                 # (Not longer: a claim lost in it waits for its end.)
                                 "--lease", "40s",
                                 "--poll-interval", "0.2s", "--log-format", "json")
        _line(base["stats"], "out", "refresh 1")
        scrape = _line(base["metrics"], "out", "http://").split(" on ")[1].strip()
        page = _line(base["console"], "out", "http://").split(": ", 1)[1].strip()
        api = page.split("?")[0] + "api/stats"
        assert _get(api)[0] == 200 and _get(scrape)[0] == 200
        wait_until(lambda: sum(t == "Completed" for _, _, t in _tailed(base["tail"])) == 4,
                   timeout=60, interval=0.2, message="the first activities, tailed")

        # Two activities running when the server stalls; more enqueued during it.
        ids += [str(queue.enqueue("record", {"n": n, "seconds": 2.0}).activity_id)
                for n in range(4, 8)]
        wait_until(lambda: history.read_text().count("claim") >= 5, timeout=60,
                   message="a claim of the second batch")
        proxy.hold()
        held_at = time.monotonic()
        ids += [str(queue.enqueue("record", {"n": n, "seconds": 0.05}).activity_id)
                for n in range(8, 12)]
        during: dict[str, tuple[int, str]] = {}
        # (Another window than the page's: not the view read within the last 2 s.)
        asks = [threading.Thread(target=lambda: during.update(api=_get(api + "?window=7", 60)),
                                 daemon=True),
                threading.Thread(target=lambda: during.update(scrape=_get(scrape, 60)),
                                 daemon=True)]
        for ask in asks:
            ask.start()
        away = "the server is away since "
        for name in ("tail", "stats"):
            _line(base[name], "err", away, timeout=STALL - 3)
        # The worker's chores and claims say they failed and will be tried again.
        _line(base["worker"], "err", "retry", timeout=STALL - 3)
        _line(base["console"], "err", away, timeout=STALL - 3)  # at the request above
        left = STALL - (time.monotonic() - held_at)
        assert left > 0, "the stall was over before every command had said so"
        time.sleep(left)  # the stall's length: nothing is to end meanwhile
        for name, proc in procs.items():
            assert proc.poll() is None, (name, _text(base[name], "err")[-2000:])
        stalled = proxy.held
        proxy.release()
        assert stalled > 0
        for ask in asks:
            ask.join(60)
        assert during["api"][0] == 503 and "unavailable since" in during["api"][1], during
        assert during["scrape"][0] == 200, during

        back = "the server is back after "
        for name in ("tail", "stats"):
            _line(base[name], "err", back, timeout=60)
        count = _text(base["stats"], "out").count("refresh ")
        _line(base["stats"], "out", f"refresh {count + 1}")
        wait_until(lambda: _get(api)[0] == 200, timeout=60, message="the console to answer")
        _line(base["console"], "err", back)
        wait_until(lambda: 'runnerq_scrape_success{queue="tests"} 1.0' in _get(scrape)[1],
                   timeout=60, interval=0.5, message="metrics serve to answer")
        _line(base["metrics"], "err", back)  # (told at a scrape)

        # Every activity ends exactly once, and the tail prints each event once.
        wait_until(lambda: queue.context.activities.count_documents(
            {"status": "completed"}) == len(ids), timeout=120,
                   interval=0.5, message="every activity to complete")
        wait_until(lambda: sum(t == "Completed" for _, _, t in _tailed(base["tail"]))
                   >= len(ids), timeout=60, interval=0.2, message="the tail to catch up")
        time.sleep(1.0)  # 5 polls of the tail: a repeated event would show by now
        tailed = _tailed(base["tail"])
        printed = collections.Counter(event_id for event_id, _, _ in tailed)
        assert set(printed.values()) == {1}, printed.most_common(3)  # none twice
        acks = _acks(base["worker"])
        ran = collections.Counter(line.split()[1] for line in history.read_text().splitlines())
        for aid in ids:  # none lost: each activity's every event, as stored
            stored = [e.event_type for e in queue.get_activity_events(aid)]
            assert stored.count("Completed") == 1, (aid, stored)
            shown = [t for _, a, t in tailed if a == aid]
            assert collections.Counter(shown) == collections.Counter(stored), (aid, shown)
            # Completed once by the worker, and run only as often as it was claimed. (A
            # claim sent during the stall is applied when the server goes on, after the
            # worker gave up on its answer: that attempt runs nowhere, its lease runs out
            # and the reaper hands the activity out again: one run, attempt 2.)
            assert acks[aid].count("completed") == 1, (aid, acks[aid], ran[aid])
            assert ran[aid] >= 1 and len(acks[aid]) <= ran[aid], (aid, acks[aid], ran[aid])
        for name, proc in procs.items():
            assert proc.poll() is None, name
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(60) == 0, (name, _text(base[name], "err")[-3000:])
            assert "Traceback" not in _text(base[name], "err"), name
    finally:
        proxy.release()
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        proxy.close()
