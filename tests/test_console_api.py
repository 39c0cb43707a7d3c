"""`runnerq-mongo console`'s HTTP API over a real server on 127.0.0.1 and real data.

Every route of RunnerQ's observability API and of ours, every error status, the
SSE stream (resume without loss or repeat, keep-alives, the shared tail, a slow
client dropped), and the security rules (token, host, origin, limits).
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import uuid
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.console.app import ConsoleConfig, ConsoleServer, serve
from tests.helpers import drive_to
from tests.waiting import wait_until

SNAPSHOT_FIELDS = {
    "id", "activity_type", "payload", "priority", "status", "created_at", "scheduled_at",
    "started_at", "completed_at", "current_worker_id", "last_worker_id", "retry_count",
    "max_retries", "timeout_seconds", "retry_delay_seconds", "metadata", "last_error",
    "last_error_at", "status_updated_at", "idempotency_key"}
STATS_FIELDS = {"pending_activities", "processing_activities", "critical_priority",
                "high_priority", "normal_priority", "low_priority", "scheduled_activities",
                "dead_letter_activities", "max_workers"}
TOKEN = "correct-horse-battery-staple"
HOSTILE = "<img src=x onerror=alert(1)>"


class Console:
    """A console server in a thread of this process, and a tiny client for it."""

    def __init__(self, rq: RunnerQ, **options: Any) -> None:
        options.setdefault("port", 0)
        self.server: ConsoleServer = serve(rq, ConsoleConfig(**options))
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever,
                                       kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            response = conn.getresponse()
            return response.status, dict(response.getheaders()), response.read()
        finally:
            conn.close()

    def raw_post(self, path: str, length: str | None) -> tuple[int, dict[str, str], bytes]:
        """A same-origin JSON POST whose Content-Length header is `length` as given
        (None: none), written by hand: http.client would set a true one."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=30) as sock:
            head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n"
                    "Content-Type: application/json\r\nSec-Fetch-Site: same-origin\r\n"
                    f"Origin: http://127.0.0.1:{self.port}\r\nConnection: close\r\n"
                    + (f"Content-Length: {length}\r\n" if length is not None else "")
                    + "\r\n")
            sock.sendall(head.encode())
            conn = http.client.HTTPResponse(sock)
            conn.begin()
            return conn.status, dict(conn.getheaders()), conn.read()

    def get(self, path: str, status: int = 200, **headers: str) -> Any:
        code, _, body = self.request("GET", path, headers=headers)
        assert code == status, (code, body[:300])
        return json.loads(body)

    def post(self, path: str, value: Any, status: int = 200,
             headers: dict[str, str] | None = None) -> Any:
        sent = {"Content-Type": "application/json", "Sec-Fetch-Site": "same-origin",
                "Origin": f"http://127.0.0.1:{self.port}", **(headers or {})}
        code, _, body = self.request("POST", path, json.dumps(value).encode(),
                                     {"Host": f"127.0.0.1:{self.port}", **sent})
        assert code == status, (code, body[:300])
        return json.loads(body)


@pytest.fixture
def console(backend: RunnerQ) -> Iterator[Console]:
    c = Console(backend)
    yield c
    c.close()


class Sse:
    """An SSE connection read event by event, with a deadline on each read."""

    def __init__(self, port: int, path: str, headers: dict[str, str] | None = None) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=20)
        lines = [f"GET {path} HTTP/1.1", f"Host: 127.0.0.1:{port}",
                 *(f"{k}: {v}" for k, v in (headers or {}).items()), "", ""]
        self.sock.sendall("\r\n".join(lines).encode())
        self.file = self.sock.makefile("rb")
        self.status = int(self.file.readline().split()[1])
        while self.file.readline() not in (b"\r\n", b""):
            pass

    def message(self) -> dict[str, str]:
        """The next block (fields by name; `comment` for `:` lines); {} at the end."""
        block: dict[str, str] = {}
        while True:
            line = self.file.readline()
            if not line:
                return block
            text = line.decode().rstrip("\n")
            if text == "":
                if block:
                    return block
                continue
            name, _, value = text.partition(":")
            block[name or "comment"] = value.removeprefix(" ")

    def events(self, count: int) -> list[tuple[str, dict[str, Any]]]:
        """The next `count` events with data, as (id, data)."""
        out = []
        while len(out) < count:
            block = self.message()
            assert block, f"stream ended after {len(out)} of {count} events"
            if "data" in block:
                out.append((block["id"], json.loads(block["data"])))
        return out

    def close(self) -> None:
        self.file.close()
        self.sock.close()


