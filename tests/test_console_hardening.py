"""The console under attack (issue 33): each reproduction of the hostile run, as a test.

A page the console did not write may not act and runs no stored text; data that
reaches RunnerQ's routes carries no markup; worker ids are ids. (The browser's
side of these is in tests/test_console_hostile_browser.py.)
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.console.app import HEADERS_MAX, REQUEST_LINE_MAX, ConsoleConfig, serve
from runnerq_cli.errors import InvalidArgument
from tests.test_console_api import Console
from tests.waiting import wait_until


@pytest.fixture
def console(backend: RunnerQ) -> Iterator[Console]:
    c = Console(backend)
    yield c
    c.close()


MARKUP = '<img src=x onerror="fetch(\'/api/actions/pause\')">'


def _activity(aid: Any, status: str = "pending", **fields: Any) -> dict[str, Any]:
    return {"_id": aid, "activity_type": "job", "payload": {}, "priority": 2,
            "status": status, "created_at": datetime.now(UTC), "retry_count": 0,
            "max_retries": 3, "timeout_seconds": 60, "retry_delay_seconds": 1, **fields}


# ------------------------------------------------------------------ a page we did not write


def test_ui_with_allow_actions_is_refused_at_start(run_cli: Any, tmp_path: Any,
                                                   backend: RunnerQ) -> None:
    page = tmp_path / "runnerq-console.html"
    page.write_text("<html></html>")
    refused = run_cli("console", "--ui", str(page), "--allow-actions", "--port", "0")
    assert refused.code == 2 and refused.stdout == ""
    assert refused.stderr.count("\n") == 1 and "--ui" in refused.stderr \
        and "--allow-actions" in refused.stderr
    with pytest.raises(InvalidArgument):  # the library's own callers too
        serve(backend, ConsoleConfig(port=0, ui=b"<html></html>", allow_actions=True))


def test_a_ui_page_runs_only_its_own_scripts_and_handlers(backend: RunnerQ) -> None:
    page = (b"<html><script>window.ok = 1;</script>"
            b"<button onclick=\"sortBy('status')\">s</button>"
            b"<script>el.innerHTML = `<b onclick=\"copy('${id}')\">`;</script></html>")
    c = Console(backend, ui=page)
    try:
        csp = c.request("GET", "/")[1]["Content-Security-Policy"]
    finally:
        c.close()
    script = csp.split("script-src ")[1].split(";")[0].split()
    assert "'unsafe-inline'" not in script and "'unsafe-eval'" not in script
    # two scripts and the one fixed handler, by hash; the handler made from data is not
    assert "'unsafe-hashes'" in script
    assert len([s for s in script if s.startswith("'sha256-")]) == 3
    assert "form-action 'none'" in csp and "frame-ancestors 'none'" in csp


def test_runnerq_lists_keep_out_ids_that_are_not_uuids(console: Console,
                                                        backend: RunnerQ) -> None:
    good = uuid.uuid4()
    activities = backend.context.activities
    activities.insert_many([_activity(MARKUP), _activity(good)])
    code, headers, body = console.request("GET", "/api/observability/activities/pending")
    listed = json.loads(body)
    assert code == 200 and [a["id"] for a in listed] == [str(good)]
    assert headers["X-RunnerQ-Skipped"] == "1"  # counted, not silently lost
    assert b"onerror" not in body


def test_runnerq_shapes_carry_no_worker_id_or_event_type_that_is_markup(
        console: Console, backend: RunnerQ) -> None:
    aid = uuid.uuid4()
    backend.context.activities.insert_one(_activity(aid, "processing", worker_id=MARKUP,
                                                    started_at=datetime.now(UTC)))
    backend.context.events.insert_many([
        {"_id": uuid.uuid4().hex, "activity_id": aid, "timestamp": datetime.now(UTC),
         "ingested_at": datetime.now(UTC), "event_type": MARKUP, "worker_id": "w-1",
         "detail": {}},
        {"_id": uuid.uuid4().hex, "activity_id": aid, "timestamp": datetime.now(UTC),
         "ingested_at": datetime.now(UTC), "event_type": "Started", "worker_id": MARKUP,
         "detail": {}}])
    (running,) = console.get("/api/observability/activities/processing")
    assert running["current_worker_id"] is None and running["last_worker_id"] is None
    events = console.get(f"/api/observability/activities/{aid}/events")
    assert MARKUP not in json.dumps(events)
    assert {"event_type": "Started", "worker_id": None} in [
        {k: e[k] for k in ("event_type", "worker_id")} for e in events]
    # our own routes show everything, as data (JSON-escaped): nothing is hidden there
    assert console.get(f"/api/activity/{aid}")["activity"]["worker_id"] == MARKUP


# ------------------------------------------------------------------ worker ids


@pytest.mark.parametrize("bad", [MARKUP, "w 1", "w\u202e1", "", "x" * 129, "w'1", 'w"1'])
def test_a_worker_id_is_the_characters_an_id_needs(bad: str, backend: RunnerQ) -> None:
    with pytest.raises(InvalidArgument, match="worker id"):
        backend.registry.register_worker(bad)
    assert backend.context.workers.count_documents({}) == 0


def test_worker_id_refused_at_the_command_line(run_cli: Any) -> None:
    refused = run_cli("worker", "--worker-id", MARKUP, "--exec", "job=true", "--burst")
    assert refused.code == 2 and refused.stderr.count("\n") == 1
    assert "--worker-id" in refused.stderr and "letters, digits" in refused.stderr
    assert "Traceback" not in refused.stderr


@pytest.mark.parametrize("key", ["pending", "dead_letter"])
def test_runnerq_lists_count_the_malformed_documents_they_leave_out(
        key: str, console: Console, backend: RunnerQ) -> None:
    good = uuid.uuid4()
    if key == "pending":
        backend.context.activities.insert_many([
            _activity(good), _activity(uuid.uuid4(), priority="high"),
            _activity(uuid.uuid4(), created_at="yesterday"), _activity(MARKUP)])
    else:
        dead = {**_activity(good, "dead_letter"), "_id": uuid.uuid4(), "activity_id": good}
        backend.context.activities.insert_one(_activity(good, "dead_letter"))
        backend.context.dead_letter.insert_many([
            {"_id": uuid.uuid4(), "activity": "not-a-document"}, dead])
    code, headers, body = console.request("GET", f"/api/observability/activities/{key}")
    listed = json.loads(body)
    assert code == 200
    # every document of the page is a row or counted: the count agrees with the rows
    shown = len(listed)
    assert headers["X-RunnerQ-Skipped"] == ("3" if key == "pending" else str(2 - shown))


# ------------------------------------------------------------------ slots no client can hold


def _dribbler(port: int, source: str = "127.0.0.1") -> socket.socket:
    """A client that began a request and sends one header byte now and then."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10,
                                    source_address=(source, 0))
    sock.sendall(b"GET /api/info HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: a")
    return sock


