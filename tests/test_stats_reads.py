"""`stats` and `metrics`: hostile text shown as text, counts that do not read the finished
history (exact where they say so, estimates labelled), history pictures, stray documents,
signals (issues 15 and 16)."""

from __future__ import annotations

import contextlib
import json
import re
import signal
import subprocess
import sys
import threading
import urllib.request

import pytest

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.backend.ops.control import PAUSE_ID
from runnerq_cli.backend.queue.queue import ActivitySpec
from runnerq_cli.backend.views import metrics
from runnerq_cli.cli.commands.stats import sparkline
from runnerq_cli.cli.exits import ExitCode
from runnerq_cli.cli.exposition import QueueCollector, registry_for
from runnerq_cli.errors import ClaimLost, WrongState
from tests.helpers import default_signals, drive_to
from tests.helpers import metric_value as value
from tests.helpers import metrics_parsed as parse
from tests.waiting import LineReader

HOSTILE = {
    "markup": "disk [/] full",
    "link": "[link=http://evil.example]see runbook[/link]",
    "csi": "\x1b[2Jcleared",
    "osc": "\x1b]0;title\x07",
    "newline": "one\nforged line",
    "rtl": "abc\u202edcba",
}



def assert_inert(text: str) -> None:
    """Nothing a terminal would act on: no ESC, BEL, bidi override, link, forged line."""
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text, text
    assert not any(line.lstrip().startswith("forged line") for line in text.splitlines())
    assert "\\x1b[2Jcleared" in text and "abc\\u202edcba" in text


@pytest.fixture
def hostile(queue: RunnerQ) -> RunnerQ:
    """One activity per hostile type (pending, failed, completed), and a pause whose
    reason and actor are hostile (as another program could write them)."""
    for text in HOSTILE.values():
        drive_to(queue, "failed", text)
        drive_to(queue, "completed", text)
        queue.enqueue(text, {})
    queue.context.control.replace_one(
        {"_id": PAUSE_ID}, {"_id": PAUSE_ID, "all": False, "types": [HOSTILE["link"]],
                            "reason": "disk [/] full \x1b[2Jcleared abc\u202edcba",
                            "actor": "mallory\nforged line", "at": queue.context.clock()},
        upsert=True)
    # A worker entry with a hostile id and a malformed in_flight: listed among the malformed.
    queue.context.workers.insert_one({"_id": "w [/] \x1b[2Jcleared abc\u202edcba",
                                          "in_flight": "x",
                                          "last_heartbeat": queue.context.clock()})
    return queue


@pytest.mark.parametrize("args", [
    ("stats",), ("stats", "--by", "type"), ("stats", "--since", "1h"),
    ("stats", "--check", "pending >= 0"), ("stats", "--watch", "--iterations", "1"),
])
def test_hostile_strings_are_shown_as_text(hostile, run_cli, args) -> None:
    res = run_cli(*args)
    assert res.code == 0, res.stderr
    assert res.stderr == ""
    out = res.stdout
    assert "disk [/] full" in out  # the reason, as written
    assert "[link=http://evil.example]" in out  # shown, not made a link
    assert "\x1b]8;" not in out
    assert "mallory\\nforged line" in out
    assert_inert(out)
    if args == ("stats",):
        assert "malformed" in out and "w [/] \\x1b[2Jcleared" in out  # the worker id
    if "--by" in args or "--since" in args or "--watch" in args:
        assert "[link=htt" in out.split("paused", 1)[1]  # the type, in a table after the totals


def test_hostile_strings_in_json_stay_exact(hostile, run_cli) -> None:
    snap = json.loads(run_cli("stats", "-o", "json", "--by", "type").stdout)
    assert set(HOSTILE.values()) <= set(snap["by_type"])
    assert snap["pause"]["actor"] == "mallory\nforged line"


def test_check_text_is_shown_inert(queue, run_cli) -> None:
    res = run_cli("stats", "-o", "json", "--check", "pending\x1c>\x1c5")
    assert res.code == ExitCode.CHECK_FAILED
    assert "\x1c" not in res.stderr and "pending\\x1c>\\x1c5" in res.stderr