# ------------------------------------------------------------------ RunnerQ's API


def test_observability_api_route_for_route(console: Console, backend: RunnerQ) -> None:
    ids = {state: drive_to(backend, state, f"t_{state}", error=f"boom {state}")
           for state in ("pending", "scheduled", "retrying", "processing", "completed",
                         "dead_letter", "failed", "cancelled")}
    high = backend.enqueue("t_high", {}, priority="high").activity_id

    stats = console.get("/api/observability/stats")
    assert set(stats) == STATS_FIELDS
    assert stats["pending_activities"] == 2  # pending and high
    assert stats["scheduled_activities"] == 2  # the delayed one and the retry waiting
    assert stats["processing_activities"] == 1
    assert stats["dead_letter_activities"] == 1
    assert stats["high_priority"] == 1 and stats["normal_priority"] == 4
    assert stats["max_workers"] is None  # no live worker registered

    pending = console.get("/api/observability/activities/pending")
    assert [a["id"] for a in pending] == [str(high), str(ids["pending"])]  # claim order
    assert all(set(a) == SNAPSHOT_FIELDS for a in pending)
    assert pending[0]["priority"] == "High" and pending[1]["priority"] == "Normal"
    scheduled = {a["id"]: a["status"] for a in
                 console.get("/api/observability/activities/scheduled")}
    assert scheduled == {str(ids["scheduled"]): "Pending", str(ids["retrying"]): "Retrying"}
    processing = console.get("/api/observability/activities/processing")
    assert processing[0]["status"] == "Running" and processing[0]["current_worker_id"] == "w1"
    completed = console.get("/api/observability/activities/completed")
    assert [(a["id"], a["status"]) for a in completed] == [(str(ids["completed"]), "Completed")]
    dead = console.get("/api/observability/activities/dead_letter")
    assert [(a["id"], a["status"]) for a in dead] == [(str(ids["dead_letter"]), "DeadLetter")]
    assert console.get("/api/observability/activities/pending?offset=1&limit=1")[0]["id"] == \
        str(ids["pending"])

    one = console.get(f"/api/observability/activities/{ids['failed']}")
    assert one["status"] == "Failed" and one["last_error"] == "boom failed"
    assert console.get(f"/api/observability/activities/{ids['cancelled']}")["status"] == "Failed"
    for field in ("created_at", "started_at", "completed_at", "status_updated_at"):
        assert one[field].endswith("Z")
        datetime.fromisoformat(one[field])

    events = console.get(f"/api/observability/activities/{ids['completed']}/events?limit=10")
    assert [e["event_type"] for e in events][:2] == ["ResultStored", "Completed"]  # newest first
    assert {"activity_id", "timestamp", "event_type", "worker_id"} <= set(events[0])
    assert len(console.get(f"/api/observability/activities/{ids['completed']}/events?limit=1")) \
        == 1
    assert console.get(f"/api/observability/activities/{ids['completed']}/result") == {"ok": 1}
    assert console.get(f"/api/observability/activities/{ids['pending']}/result") is None

    records = console.get("/api/observability/dead-letter?limit=5")
    assert len(records) == 1 and set(records[0]) == {"activity", "error", "failed_at"}
    assert records[0]["activity"]["id"] == str(ids["dead_letter"])
    assert records[0]["error"] == "boom dead_letter"