def _timed_get(port: int, path: str = "/api/info", source: str = "127.0.0.2"
               ) -> tuple[int, float]:
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=10,
                                  source_address=(source, 0)) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                     "Connection: close\r\n\r\n".encode())
        reply = http.client.HTTPResponse(sock)
        reply.begin()
        reply.read()
        return reply.status, time.monotonic() - started


def test_slow_clients_hold_no_slot_others_need(backend: RunnerQ) -> None:
    c = Console(backend)  # the defaults: 64 connections, 16 per address
    held = [_dribbler(c.port) for _ in range(64)]
    try:
        for sock in held:
            with contextlib.suppress(OSError):  # those past the address's share: closed
                sock.sendall(b"a")  # still dribbling
        status, took = _timed_get(c.port)  # another address: answered at once
        assert status == 200 and took < 1.0
        # the dribblers' own address holds its share and no more
        assert c.server._by_address["127.0.0.1"] == 16
    finally:
        for sock in held:
            sock.close()
        c.close()


def test_a_request_must_arrive_whole_within_its_deadline(backend: RunnerQ) -> None:
    c = Console(backend, request_deadline=0.5, idle_timeout=0.5)
    try:
        slow = _dribbler(c.port)
        silent = socket.create_connection(("127.0.0.1", c.port), timeout=10)
        started = time.monotonic()
        for _ in range(3):  # a byte each 0.3 s: every read is in time, the request is not
            time.sleep(0.3)
            with contextlib.suppress(OSError):
                slow.sendall(b"a")
        reply = slow.recv(4096)
        assert reply.startswith(b"HTTP/1.1 408") and time.monotonic() - started < 3
        assert silent.recv(4096) == b""  # a connection that never spoke: closed
        slow.close()
        silent.close()
        wait_until(lambda: c.server._by_address == {}, 10, message="the slots freed")
    finally:
        c.close()