def test_by_help_says_type_once(run_cli) -> None:
    res = run_cli("stats", "--help")
    assert res.code == 0
    assert "(--by type)" not in res.stdout
    assert "type: also count per activity type (exact counts)" in " ".join(res.stdout.split())


# ------------------------------------------------------------- counts and estimates


def truth(queue: RunnerQ) -> dict[str, int]:
    """Every status counted document by document (what the estimates stand for)."""
    out = {}
    for row in queue.context.activities.aggregate(
            [{"$group": {"_id": "$status", "n": {"$sum": 1}}}]):
        out[row["_id"]] = row["n"]
    return out


def test_counts_exact_estimate_labelled_and_true_after_retention(queue, clock, run_cli,
                                                                 monkeypatch) -> None:
    for status, n in (("completed", 5), ("failed", 2), ("dead_letter", 1), ("cancelled", 1),
                      ("pending", 3), ("scheduled", 2)):
        for _ in range(n):
            drive_to(queue, status)
    snap = queue.inspector.stats_snapshot()
    assert snap["by_status"] == {"pending": 3, "scheduled": 2, "processing": 0, "waiting": 0,
                                 "completed": 5, "failed": 2, "dead_letter": 1, "cancelled": 1}
    # A small queue: every count exact, completed by priority too, nothing marked.
    assert snap["estimated"] == [] and snap["total"] == 14
    assert snap["by_priority"]["normal"]["completed"] == 5
    res = run_cli("stats")
    assert re.search(r"^completed\s+5\b", res.stdout, re.M), res.stdout
    assert "≈" not in res.stdout
    # Past the bound (10,000 in use; 4 here), completed is the estimate, marked as one.
    monkeypatch.setattr(metrics, "EXACT_COMPLETED_UP_TO", 4)
    snap = queue.inspector.stats_snapshot()
    assert snap["estimated"] == ["completed", "total"] and snap["by_status"]["completed"] == 5
    assert "completed" not in snap["by_priority"]["normal"]
    res = run_cli("stats")
    assert re.search(r"^completed\s+≈5\b", res.stdout, re.M), res.stdout
    assert re.search(r"^total\s+≈14\b", res.stdout, re.M)
    assert re.search(r"^failed\s+2\b", res.stdout, re.M)
    assert "≈ estimate" in res.stdout
    # Retention removes the completed ones (and, 30 days on, the failed ones).
    clock.advance(queue.settings.retention_completed + 60)
    assert queue.maintenance.purge_expired()["completed"] == 5
    snap = queue.inspector.stats_snapshot()
    assert snap["by_status"]["completed"] == 0 and snap["by_status"]["failed"] == 2
    assert snap["total"] == 9 == sum(truth(queue).values())
    clock.advance(queue.settings.retention_failed)
    queue.maintenance.purge_expired()
    snap = queue.inspector.stats_snapshot()
    assert {k: v for k, v in snap["by_status"].items() if v} == {"pending": 3, "scheduled": 2}
    assert snap["total"] == 5