def test_observability_errors_are_runnerqs(console: Console) -> None:
    unknown = uuid.uuid4()
    console.get("/api/observability/activities/finished", 400)
    console.get("/api/observability/activities/not-a-uuid/events", 400)
    console.get("/api/observability/activities/not-a-uuid/result", 400)
    console.get(f"/api/observability/activities/{unknown}", 404)
    # RunnerQ's handlers answer an unknown id's events and result without a look-up
    # (docs/console.md): 200 with [] and null, as here.
    assert console.get(f"/api/observability/activities/{unknown}/events") == []
    assert console.get(f"/api/observability/activities/{unknown}/result") is None
    console.get("/api/observability/activities/pending?offset=10001", 400)  # the cap
    console.get("/api/observability/activities/pending?limit=0", 400)
    console.get("/api/observability/activities/pending?limit=abc", 400)
    console.get("/api/observability/dead-letter?offset=-1", 400)


def test_a_malformed_activity_is_answered_not_a_server_failure(console: Console,
                                                               backend: RunnerQ) -> None:
    """A stored document the readers refuse (created_at a string): RunnerQ's route says
    so with 422 and a JSON error; our page's route answers as `explain` does, 200 with
    the fields it can show, the problem as `malformed` and the sentence."""
    aid = uuid.uuid4()
    backend.context.activities.insert_one(
        {"_id": aid, "activity_type": "job", "payload": {}, "priority": 2,
         "status": "pending", "created_at": "yesterday", "last_error": "earlier"})
    code, _, body = console.request("GET", f"/api/observability/activities/{aid}")
    assert code == 422 and "created_at" in json.loads(body)["error"], body
    page = console.get(f"/api/activity/{aid}")
    assert "created_at" in page["malformed"] and "malformed" in page["explain"]
    assert page["activity"] == {"id": str(aid), "status": "pending", "last_error": "earlier"}
    assert page["result"] is None and page["events"] == []


# ------------------------------------------------------------------ ours


def test_our_routes(console: Console, backend: RunnerQ, run_cli: Any) -> None:
    failed = [drive_to(backend, "failed", "charge", error="card declined\nat line 3")
              for _ in range(2)]
    drive_to(backend, "dead_letter", "charge", error="timeout")
    done = drive_to(backend, "completed", "send", result={"sent": True})
    backend.registry.register_worker("w-live", types=["send"], concurrency=4)
    running = drive_to(backend, "processing", "send", worker_id="w-live")
    backend.enqueue("send", {})

    info = console.get("/api/info")
    assert info["queue"] == "tests" and info["actions"] is False and info["token"] is False

    queues = console.get("/api/queues")["queues"]
    assert [q["queue"] for q in queues] == ["tests"]

    stats = console.get("/api/stats?window=60")
    cli = run_cli("stats", "-o", "json")
    assert cli.code == 0
    assert stats["by_status"] == json.loads(cli.stdout)["by_status"]
    assert set(stats["by_type"]) == {"charge", "send"} and stats["history"] is not None
    console.get("/api/stats?window=0", 400)

    groups = console.get("/api/failing")["groups"]
    assert groups[0]["activity_type"] == "charge"
    assert groups[0]["error"] == "card declined\nat line 3"
    assert groups[0]["count"] == groups[0]["failed"] == 2
    assert groups[0]["example_id"] in {str(i) for i in failed}
    assert groups[1]["error"] == "timeout" and groups[1]["dead_letter"] == 1
    assert groups[0]["first_seen"] <= groups[0]["last_seen"]

    workers = console.get("/api/workers")["workers"]
    assert workers[0]["worker_id"] == "w-live" and workers[0]["stale"] is False
    assert workers[0]["running"] == [str(running)]
    assert console.get("/api/observability/stats")["max_workers"] == 4

    assert console.get("/api/pauses")["paused"] is False
    doctor = console.get("/api/doctor")
    assert isinstance(doctor["ok"], bool) and doctor["checks"]

    page = console.get(f"/api/activity/{done}")
    assert page["activity"]["status"] == "completed" and page["snapshot"]["status"] == "Completed"
    assert page["events"][0]["event_type"] == "Enqueued"  # oldest first
    assert page["result"]["data"] == {"sent": True} and page["explain"]
    console.get(f"/api/activity/{uuid.uuid4()}", 404)
    console.get("/api/activity/nope", 400)

    found = console.get(f"/api/search?q={str(done)[:8]}")
    assert str(done) in found["matches"]
    assert console.get(f"/api/search?q={done}") == {"matches": [str(done)], "exact": str(done)}
    console.get("/api/search?q=abc", 400)

    first = console.get("/api/activities?state=failed&limit=1")
    second = console.get(f"/api/activities?state=failed&limit=1&after={first['next_cursor']}")
    assert {first["items"][0]["id"], second["items"][0]["id"]} == {str(i) for i in failed}
    assert second["next_cursor"] is None
    typed = console.get("/api/activities?state=pending&type=send")
    assert [a["activity_type"] for a in typed["items"]] == ["send"]
    console.get("/api/activities?state=nonsense", 400)
    console.get("/api/activities?state=failed&after=garbage", 400)

    assert console.get("/api/audit")["entries"] == []
    console.get("/api/stats?queue=nosuchqueue", 400)