def test_headers_are_refused_as_soon_as_they_pass_the_limit(console: Console) -> None:
    with socket.create_connection(("127.0.0.1", console.port), timeout=10) as sock:
        # never ends its headers: the answer comes when the limit is passed
        sock.sendall(b"GET /api/info HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: "
                     + b"a" * (HEADERS_MAX + 100))
        reply = sock.recv(4096)
    assert reply.startswith(b"HTTP/1.1 431")
    with socket.create_connection(("127.0.0.1", console.port), timeout=10) as sock:
        sock.sendall(b"GET /" + b"a" * (REQUEST_LINE_MAX + 10))
        assert sock.recv(4096).startswith(b"HTTP/1.1 414")


@contextlib.contextmanager
def six_streams(backend: RunnerQ) -> Iterator[tuple[Console, list[Any]]]:
    """A console of 8 connections whose 6 stream slots (2 kept for plain requests) are
    all taken, over two queues; the console and its streams (append more to close
    them too), closed at the end."""
    from tests.test_console_api import Sse

    backend.for_queue("other").enqueue("job", {})
    c = Console(backend, max_connections=8, max_streams=100)
    streams: list[Any] = []
    try:
        for n in range(6):
            streams.append(Sse(c.port, "/api/stream" + ("?queue=other" if n % 2 else "")))
            assert streams[-1].status == 200
        yield c, streams
    finally:
        for stream in streams:
            stream.close()
        c.close()


def test_streams_are_capped_across_queues_with_slots_kept_for_requests(
        backend: RunnerQ) -> None:
    from tests.test_console_api import Sse

    with six_streams(backend) as (c, _streams):
        assert Sse(c.port, "/api/stream?queue=other").status == 503
        status, took = _timed_get(c.port, source="127.0.0.1")
        assert status == 200 and took < 1.0


def test_refused_streams_free_their_connections_for_plain_requests(backend: RunnerQ) -> None:
    from tests.test_console_api import Sse

    with six_streams(backend) as (c, streams):
        # more streams asked for: each refused, and its connection closed, not kept idle
        refused = [Sse(c.port, "/api/stream?queue=other") for _ in range(4)]
        streams += refused
        assert [r.status for r in refused] == [503] * 4
        for r in refused:  # the body, then the end: closed by the console, not kept idle
            r.sock.settimeout(2)
            assert b"too many" in r.file.read()
        status, took = _timed_get(c.port, source="127.0.0.1")
        assert status == 200 and took < 1.0


def test_one_write_per_response(console: Console, monkeypatch: pytest.MonkeyPatch) -> None:
    import socketserver

    writes: list[int] = []
    original = socketserver._SocketWriter.write  # type: ignore[attr-defined]

    def counted(self: Any, data: Any) -> int:
        writes.append(len(data))
        return int(original(self, data))

    monkeypatch.setattr(socketserver._SocketWriter, "write", counted)  # type: ignore[attr-defined]
    conn = http.client.HTTPConnection("127.0.0.1", console.port, timeout=10)
    try:
        for _ in range(3):  # kept alive
            conn.request("GET", "/api/info")
            assert conn.getresponse().read()
    finally:
        conn.close()
    assert len(writes) == 3


def test_a_forged_resume_position_is_bounded_and_pruned() -> None:
    from datetime import timedelta

    from runnerq_cli.backend.views.events import EventCursor
    from runnerq_cli.console.stream import CURSOR_MAX, resume_cursor

    now = datetime.now(UTC)
    future = {f"id{n}": now + timedelta(days=365) for n in range(50)}
    cursor = resume_cursor(EventCursor(now, {"real": now, **future}).encode())
    assert list(cursor.seen) == ["real"]  # the far-future ids pruned
    with pytest.raises(InvalidArgument, match="future"):
        resume_cursor(EventCursor(now + timedelta(days=1)).encode())
    with pytest.raises(InvalidArgument, match="longer"):
        resume_cursor("ec" + "A" * CURSOR_MAX)


def test_a_forged_last_event_id_is_a_400(console: Console) -> None:
    from tests.test_console_api import Sse

    stream = Sse(console.port, "/api/stream", {"Last-Event-ID": "ec" + "A" * 33000})
    assert stream.status == 400
    stream.close()


# ------------------------------------------------------------------ a session, not the token

TOKEN = "correct-horse-battery-staple"