@pytest.mark.proof
def test_live_counts_exact_while_workers_and_operators_act(backend: RunnerQ) -> None:
    """Workers claim and acknowledge, an operator cancels and retries, stats is read all
    along; every read is whole (never negative, all statuses), and once all stop the
    live and rare terminal counts equal a count of every document."""
    backend.enqueue_many([ActivitySpec("job", {"i": i}) for i in range(60)])
    stop = threading.Event()
    errors: list[BaseException] = []

    def worker(name: str) -> None:
        try:
            while not stop.is_set():
                claims = backend.dequeue(name, limit=3)
                if not claims:
                    return
                for n, claim in enumerate(claims):
                    try:
                        if n % 3 == 2:
                            backend.ack_failure(claim, "boom", retryable=False)
                        else:
                            backend.ack_success(claim, {"ok": 1})
                    except ClaimLost:  # the operator cancelled it while it ran
                        if backend.get_activity(claim.activity_id).status != "cancelled":
                            raise
        except BaseException as exc:
            errors.append(exc)

    def operator() -> None:
        try:
            while not stop.is_set():
                failed = backend.inspector.list_page("failed", limit=2).items
                pending = backend.inspector.list_page("pending", limit=1).items
                for action, activity in [*(("retry", a) for a in failed),
                                         *(("cancel", a) for a in pending)]:
                    # WrongState: a worker took it meanwhile, and the fence held
                    with contextlib.suppress(WrongState):
                        getattr(backend.operator, action)(activity.id)
                if not failed and not pending:
                    return
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(f"w{i}",)) for i in range(2)]
    threads.append(threading.Thread(target=operator))
    for thread in threads:
        thread.start()
    reads = 0
    try:
        while any(t.is_alive() for t in threads):
            snap = backend.inspector.stats_snapshot()
            assert set(snap["by_status"]) >= {"pending", "completed", "cancelled"}
            assert all(n >= 0 for n in snap["by_status"].values())
            assert snap["estimated"] == []  # 60 activities: every count exact
            reads += 1
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
    assert not errors, errors
    assert reads >= 1
    exact = truth(backend)
    snap = backend.inspector.stats_snapshot()
    for status in ("pending", "scheduled", "processing", "failed", "dead_letter", "cancelled"):
        assert snap["by_status"][status] == exact.get(status, 0), status
    assert snap["by_status"]["completed"] == exact.get("completed", 0)  # at rest, exact too
    assert snap["total"] == 60


# ------------------------------------------------------------------- pictures


def test_sparkline() -> None:
    assert sparkline([None, 0, 1, 4, 8]) == " ▁▃▅█"
    assert sparkline([0, 0]) == "▁▁" and sparkline([None]) == " "


def test_history_per_type_buckets_and_latency(queue, clock) -> None:
    """Finished ones land in their bucket (oldest first), with their run time; retention
    takes them out of the picture."""
    for ago, run, kind in ((50 * 60, 2, "a"), (50 * 60, 4, "a"), (5 * 60, 1, "a"),
                           (5 * 60, 3, "b"), (2 * 3600, 1, "a")):
        queue.enqueue(kind, {})
        clock.advance(-ago)
        claim = queue.dequeue("w", types=[kind])[0]
        clock.advance(run)
        if kind == "b":
            queue.ack_failure(claim, "boom", retryable=False)
        else:
            queue.ack_success(claim, None)
        clock.advance(ago - run)
    hist = queue.inspector.stats_snapshot(history_seconds=3600)["history"]
    assert hist["buckets"] == 20 and hist["bucket_seconds"] == 180
    a, b = hist["by_type"]["a"], hist["by_type"]["b"]
    assert (a["completed"], a["failed"], b["failed"]) == (3, 0, 1)  # 2 h ago: not in the hour
    assert a["per_bucket"][3] == 2 and a["per_bucket"][18] == 1 and sum(a["per_bucket"]) == 3
    # nearest rank: the p50 of 2 s and 4 s is 2 s (rank 1), their p95 is 4 s (rank 2)
    assert a["run_p50"][3] == 2.0 and a["run_p95"][3] == 4.0 and a["run_p50"][18] == 1.0
    assert b["per_bucket"][18] == 1 and b["run_p95"][18] == 3.0
    clock.advance(queue.settings.retention_completed + 60)
    queue.maintenance.purge_expired()
    hist = queue.inspector.stats_snapshot(history_seconds=90 * 86400)["history"]
    assert "a" not in hist["by_type"] and hist["by_type"]["b"]["failed"] == 1