def test_other_queue_of_the_database(console: Console, backend: RunnerQ) -> None:
    other = backend.for_queue("mail")
    other.maintenance.init_indexes()
    aid = other.enqueue("send", {}).activity_id
    names = [q["queue"] for q in console.get("/api/queues")["queues"]]
    assert names == ["mail", "tests"]
    listed = console.get("/api/activities?state=pending&queue=mail")["items"]
    assert [a["id"] for a in listed] == [str(aid)]
    assert console.get(f"/api/activity/{aid}?queue=mail")["activity"]["id"] == str(aid)
    stream = Sse(console.port, "/api/stream?queue=mail")
    assert stream.message() == {"retry": "1000"} and stream.message()["id"]
    backend.enqueue("in_tests", {})  # another queue's event: not on this stream
    later = other.enqueue("send", {}).activity_id
    assert stream.events(1)[0][1]["activity_id"] == str(later)
    stream.close()


# ------------------------------------------------------------------ HTTP rules


def test_odd_paths_methods_and_sizes_are_json_errors(console: Console) -> None:
    for method, path, status in [("GET", "/nope", 404), ("GET", "/api/", 404),
                                 ("DELETE", "/api/info", 405), ("PUT", "/", 405),
                                 ("BREW", "/api/info", 405), ("POST", "/api/info", 405)]:
        code, headers, body = console.request(method, path)
        assert code == status, (method, path, code)
        assert headers["Content-Type"] == "application/json"
        assert "error" in json.loads(body) and b"Traceback" not in body
    assert console.request("DELETE", "/api/info")[1]["Allow"] == "GET"
    code, _, body = console.request("GET", "/api/info?" + "x" * 70_000)
    assert code == 414 and json.loads(body)
    with socket.create_connection(("127.0.0.1", console.port), timeout=10) as sock:
        sock.sendall(b"garbage\r\n\r\n")
        reply = sock.recv(4096)
    assert reply.startswith(b"HTTP/1.1 400") and b"Traceback" not in reply


def test_hostile_text_is_json_escaped_and_the_uri_never_shown(console: Console,
                                                              backend: RunnerQ) -> None:
    aid = backend.enqueue(HOSTILE, {"html": HOSTILE}).activity_id
    for path in ("/api/observability/activities/pending", f"/api/activity/{aid}",
                 "/api/stats", "/api/queues", "/api/info", "/api/doctor"):
        code, headers, body = console.request("GET", path)
        assert code == 200 and b"<" not in body and b">" not in body
        assert backend.settings.uri.encode() not in body
        assert headers["X-Content-Type-Options"] == "nosniff"
        assert "default-src 'none'" in headers["Content-Security-Policy"]
    body = console.request("GET", f"/api/activity/{aid}")[2]
    assert b"\\u003cimg src=x onerror=alert(1)\\u003e" in body
    assert json.loads(body)["activity"]["activity_type"] == HOSTILE