def test_the_cookie_is_a_session_of_this_console_never_the_token(backend: RunnerQ) -> None:
    c = Console(backend, token=TOKEN)
    other = Console(backend, token=TOKEN)
    try:
        code, headers, _ = c.request("GET", f"/?token={TOKEN}")
        cookie = headers["Set-Cookie"]
        assert code == 303 and TOKEN not in cookie
        assert cookie.startswith(f"runnerq_console_{c.port}=")  # named after its port
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
        pair = cookie.split(";")[0]
        assert c.get("/api/info", Cookie=pair)["token"] is True
        # another console of the same host (cookies ignore ports) does not know it
        other.get("/api/info", 401, Cookie=pair.replace(str(c.port), str(other.port)))
        c.get("/api/info", 401, Cookie=f"runnerq_console_{c.port}={TOKEN}")  # not a session
        again = c.request("GET", f"/?token={TOKEN}")[1]["Set-Cookie"].split(";")[0]
        assert again != pair  # a new random id each login
    finally:
        c.close()
        other.close()


@pytest.mark.parametrize(("token", "said"), [
    ("a" * 40, "weak"), ("abab" * 10, "weak"), ("short-but-random-1", "at least 24"),
    ("caf\u00e9-" + "x1y2z3w4" * 3, "printable ASCII"), ("with space " + "q1w2e3r4" * 3,
                                                         "printable ASCII")])
@pytest.mark.parametrize("source", ["environment", "flag"])
def test_a_token_that_is_no_secret_is_refused_at_start(run_cli: Any, token: str,
                                                       said: str, source: str) -> None:
    """From RUNNERQ_CONSOLE_TOKEN it is the environment's error, named so, exit 3 (it was
    exit 2 saying `--token:`, an option not given); from --token, exit 2."""
    if source == "environment":
        refused = run_cli("console", "--port", "0", env={"RUNNERQ_CONSOLE_TOKEN": token})
        code, named = 3, "error: RUNNERQ_CONSOLE_TOKEN: "
    else:
        refused = run_cli("console", "--port", "0", "--token", token)
        code, named = 2, "error: --token: "
    lines = [line for line in refused.stderr.splitlines() if not line.startswith("warning:")]
    assert refused.code == code and len(lines) == 1 and said in lines[0]
    assert lines[0].startswith(named), lines
    assert token not in refused.stderr and refused.stdout == ""


def test_a_host_that_is_no_address_is_not_told_to_change_the_port(run_cli: Any) -> None:
    refused = run_cli("console", "--port", "0", "--host", "no-such-host.invalid",
                      env={"RUNNERQ_CONSOLE_TOKEN": TOKEN})
    assert refused.code == 2 and refused.stderr.count("\n") == 1
    assert "(check --host)" in refused.stderr and "--port" not in refused.stderr


def test_token_file_keeps_it_out_of_ps(run_cli: Any, tmp_path: Any) -> None:
    empty = tmp_path / "empty"
    empty.write_text("\n")
    refused = run_cli("console", "--port", "0", "--token-file", str(empty))
    assert refused.code == 2 and "empty" in refused.stderr
    weak = tmp_path / "weak"
    weak.write_text("z" * 30 + "\n")
    refused = run_cli("console", "--port", "0", "--token-file", str(weak))
    assert refused.code == 2 and refused.stderr.startswith("error: --token-file: ")
    both = run_cli("console", "--port", "0", "--token-file", str(weak), "--token", TOKEN)
    assert both.code == 2 and "once" in both.stderr
    missing = run_cli("console", "--port", "0", "--token-file", str(tmp_path / "nope"))
    assert missing.code == 2 and "--token-file" in missing.stderr