def test_watch_fits_80_columns(hostile, queue, cli_env) -> None:
    drive_to(queue, "completed", "a-very-long-activity-type-name-indeed")
    queue.enqueue("a-very-long-activity-type-name-indeed", {})
    res = subprocess.run([sys.executable, "-m", "runnerq_cli", "stats", "--watch",
                          "--iterations", "1", "--by", "type"],
                         env={**cli_env, "COLUMNS": "80"}, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80, [line for line in lines if len(line) > 80]
    assert any("p95 trend" in line for line in lines)
    spark = next(line for line in lines if line.startswith("a-very-lo..."))
    assert "█" in spark  # its one completion is the tallest bar of its row


@pytest.mark.parametrize("since", ["soon", "10s", "100d", "-1h", ""])
def test_since_bad_input(queue, run_cli, since) -> None:
    res = run_cli("stats", "--since", since)
    assert res.code == ExitCode.USAGE
    assert res.stderr.startswith("error: ") and len(res.stderr.strip().splitlines()) == 1
    assert "--since" in res.stderr and res.stdout == ""


def test_since_answers_from_the_history_kept(queue, run_cli) -> None:
    drive_to(queue, "completed", "a")
    drive_to(queue, "failed", "b")
    snap = json.loads(run_cli("stats", "-o", "json", "--since", "24h").stdout)
    assert snap["history"]["since_seconds"] == 86400
    assert snap["history"]["by_type"]["a"]["completed"] == 1
    assert snap["history"]["by_type"]["b"]["failed"] == 1
    text = run_cli("stats", "--since", "24h").stdout
    assert "per type, last 1d" in text


# -------------------------------------------------------------- stray documents


def test_malformed_documents_are_skipped_and_counted(queue, run_cli) -> None:
    acts = queue.context.activities
    drive_to(queue, "pending", "fine")
    acts.insert_one({"_id": "stray-1", "status": "pending", "priority": 2,
                     "created_at": "yesterday", "activity_type": "x"})
    acts.insert_one({"_id": "stray-2", "status": "completed", "priority": 2,
                     "created_at": queue.context.clock(), "started_at": "later",
                     "completed_at": queue.context.clock(), "activity_type": "x"})
    workers = queue.context.workers
    workers.insert_many([{"_id": "w-a", "concurrency": "a", "in_flight": "x",
                          "last_heartbeat": queue.context.clock()},
                         {"_id": "w-b", "types": 5, "last_heartbeat": "x"}])
    for args in (("stats", "-o", "json"), ("stats",), ("stats", "--since", "1h"),
                 ("stats", "-o", "prometheus"), ("stats", "-o", "openmetrics")):
        res = run_cli(*args)
        assert res.code == 0, (args, res.stderr)
    snap = json.loads(run_cli("stats", "-o", "json").stdout)
    assert snap["oldest_pending"]["activity_type"] == "fine"
    assert snap["workers"] == {"live": 1, "stale": 1, "in_flight": 0}
    # the two workers and the pending "yesterday" (outside the oldest-pending query's
    # range, {$type: "date"}, but a mismatch of the shape table as doctor finds it)
    assert len(snap["malformed"]) == 3, snap["malformed"]
    assert 'activities stray-1: created_at is "yesterday", not a date' in snap["malformed"]
    assert snap["latency"]["run_seconds"]["count"] == 0  # the stray one is left out
    assert run_cli("stats", "--check", "malformed == 0").code == ExitCode.CHECK_FAILED
    families = parse(run_cli("stats", "-o", "prometheus").stdout)
    assert value(families["runnerq_malformed_documents"], queue="tests") == 3


def test_a_repeated_snapshot_scans_the_shapes_once_a_minute(queue, monkeypatch) -> None:
    """stats --watch and metrics serve ask for a snapshot every few seconds on one
    context: the shape scan (up to 10,000 documents per status) is reused for a minute,
    then read afresh; a one-shot stats (a new context) always reads it."""
    from runnerq_cli.backend.views import metrics

    acts = queue.context.activities
    drive_to(queue, "pending", "fine")
    assert queue.inspector.stats_snapshot()["malformed"] == []
    acts.insert_one({"_id": "stray-3", "status": "pending", "priority": 2,
                     "created_at": "yesterday", "activity_type": "x"})
    assert queue.inspector.stats_snapshot()["malformed"] == []  # within the minute
    monkeypatch.setattr(metrics, "MALFORMED_SCAN_EVERY", 0.0)  # the minute has passed
    assert queue.inspector.stats_snapshot()["malformed"] == [
        'activities stray-3: created_at is "yesterday", not a date']


def test_one_bad_queue_never_blanks_the_others(queue: RunnerQ) -> None:
    from prometheus_client.exposition import generate_latest

    queue.for_queue("second").maintenance.init_indexes()
    queue.for_queue("second").enqueue("x", {})

    def backend_for(name: str) -> RunnerQ:
        if name == "second":
            raise RuntimeError("this queue's query failed")
        return queue.for_queue(name)

    errors: list[str] = []
    collector = QueueCollector(queue.diagnosis.discover_queues, backend_for, min_interval=0,
                               on_error=errors.append)
    families = parse(generate_latest(registry_for(collector)).decode())
    up = families["runnerq_scrape_success"]
    assert value(up, queue="tests") == 1 and value(up, queue="second") == 0
    assert value(families["runnerq_workers"], queue="tests", state="live") == 0
    assert not [s for s in families["runnerq_activities"].samples
                if s.labels["queue"] == "second"]
    assert errors == ["queue second: RuntimeError: this queue's query failed"]


# ------------------------------------------------------------- metrics serve


class Served:
    """`metrics serve` in a subprocess (SIGINT as `preexec` leaves it); its URL from its
    first line."""

    def __init__(self, env: dict[str, str], *args: str, preexec=None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "runnerq_cli", "metrics", "serve", "--port", "0", *args],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            preexec_fn=preexec or default_signals)
        first = LineReader(self.proc.stdout).readline(timeout=60)
        if not first.strip():
            self.proc.kill()
            raise AssertionError(f"metrics serve did not start: {self.proc.stderr.read()}")
        self.url = first.strip().rsplit(" ", 1)[-1]

    def get(self, query: str = "") -> str:
        with urllib.request.urlopen(self.url + query, timeout=30) as answer:
            return answer.read().decode()

    def stop(self, sig: int = signal.SIGTERM) -> int:
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=30)
        finally:
            self.proc.kill()


