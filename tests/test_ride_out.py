"""Every long-running command rides out a server that goes away and comes back.

`stats --watch`, `wait`, `enqueue --wait`, `metrics serve`, `tail events` and the
console run against the dev server (SQLite, so its data survives), which is stopped
and started again on the same port under them: each says that the server is away
(since when, retrying), carries on once it is back, and says so; a one-shot command
run during the outage still exits 6 at once. The mechanism is one (domain/outage.py,
`OutageWatch`); its rules are checked first without a server.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from runnerq_cli.backend.domain.outage import OutageWatch, unavailable_line
from runnerq_cli.errors import InvalidArgument, Unavailable
from tests.helpers import http_get
from tests.waiting import LineReader, wait_until

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKEN = "ride-out-token-0123456789"


# ------------------------------------------------------------ the mechanism alone

class Clock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> bool:
        self.slept.append(seconds)
        self.now += seconds
        return False


def test_a_failure_before_the_server_answered_is_the_commands_own() -> None:
    watch = OutageWatch()
    with pytest.raises(Unavailable):
        watch.call(lambda: (_ for _ in ()).throw(Unavailable("away")))
    refused = Unavailable("refused", reachable=True)
    watch.succeeded()
    with pytest.raises(Unavailable):  # a refusal of the credentials is no outage
        watch.failed(refused)
    with pytest.raises(InvalidArgument):  # nor is anything else
        watch.call(lambda: (_ for _ in ()).throw(InvalidArgument("bad")))


def test_an_outage_is_retried_backing_off_told_and_ended() -> None:
    clock = Clock()
    seen: list[str] = []
    watch = OutageWatch(lambda o: seen.append(o.away_line(clock.now)),
                        lambda o: seen.append(o.back_line()), answered=True,
                        clock=lambda: clock.now, sleep=clock.sleep)
    since = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    tries = iter(range(6))

    def read() -> str:
        if next(tries) < 5:
            exc = Unavailable("MongoDB at mongodb://u:secret@h is unreachable")
            exc.since = since
            raise exc
        return "answer"

    assert watch.call(read) == "answer"
    assert clock.slept == [0.5, 1.0, 2.0, 5.0, 5.0]
    assert seen[0].startswith("the server is away since 03:04:05 UTC (0 s), retrying: ")
    assert "secret" not in "".join(seen)
    assert "(8 s, 5 tries)" in seen[4]  # 0.5 + 1 + 2 + 5 s of back-off
    assert seen[5] == "the server is back after 14 s (away since 03:04:05 UTC)"  # 13.5 s
    assert not watch.away


def test_a_deadline_or_a_stop_ends_the_wait_for_the_server() -> None:
    clock = Clock()
    watch = OutageWatch(answered=True, clock=lambda: clock.now, sleep=clock.sleep)

    def away() -> None:
        raise Unavailable("away")

    assert watch.call(away, until=clock.now + 2.0) is None
    assert sum(clock.slept) == pytest.approx(2.0)
    watch.stop()
    assert watch.call(lambda: "never read") is None


def test_the_consoles_line_says_since_when() -> None:
    exc = Unavailable("MongoDB at mongodb://u:pw@h is unreachable")
    assert unavailable_line(exc) == "the database is unavailable"
    exc.since = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert unavailable_line(exc, exc.since + timedelta(seconds=8)) == (
        "the database is unavailable since 03:04:05 UTC (8 s): retrying")


@pytest.mark.parametrize(("answering", "said"), [
    ("member", "has no primary to take the command (NotPrimaryNoSecondaryOk): an election "
               "is under way; try again in a few seconds"),
    ("mongos", "has no primary to take the command (a shard's: "
               "FailedToSatisfyReadPreference): an election is under way; try again"),
    ("shutdown", "is shutting down (ShutdownInProgress): a restart, or a member leaving "
                 "its replica set; try again once it is back"),
    ("unreached", "could not reach a member of the deployment (HostUnreachable): a network "
                  "fault between a mongos and its shards, or between members; try again"),
])
def test_a_one_shot_command_during_an_election_says_so(cli_env: dict[str, str],
                                                       server: Any, answering: str,
                                                       said: str) -> None:
    """A server that answers "not primary" (a stepdown, a failover) is no server to
    start: a one-shot command exits 6 with one line that says an election is under way
    and to try again, not "unreachable" with the driver's whole reply. A mongos says
    the same of a shard's election as FailedToSatisfyReadPreference (133): the same
    answer, not exit 1 with the server's error. A server shutting down (which pymongo
    counts as "not primary" too, a standalone's restart included) promises no
    election."""
    from tests.stalling_proxy import SteppingDownProxy

    proxy = SteppingDownProxy(server.uri)
    try:
        env = {**cli_env, "RUNNERQ_MONGO_URI": proxy.uri(server.uri)}
        assert subprocess.run([sys.executable, "-m", "runnerq_cli", "init-indexes"],
                              env=env, capture_output=True, timeout=60).returncode == 0
        proxy.step_down(60, answering=answering)
        for args in (("stats",), ("enqueue", "job"), ("list", "pending")):
            done = subprocess.run([sys.executable, "-m", "runnerq_cli", *args], env=env,
                                  capture_output=True, text=True, timeout=60)
            assert done.returncode == 6, (args, done.stderr)
            [line] = done.stderr.splitlines()
            if args == ("enqueue", "job") and answering == "member":  # a write's refusal
                line = line.replace("NotWritablePrimary", "NotPrimaryNoSecondaryOk")
            assert said in line, line
            assert "full error" not in line and "dev-server" not in line, line
    finally:
        proxy.close()


# ------------------------------------------------------------ under a real outage

def _spawn(env: dict[str, str], *args: str) -> tuple[subprocess.Popen[str], LineReader,
                                                     LineReader]:
    proc = subprocess.Popen([sys.executable, "-m", "runnerq_cli", *args], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    return proc, LineReader(proc.stdout), LineReader(proc.stderr)


def _get(url: str) -> tuple[int, str]:
    return http_get(url, TOKEN)


@pytest.mark.proof
def test_long_running_commands_ride_out_a_server_restart(cli_env: dict[str, str],
                                                          tmp_path: Any) -> None:
    from runnerq_cli import connect
    from tests.test_server_outage import free_port, start_server, stop

    port = free_port()
    uri = f"mongodb://127.0.0.1:{port}/?directConnection=true"
    env = {**cli_env, "RUNNERQ_MONGO_URI": uri, "RUNNERQ_DATABASE": "rideout",
           "RUNNERQ_SERVER_SELECTION_TIMEOUT": "1s", "RUNNERQ_CONNECT_TIMEOUT": "2s",
           "RUNNERQ_CONSOLE_TOKEN": TOKEN, "PYTHONPATH": ROOT}
    data = tmp_path / "server.sqlite"
    server = start_server(env, port, data)
    procs: list[subprocess.Popen[str]] = []
    try:
        subprocess.run([sys.executable, "-m", "runnerq_cli", "init-indexes"], env=env,
                       capture_output=True, text=True, timeout=60, check=True)
        queue = connect(uri, database="rideout", queue="tests")
        waited = str(queue.enqueue("job", {"n": 1}).activity_id)

        stats, stats_out, stats_err = _spawn(env, "stats", "--watch", "--interval", "0.5s")
        wait, _, wait_err = _spawn(env, "wait", waited, "--timeout", "5m")
        tail, tail_out, tail_err = _spawn(env, "tail", "events", "--mode", "poll",
                                          "--poll-interval", "0.2")
        metrics, metrics_out, metrics_err = _spawn(env, "metrics", "serve", "--port", "0",
                                                   "--min-interval", "0s")
        console, console_out, _ = _spawn(env, "console", "--port", "0")
        enqueue_wait, _, enqueue_err = _spawn(env, "enqueue", "second", "--payload", "{}",
                                              "--wait", "--wait-timeout", "5m")
        procs += [stats, wait, tail, metrics, console, enqueue_wait]
        wait_until(lambda: len(queue.list_pending()) >= 2, timeout=60,
                   message="enqueue --wait to enqueue")
        stats_out.wait_for(lambda line: "refresh 1" in line, 60, "the first view")
        scrape = metrics_out.wait_for(lambda line: "http://" in line, 60).split(" on ")[1]
        scrape = scrape.strip()
        page = console_out.wait_for(lambda line: "http://" in line, 60)
        api = page.split(": ", 1)[1].strip().split("?")[0] + "api/stats"
        assert _get(api)[0] == 200
        assert _get(scrape)[0] == 200

        stop(server)  # the server goes away under all of them ...
        away = "the server is away since "
        stats_err.wait_for(lambda line: away in line and "retrying" in line, 60,
                           "stats --watch to note the outage")
        wait_err.wait_for(lambda line: away in line, 60, "wait to note the outage")
        enqueue_err.wait_for(lambda line: away in line, 60, "enqueue --wait to note it")
        tail_err.wait_for(lambda line: "connection lost" in line and away in line, 60,
                          "the tail to note the outage")
        wait_until(lambda: _get(scrape)[0] == 200 and _drain(metrics_err, away), timeout=60,
                   interval=0.5, message="metrics serve to note the outage (at a scrape)")
        status, body = _get(api)
        assert status == 503 and "unavailable since" in json.loads(body)["error"], body
        one_shot = subprocess.run([sys.executable, "-m", "runnerq_cli", "stats"], env=env,
                                  capture_output=True, text=True, timeout=60)
        assert one_shot.returncode == 6, one_shot.stderr  # ... a one-shot still fails at once
        for proc in procs:
            assert proc.poll() is None, proc.args  # ... and every long-running one waits

        server = start_server(env, port, data)  # ... and comes back with its data
        back = "the server is back after "
        stats_err.wait_for(lambda line: back in line, 60, "stats --watch to carry on")
        count = sum("refresh" in line for line in stats_out.lines)
        stats_out.wait_for(lambda line: f"refresh {count + 1}" in line, 60)
        wait_until(lambda: _get(api)[0] == 200, timeout=60, message="the console to answer")
        wait_until(lambda: "runnerq_scrape_success{queue=\"tests\"} 1.0" in _get(scrape)[1],
                   timeout=60, interval=0.5, message="metrics serve to answer")
        assert _drain(metrics_err, back)

        claim = queue.dequeue("w1", types=["job"])[0]  # the waited-for activity ends ...
        queue.ack_success(claim, {"ok": 1})
        assert wait.wait(60) == 0, "".join(wait_err.lines)  # ... and wait sees it
        second = queue.dequeue("w1", types=["second"])[0]
        queue.ack_success(second, {"ok": 2})
        assert enqueue_wait.wait(60) == 0, "".join(enqueue_err.lines)
        tail_out.wait_for(lambda line: "Completed" in line, 60, "the tail to carry on")
        tail_err.wait_for(lambda line: back in line, 60, "the tail to say it is back")
        for proc in (stats, tail, metrics, console):
            assert proc.poll() is None, proc.args
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(30) == 0, proc.args
        everything = "".join(stats_err.lines + wait_err.lines + tail_err.lines
                             + metrics_err.lines + enqueue_err.lines)
        assert "Traceback" not in everything, everything
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if server.poll() is None:
            stop(server)


def _rest(reader: LineReader) -> list[str]:
    """Lines already written that no wait_for has read yet."""
    lines: list[str] = []
    while True:
        try:
            line = reader.readline(timeout=0.2)
        except AssertionError:
            return lines
        if not line:
            return lines
        lines.append(line)


def _drain(reader: LineReader, text: str) -> bool:
    return any(text in line for line in reader.lines + _rest(reader))


def test_a_shards_missing_primary_in_a_batch_is_not_a_refusal() -> None:
    """A mongos reports a shard with no primary per write of a batch (code 133): the
    batch is tried again later (WriteUnconfirmed, as NotWritablePrimary), never taken
    as the server refusing what was sent (a worker would drop its acknowledgements)."""
    from pymongo.errors import BulkWriteError

    from runnerq_cli.backend.store.failures import refusal
    from runnerq_cli.errors import WriteUnconfirmed, retry_later

    error = BulkWriteError({"writeErrors": [{"index": 0, "code": 133, "errmsg":
                                             "Could not find host matching read preference"}],
                            "writeConcernErrors": [], "nInserted": 0})
    translated = refusal(error)
    assert isinstance(translated, WriteUnconfirmed) and retry_later(translated)