def test_pages_our_own_and_ui_file(backend: RunnerQ, tmp_path: Any) -> None:
    ours = Console(backend)
    try:
        code, headers, body = ours.request("GET", "/")
        assert code == 200 and headers["Content-Type"].startswith("text/html")
        csp = headers["Content-Security-Policy"]
        assert "script-src" in csp and "unsafe-inline" not in csp.split("script-src")[1] \
            .split(";")[0]
    finally:
        ours.close()
    page = tmp_path / "runnerq-console.html"
    page.write_text("<html><script>const API_BASE = '/api/observability';</script></html>")
    theirs = Console(backend, ui=page.read_bytes())
    try:
        code, headers, body = theirs.request("GET", "/")
        assert code == 200 and body == page.read_bytes()
        assert "connect-src 'self'" in headers["Content-Security-Policy"]
    finally:
        theirs.close()


def test_connections_are_bounded(backend: RunnerQ) -> None:
    c = Console(backend, max_connections=2)
    held = [socket.create_connection(("127.0.0.1", c.port), timeout=10) for _ in range(2)]
    try:
        wait_until(lambda: c.server._slots._value == 0, 10, message="two connections held")
        with socket.create_connection(("127.0.0.1", c.port), timeout=10) as third:
            reply = third.recv(4096)
        assert reply.startswith(b"HTTP/1.1 503")
    finally:
        for sock in held:
            sock.close()
        c.close()


# ------------------------------------------------------------------ security