def ignored_sigint() -> None:
    """As `cmd &` from a non-interactive shell starts it: SIGINT ignored."""
    default_signals()
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def test_metrics_serve_name_filter(queue: RunnerQ, cli_env) -> None:
    served = Served(cli_env, "--min-interval", "0s")
    try:
        body = served.get("?name[]=runnerq_queue_paused")
        assert parse(body).keys() == {"runnerq_queue_paused"}
        assert value(parse(body)["runnerq_queue_paused"], queue="tests") == 0
        both = parse(served.get("?name[]=runnerq_queue_paused&name[]=runnerq_scrape_success"))
        assert both.keys() == {"runnerq_queue_paused", "runnerq_scrape_success"}
        sizes = parse(served.get("?name[]=runnerq_latency_sample_size"))
        assert sizes.keys() == {"runnerq_latency_sample_size"}
        assert len(parse(served.get()).keys()) > 5  # no filter: everything
    finally:
        assert served.stop() == 0


def test_metrics_serve_all_queues_with_a_stray_control_document(queue, cli_env) -> None:
    """A malformed pause document in one queue: the healthy queue is scraped whole."""
    queue.enqueue("job", {})
    bad = queue.for_queue("bad")
    bad.maintenance.init_indexes()
    bad.context.control.insert_one({"_id": PAUSE_ID, "types": 5})
    served = Served(cli_env, "--all-queues", "--min-interval", "0s")
    try:
        families = parse(served.get())
        up = families["runnerq_scrape_success"]
        assert value(up, queue="tests") == 1
        assert value(families["runnerq_activities"], queue="tests", status="pending",
                     priority="normal") == 1
        assert value(up, queue="bad") in (0, 1)  # 0 while the pause reader rejects it
    finally:
        assert served.stop() == 0


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_metrics_serve_stops_on_sigint_even_inherited_ignored(queue, cli_env, sig) -> None:
    served = Served(cli_env, preexec=ignored_sigint)
    assert served.stop(sig) == 0


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_watch_stops_on_sigint_even_inherited_ignored(queue, cli_env, sig) -> None:
    queue.enqueue("a", {})
    proc = subprocess.Popen([sys.executable, "-m", "runnerq_cli", "stats", "--watch",
                             "--interval", "0.2s"], env=cli_env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=ignored_sigint)
    try:
        lines = LineReader(proc.stdout)
        lines.wait_for(lambda line: "refresh 2" in line, timeout=60, message="two refreshes")
        proc.send_signal(sig)
        assert proc.wait(timeout=30) == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