def test_token_file_whose_first_line_is_too_long_is_refused(run_cli: Any,
                                                           tmp_path: Any) -> None:
    """Cut at 4096 bytes, the token would not be the file's: a client sending the whole
    line would be refused with no word why."""
    long = tmp_path / "long"
    long.write_text(TOKEN * (5000 // len(TOKEN) + 1) + "\n")
    refused = run_cli("console", "--port", "0", "--token-file", str(long))
    assert refused.code == 2 and refused.stderr.count("\n") == 1
    assert "longer than 4096 bytes" in refused.stderr and TOKEN not in refused.stderr


def test_token_file_serves_and_token_on_the_command_line_is_warned_of(
        cli_env: dict[str, str], tmp_path: Any) -> None:
    import signal
    import subprocess
    import sys
    import urllib.request

    from tests.waiting import LineReader

    secret = tmp_path / "token"
    secret.write_text(TOKEN + "\n")
    for flags in (["--token-file", str(secret)], ["--token", TOKEN]):
        proc = subprocess.Popen([sys.executable, "-m", "runnerq_cli", "console", "--port", "0",
                                 *flags], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=cli_env)
        try:
            assert proc.stdout is not None and proc.stderr is not None
            first = LineReader(proc.stdout).wait_for(lambda line: "http://" in line, 60)
            url = first.split(": ", 1)[1].strip()
            request = urllib.request.Request(url + "api/info",
                                             headers={"Authorization": f"Bearer {TOKEN}"})
            with urllib.request.urlopen(request, timeout=30) as reply:
                assert json.loads(reply.read())["token"] is True
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(30) == 0
            err = proc.stderr.read()
            assert TOKEN not in err
            assert ("warning: --token on the command line" in err) == (flags[0] == "--token")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _signed_get(port: int, **headers: str) -> tuple[int, float]:
    """A request from the dribblers' own address (the operator shares it on loopback)."""
    started = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10,
                                      source_address=("127.0.0.1", 0))
    try:
        conn.request("GET", "/api/info", headers=headers)
        reply = conn.getresponse()
        reply.read()
        return reply.status, time.monotonic() - started
    finally:
        conn.close()


def test_a_signed_in_operator_is_answered_while_anonymous_clients_hold_their_slots(
        backend: RunnerQ) -> None:
    # Every hold is long here (the kept slots' signed_in_deadline, the address share's
    # request deadline and idle timeout), so that all the clients are there at once
    # however slowly a loaded machine runs the test.
    c = Console(backend, token=TOKEN, max_per_address=4, signed_in_slots=3,
                signed_in_deadline=60.0, request_deadline=60.0, idle_timeout=60.0)
    held: list[socket.socket] = []
    try:
        code, headers, _ = c.request("GET", f"/?token={TOKEN}")
        assert code == 303
        cookie = headers["Set-Cookie"].split(";")[0]
        wait_until(lambda: not c.server._by_address, timeout=5)  # the login's, ended
        held += [_dribbler(c.port) for _ in range(4)]  # the address's share, held
        wait_until(lambda: c.server._by_address.get("127.0.0.1") == 4, timeout=5)
        # anonymous: refused at once; the token or the session's cookie: answered at once
        assert _signed_get(c.port)[0] == 503
        for credentials in ({"Authorization": f"Bearer {TOKEN}"}, {"Cookie": cookie}):
            status, took = _signed_get(c.port, **credentials)
            assert status == 200 and took < 1.0
        # The two signed-in connections leave their kept slots once the server sees them
        # closed: until then a kept slot is theirs, and an anonymous client coming in
        # meanwhile evicts the other anonymous ones (under CI load the three never
        # stood together).
        wait_until(lambda: not c.server._kept, timeout=5)
        # anonymous clients that take the kept slots too are closed to make room
        held += [_dribbler(c.port) for _ in range(3)]
        wait_until(lambda: len(c.server._kept) == 3, timeout=5)
        status, took = _signed_get(c.port, Cookie=cookie)
        assert status == 200 and took < 1.0
        assert c.server._by_address["127.0.0.1"] == 4  # their share untouched
    finally:
        for sock in held:
            sock.close()
        c.close()


def test_kept_slots_hold_an_anonymous_client_briefly_and_none_without_a_token(
        backend: RunnerQ) -> None:
    c = Console(backend, token=TOKEN, max_per_address=1, signed_in_slots=1,
                signed_in_deadline=0.3)
    plain = Console(backend, max_per_address=1)
    held: list[socket.socket] = []
    try:
        held.append(_dribbler(c.port))
        wait_until(lambda: c.server._by_address.get("127.0.0.1") == 1, timeout=5)
        late = _dribbler(c.port)  # in the kept slot, its headers unfinished: cut short
        held.append(late)
        reply = late.recv(200)
        assert reply.startswith(b"HTTP/1.1 408")
        wait_until(lambda: not c.server._kept, timeout=5)
        # a console without a token has no one signed in: past the limits is refused
        held.append(_dribbler(plain.port))
        wait_until(lambda: plain.server._by_address.get("127.0.0.1") == 1, timeout=5)
        assert _signed_get(plain.port)[0] == 503
    finally:
        for sock in held:
            sock.close()
        c.close()
        plain.close()