def test_token_header_cookie_and_login(backend: RunnerQ,
                                       caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("DEBUG", logger="runnerq.console")
    c = Console(backend, token=TOKEN)
    try:
        c.get("/api/info", 401)
        c.get("/", 401)
        assert c.get("/api/info", Authorization=f"Bearer {TOKEN}")["token"] is True
        c.get("/api/info", 401, Authorization="Bearer wrong-token-wrong-token")
        code, _, _ = c.request("GET", "/?token=wrong")
        assert code == 401
        code, headers, _ = c.request("GET", f"/?token={TOKEN}")
        assert code == 303 and headers["Location"] == "/"
        cookie = headers["Set-Cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
        pair = cookie.split(";")[0]
        assert c.get("/api/info", Cookie=pair)["queue"] == "tests"
        stream = Sse(c.port, "/api/stream", {"Cookie": pair})
        assert stream.status == 200
        stream.close()
        assert Sse(c.port, "/api/stream").status == 401
        assert "console: GET / 303" in caplog.text and TOKEN not in caplog.text
    finally:
        c.close()


def test_a_loopback_console_answers_only_to_loopback_names(console: Console) -> None:
    """DNS rebinding: another site's name pointed at 127.0.0.1 reads nothing."""
    assert console.get("/api/info", Host=f"localhost:{console.port}")["queue"] == "tests"
    assert console.get("/api/info", Host=f"[::1]:{console.port}")["queue"] == "tests"
    console.get("/api/info", 403, Host=f"evil.example:{console.port}")
    code, _, _ = console.request("GET", "/", headers={"Host": "evil.example"})
    assert code == 403


def test_host_rules_from_the_command_line(run_cli: Any) -> None:
    refused = run_cli("console", "--host", "0.0.0.0", "--port", "0")
    assert refused.code == 2
    assert refused.stderr.count("\n") == 1 and "loopback" in refused.stderr
    assert "token" in refused.stderr
    short = run_cli("console", "--token", "short", "--port", "0")
    assert short.code == 2 and "at least 24" in short.stderr and "short" not in refused.stdout
    missing = run_cli("console", "--ui", "no-such-file.html", "--port", "0")
    assert missing.code == 2 and "--ui" in missing.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = run_cli("console", "--port", str(taken.getsockname()[1]))
    assert busy.code == 2 and "cannot listen" in busy.stderr and busy.stderr.count("\n") == 1


def test_console_command_prints_the_url_and_serves(cli_env: dict[str, str]) -> None:
    import os
    import signal
    import subprocess
    import sys
    import urllib.request

    from tests.waiting import LineReader

    proc = subprocess.Popen([sys.executable, "-m", "runnerq_cli", "console", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**cli_env, "RUNNERQ_CONSOLE_TOKEN": TOKEN})
    try:
        out = LineReader(proc.stdout)
        first = out.wait_for(lambda line: "http://" in line, 60)
        url = first.split(": ", 1)[1].strip()
        assert url.startswith("http://127.0.0.1:") and TOKEN not in first
        request = urllib.request.Request(url + "api/info",
                                         headers={"Authorization": f"Bearer {TOKEN}"})
        with urllib.request.urlopen(request, timeout=30) as reply:
            assert json.loads(reply.read())["token"] is True
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        assert TOKEN not in "".join(out.lines)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


# ------------------------------------------------------------------ actions


def test_actions_are_off_without_allow_actions(console: Console, backend: RunnerQ) -> None:
    aid = drive_to(backend, "failed")
    console.post("/api/actions/retry/preview", {"ids": [str(aid)]}, 403)
    assert backend.get_activity(aid).status == "failed"


def test_actions_need_same_origin_json_posts(backend: RunnerQ) -> None:
    c = Console(backend, allow_actions=True)
    aid = drive_to(backend, "failed")
    try:
        body = {"ids": [str(aid)]}
        c.post("/api/actions/retry/preview", body, 403, {"Origin": "http://evil.example"})
        c.post("/api/actions/retry/preview", body, 403, {"Sec-Fetch-Site": "cross-site"})
        c.post("/api/actions/retry/preview", body, 415, {"Content-Type": "text/plain"})
        code, _, _ = c.request("GET", "/api/actions/retry/preview")
        assert code == 405
        big = json.dumps({"ids": ["x" * 70_000]}).encode()
        code, _, reply = c.request("POST", "/api/actions/retry/preview", big,
                                   {"Content-Type": "application/json"})
        assert code == 413 and json.loads(reply)
        c.post("/api/actions/nonsense/preview", body, 404)
        for length in ("-5", "1e3", "²", "abc"):  # given but not a length: 400, not 411
            code, _, reply = c.raw_post("/api/actions/retry/preview", length)
            assert code == 400 and "Content-Length" in json.loads(reply)["error"], reply
        code, _, reply = c.raw_post("/api/actions/retry/preview", None)
        assert code == 411, reply
        # matched counts the ids that exist, selected those the action applies to
        unknown = c.post("/api/actions/retry/preview", {"ids": [str(uuid.uuid4())]})
        assert (unknown["matched"], unknown["selected"]) == (0, 0)
        both = c.post("/api/actions/retry/preview", {"ids": [str(aid), str(uuid.uuid4())]})
        assert (both["matched"], both["selected"]) == (1, 1)
        assert backend.get_activity(aid).status == "failed"
    finally:
        c.close()


def test_previewed_confirmed_audited_actions(backend: RunnerQ, run_cli: Any) -> None:
    c = Console(backend, allow_actions=True, max_action=5)
    try:
        failed = [drive_to(backend, "failed", "charge") for _ in range(2)]
        preview = c.post("/api/actions/retry/preview", {"ids": [str(i) for i in failed]})
        assert preview["selected"] == 2 and set(preview["ids"]) == {str(i) for i in failed}
        assert all(backend.get_activity(i).status == "failed" for i in failed)  # reads only
        c.post("/api/actions/retry", {"confirm": preview["confirm"]}, 400)  # no actor
        report = c.post("/api/actions/retry", {"confirm": preview["confirm"], "actor": "ada",
                                               "reason": "card fixed"})
        assert report["applied"] == 2
        assert all(backend.get_activity(i).status == "pending" for i in failed)
        c.post("/api/actions/retry", {"confirm": preview["confirm"], "actor": "ada"}, 409)
        entry = c.get("/api/audit")["entries"][0]
        assert entry["action"] == "retry" and entry["actor"] == "ada"
        assert entry["detail"]["command"] == "console" and entry["reason"] == "card fixed"
        audit = json.loads(run_cli("audit", "-o", "json").stdout)["actions"]
        assert audit[0]["detail"]["command"] == "console"

        waiting = [drive_to(backend, "scheduled", "mail") for _ in range(3)]
        c.post("/api/actions/cancel/preview", {"filter": {"type": ["mail"]}}, 400)  # no max
        c.post("/api/actions/cancel/preview", {"filter": {"type": ["mail"]}, "max": 6}, 400)
        chosen = c.post("/api/actions/cancel/preview", {"filter": {"type": ["mail"]}, "max": 2})
        assert chosen["selected"] == 2 and chosen["matched"] == 3
        c.post("/api/actions/cancel", {"confirm": chosen["confirm"], "actor": "ada"})
        statuses = sorted(backend.get_activity(i).status for i in waiting)
        assert statuses == ["cancelled", "cancelled", "scheduled"]
        left = next(i for i in waiting if backend.get_activity(i).status == "scheduled")
        run_now = c.post("/api/actions/run-now/preview", {"ids": [str(left)]})
        c.post("/api/actions/run-now", {"confirm": run_now["confirm"], "actor": "ada"})
        assert backend.get_activity(left).status == "pending"

        dead = drive_to(backend, "dead_letter", "payout")
        redrive = c.post("/api/actions/redrive/preview", {"types": ["payout"], "max": 5})
        assert redrive["ids"] == [str(dead)]
        c.post("/api/actions/redrive", {"confirm": redrive["confirm"], "actor": "ada"})
        assert backend.get_activity(dead).status == "pending"

        pause = c.post("/api/actions/pause/preview", {"types": ["charge"]})
        assert pause["before"]["paused"] is False
        c.post("/api/actions/pause", {"confirm": pause["confirm"], "actor": "ada",
                                      "reason": HOSTILE})
        assert c.get("/api/pauses") == {**c.get("/api/pauses"), "paused": True,
                                        "types": ["charge"], "reason": HOSTILE}
        resume = c.post("/api/actions/resume/preview", {})
        c.post("/api/actions/resume", {"confirm": resume["confirm"], "actor": "ada"})
        assert c.get("/api/pauses")["paused"] is False
        c.post("/api/actions/resume", {"confirm": "made-up", "actor": "ada"}, 409)
    finally:
        c.close()


# ------------------------------------------------------------------ the stream


def _enqueue(rq: RunnerQ, count: int, kind: str = "job") -> list[uuid.UUID]:
    return [rq.enqueue(kind, {"n": n}).activity_id for n in range(count)]


def test_stream_resumes_without_loss_or_repeat(backend: RunnerQ) -> None:
    c = Console(backend, poll_interval=0.05)
    first = Sse(c.port, "/api/stream")
    opening = first.message()
    assert opening == {"retry": "1000"}
    before = first.message()["id"]  # the position before any event
    assert before.startswith("ec")
    _enqueue(backend, 3)
    got = first.events(2)
    first.close()
    from_start = Sse(c.port, "/api/stream", {"Last-Event-ID": before})
    assert [d["id"] for _, d in from_start.events(3)][:2] == [d["id"] for _, d in got]
    from_start.close()
    _enqueue(backend, 2)
    # Resumed from the shared tail's recent positions (the ring): the rest, once.
    again = Sse(c.port, "/api/stream", {"Last-Event-ID": got[-1][0]})
    rest = again.events(3)
    again.close()
    seen = [d["id"] for _, d in got + rest]
    assert len(seen) == len(set(seen)) == 5
    assert [d["event_type"] for _, d in got + rest] == ["Enqueued"] * 5
    c.close()

    # A new console (a restart): the position is in the data; its own catch-up, then live.
    _enqueue(backend, 2, "after_restart")
    c2 = Console(backend, poll_interval=0.05)
    try:
        resumed = Sse(c2.port, f"/api/stream?cursor={got[0][0]}")
        more = resumed.events(6)  # 4 left of the first five and the 2 enqueued meanwhile
        ids = [d["id"] for _, d in more]
        assert len(set(ids)) == 6 and not set(ids) & {got[0][1]["id"]}
        assert set(ids) | {got[0][1]["id"]} >= set(seen)
        live = _enqueue(backend, 1, "live")
        (position, event), = resumed.events(1)
        assert event["activity_id"] == str(live[0])
        resumed.close()
        # The position of that live event resumes after it: nothing, then the next one.
        later = Sse(c2.port, "/api/stream", {"Last-Event-ID": position})
        nxt = _enqueue(backend, 1, "next")
        assert later.events(1)[0][1]["activity_id"] == str(nxt[0])
        later.close()
        c2.get("/api/stream?cursor=not-a-cursor", 400)
    finally:
        c2.close()


def test_runnerq_stream_shape_and_keepalive(backend: RunnerQ) -> None:
    c = Console(backend, poll_interval=0.05, keepalive=0.3)
    try:
        stream = Sse(c.port, "/api/observability/stream")
        aid = backend.enqueue("job", {}).activity_id
        backend.control.pause(reason="quiet")  # a queue event: not on RunnerQ's stream
        _, event = stream.events(1)[0]
        assert event == {"activity_id": str(aid), "timestamp": event["timestamp"],
                         "event_type": "Enqueued", "worker_id": None,
                         "detail": event["detail"]}
        comment = wait_until(lambda: stream.message().get("comment"), 20,
                             message="a keep-alive comment")
        assert comment == "keep-alive"
        stream.close()
    finally:
        c.close()


def test_one_tail_shared_and_a_slow_client_dropped(backend: RunnerQ) -> None:
    c = Console(backend, poll_interval=0.05, client_queue=3)
    try:
        tail = c.server.tail
        fast = Sse(c.port, "/api/stream")
        slow = tail.subscribe(None)  # subscribed, never read: its queue fills
        wait_until(lambda: tail.clients == 2, 10, message="two clients")
        assert list(c.server._tails) == ["tests"]  # one tail, one thread, for both clients
        assert tail._thread is not None and tail._thread.is_alive()
        for _ in range(6):  # one at a time: the fast one keeps up, the slow one's 3 fill
            _enqueue(backend, 1)
            assert len(fast.events(1)) == 1  # not slowed by the slow one
        wait_until(lambda: tail.clients == 1, 10, message="the slow client dropped")
        got = [e for e, _ in slow if e is not None and e.event_type]
        assert len(got) == 0  # dropped: its queue is left, it resumes from its last id
        fast.close()
    finally:
        c.close()


def test_failing_is_the_backends_grouping_kept_through_retries(
        console: Console, backend: RunnerQ, run_cli: Any) -> None:
    """The failing view is `stats --by error`'s grouping (one in the product): from the
    stored failure events, so a retried incident stays listed; `limit` cuts the groups."""
    declined = [drive_to(backend, "failed", "charge", error="declined") for _ in range(2)]
    drive_to(backend, "dead_letter", "charge", error="timeout")
    backend.operator.retry(declined[0])  # the activity forgets its error; its events do not
    view = console.get("/api/failing?hours=2")
    cli = run_cli("stats", "--by", "error", "--since", "2h", "-o", "json")
    assert cli.code == 0, cli.stderr
    assert view["groups"] == json.loads(cli.stdout)["groups"]
    assert [(g["error"], g["count"], g["failed"], g["dead_letter"]) for g in view["groups"]] \
        == [("declined", 2, 2, 0), ("timeout", 1, 0, 1)]
    assert view["window_hours"] == 2 and view["total_groups"] == 2
    one = console.get("/api/failing?limit=1")
    assert len(one["groups"]) == 1 and one["total_groups"] == 2
    console.get("/api/failing?hours=0", 400)
    console.get("/api/failing?limit=0", 400)
