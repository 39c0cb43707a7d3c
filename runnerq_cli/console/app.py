"""The console's HTTP server: routes, errors, limits (docs/console.md).

The standard library's ThreadingHTTPServer, one thread per connection, at most
MAX_CONNECTIONS at once: a console serves a few pages, and this keeps
`pip install runnerq-mongo` free of a web framework. Every answer is JSON made
here (errors too: `{"error": "..."}`, never a traceback), with the security
headers of security.py; the URI never appears in one.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlsplit

from runnerq_cli.backend.domain.models import MalformedDocument
from runnerq_cli.backend.domain.outage import unavailable_line
from runnerq_cli.console import observability as obs
from runnerq_cli.console import security
from runnerq_cli.console.actions import ACTIONS, Desk, PreviewExpired
from runnerq_cli.console.endpoints import LIMIT_CAP, OFFSET_CAP, Views, activity_id
from runnerq_cli.console.stream import (
    CLIENT_QUEUE,
    MAX_CLIENTS,
    SharedTail,
    TooManyClients,
    is_idle,
)
from runnerq_cli.errors import InvalidArgument, NotFound, RunnerQError, Unavailable, WrongState

if TYPE_CHECKING:
    from runnerq_cli.backend.api import RunnerQ
    from runnerq_cli.backend.domain.documents import Event
    from runnerq_cli.backend.domain.outage import OutageWatch

LOG = logging.getLogger("runnerq.console")
MAX_CONNECTIONS = 64
MAX_PER_ADDRESS = 16  # connections one client address may hold (a browser uses about 7)
REQUEST_LINE_MAX = 40 * 1024  # a resume position (?cursor=, at most CURSOR_MAX) and a path
HEADERS_MAX = 40 * 1024  # every header line together (Last-Event-ID: the same position)
BODY_MAX = 64 * 1024
IDLE_TIMEOUT = 10.0  # seconds a connection may wait silent for its next request
REQUEST_DEADLINE = 10.0  # seconds from a request's first byte to its last (headers and body)
WRITE_TIMEOUT = 30.0  # seconds a write may wait on a client that does not read
KEEPALIVE_SECONDS = 15.0
SIGNED_IN_SLOTS = 16  # connections kept for requests with the token or a session's cookie
SIGNED_IN_DEADLINE = 2.0  # seconds such a connection has to show its whole request's headers
PLACEHOLDER = (b"<!doctype html><meta charset=utf-8><title>runnerq console</title>"
               b"<p>The console page is not installed; the API is at /api/.</p>")


@dataclass(frozen=True)
class ConsoleConfig:
    """What `runnerq-mongo console` was given (the token stays out of every output)."""

    host: str = "127.0.0.1"
    port: int = 8081
    token: str | None = None
    allow_actions: bool = False
    max_action: int = 1000
    ui: bytes | None = None  # --ui FILE's content; None: ours
    keepalive: float = KEEPALIVE_SECONDS
    poll_interval: float = 0.5
    max_connections: int = MAX_CONNECTIONS
    max_streams: int = MAX_CLIENTS  # across every queue's stream
    client_queue: int = CLIENT_QUEUE
    max_per_address: int = MAX_PER_ADDRESS
    idle_timeout: float = IDLE_TIMEOUT
    request_deadline: float = REQUEST_DEADLINE
    signed_in_slots: int = SIGNED_IN_SLOTS
    signed_in_deadline: float = SIGNED_IN_DEADLINE


def stream_slots(config: ConsoleConfig) -> int:
    """How many streams may be open at once: `max_streams`, leaving a quarter of the
    connections (at least one) to plain requests, so streams never hold every slot."""
    kept = max(1, config.max_connections // 4)
    return max(0, min(config.max_streams, config.max_connections - kept))


class _TooLarge(Exception):
    """The request's headers passed HEADERS_MAX."""


class _DeadlineReader(io.RawIOBase):
    """The connection's bytes, each read bounded by the request's deadline.

    The socket's timeout is per read, so a client sending a byte every few seconds
    would hold its connection forever; here the wait for a request's first byte is
    bounded by `idle_timeout`, and from that byte the whole request (line, headers and
    body) must arrive within `request_deadline` (else TimeoutError: 408 and closed).
    """

    def __init__(self, handler: RequestHandler) -> None:
        self._handler = handler

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        handler = self._handler
        config = handler.server.config
        started = handler.deadline
        wait = config.idle_timeout if started is None else started - time.monotonic()
        if wait <= 0:
            raise TimeoutError("the request did not arrive in time")
        handler.connection.settimeout(wait)
        count: int = handler.connection.recv_into(buffer)
        if started is None and count:
            handler.deadline = time.monotonic() + config.request_deadline
        return count


class _HeaderBudget:
    """The request's reader while its headers are parsed: refuses them as soon as they
    pass HEADERS_MAX (http.client would read 100 lines of 64 KB first)."""

    def __init__(self, inner: Any, budget: int) -> None:
        self._inner = inner
        self._left = budget

    def readline(self, size: int = -1) -> bytes:
        line: bytes = self._inner.readline(min(size, self._left + 1) if size >= 0
                                           else self._left + 1)
        self._left -= len(line)
        if self._left < 0:
            raise _TooLarge()
        return line


class HttpError(Exception):
    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.headers = headers or {}


def to_json(value: Any) -> bytes:
    """JSON that stays inert even if a page puts it in HTML: <, > and & escaped."""
    text = json.dumps(value, ensure_ascii=True, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026").encode()


def our_page() -> bytes:
    try:
        return (resources.files("runnerq_cli.console") / "static" / "index.html").read_bytes()
    except (FileNotFoundError, OSError):
        return PLACEHOLDER


Handler = Callable[["RequestHandler", dict[str, str], dict[str, str]], None]


class ConsoleServer(ThreadingHTTPServer):
    """The server with its shared parts: views and their cache, the tails, the actions."""

    daemon_threads = True
    request_queue_size = 16

    def __init__(self, rq: RunnerQ, config: ConsoleConfig) -> None:
        self.rq = rq
        self.config = config
        self.views = Views(rq)
        self._tails: dict[str, SharedTail] = {}
        self._tails_lock = threading.Lock()
        self.tail = self.tail_of(rq)
        self.desk = Desk(config.max_action)
        page = config.ui if config.ui is not None else our_page()
        self.page = page
        text = page.decode("utf-8", "replace")
        self.page_csp = security.ui_csp(text) if config.ui is not None else security.page_csp(text)
        self._slots = threading.BoundedSemaphore(config.max_connections)
        self._streams = threading.BoundedSemaphore(max(1, stream_slots(config)))
        self._stream_cap = stream_slots(config)
        self._by_address: dict[str, int] = {}
        self._address_lock = threading.Lock()
        # Connections past the limits, kept for signed-in requests (a token console only):
        # socket -> "waiting" (its request not yet read) or "signed-in"; the oldest waiting
        # one is closed to make room (`_evicted`), so anonymous clients never hold them.
        self._kept: dict[Any, str] = {}
        self._evicted: set[Any] = set()
        family = socket.AF_INET6 if ":" in config.host else socket.AF_INET
        self.address_family = family
        super().__init__((config.host, config.port), RequestHandler)
        self.gate = security.Gate(config.token, self.server_address[1], config.host)
        # The database away or stalled (domain/outage.py): a request that fails for it is
        # a failed try of this watch (the command tells it on stderr, since when), and a
        # request answered once the server answered again ends it; None: not told.
        self.outage: OutageWatch | None = None

    def note_failure(self, exc: BaseException) -> None:
        """A request failed: when for want of the database (away, stalled), say so."""
        from runnerq_cli.backend.domain.outage import is_away

        if self.outage is not None and self.outage.answered and is_away(exc):
            self.outage.failed(exc)

    def note_answer(self) -> None:
        """A request answered: the outage is over once the driver has had an answer from
        the server since (a cached view answers without it)."""
        if self.outage is not None and self.outage.away and self.rq.away_since() is None:
            self.outage.succeeded()

    def tail_of(self, rq: RunnerQ) -> SharedTail:
        """The one tail of `rq`'s queue in this process (made on first use, started by its
        first stream)."""
        with self._tails_lock:
            tail = self._tails.get(rq.queue)
            if tail is None:
                tail = SharedTail(rq, poll_interval=self.config.poll_interval,
                                  client_queue=self.config.client_queue,
                                  max_clients=self.config.max_streams)
                self._tails[rq.queue] = tail
            return tail

    @property
    def url(self) -> str:
        address = self.server_address[0]
        host = address.decode() if isinstance(address, bytes) else str(address)
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{self.server_address[1]}/"

    def _refuse(self, request: Any, message: str) -> None:
        body = to_json({"error": message})
        with contextlib.suppress(OSError):
            request.sendall(b"HTTP/1.1 503 Service Unavailable\r\n"
                            b"Content-Type: application/json\r\nConnection: close\r\n"
                            + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        self.shutdown_request(request)

    def _address_taken(self, address: str) -> bool:
        """Count a connection of `address`; False when it holds its share already."""
        with self._address_lock:
            held = self._by_address.get(address, 0)
            if held >= self.config.max_per_address:
                return False
            self._by_address[address] = held + 1
            return True

    def _address_freed(self, address: str) -> None:
        with self._address_lock:
            held = self._by_address.get(address, 1) - 1
            if held <= 0:
                self._by_address.pop(address, None)
            else:
                self._by_address[address] = held

    def process_request(self, request: Any, client_address: Any) -> None:
        address = str(client_address[0])
        refusal = None
        if not self._address_taken(address):
            refusal = "too many connections from this address: try again"
        elif not self._slots.acquire(blocking=False):
            self._address_freed(address)
            refusal = "too many connections: try again"
        if refusal is not None and not self._keep(request):
            self._refuse(request, refusal)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._release(request, address)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._release(request, str(client_address[0]))

    def _keep(self, request: Any) -> bool:
        """Admit `request` to the slots kept for signed-in requests (its first request
        must carry the token or a session within `signed_in_deadline`); when they are
        all taken, the oldest still waiting is closed for it. False: no such slot."""
        if self.gate.token is None or self.config.signed_in_slots <= 0:
            return False
        with self._address_lock:
            if len(self._kept) >= self.config.signed_in_slots:
                oldest = next((s for s, state in self._kept.items() if state == "waiting"),
                              None)
                if oldest is None:
                    return False  # every kept slot serves a signed-in operator
                del self._kept[oldest]
                self._evicted.add(oldest)
                with contextlib.suppress(OSError):
                    oldest.shutdown(socket.SHUT_RDWR)  # its thread sees the end and leaves
            self._kept[request] = "waiting"
            return True

    def kept_state(self, request: Any) -> str | None:
        """"waiting" or "signed-in" for a connection of the kept slots, else None."""
        with self._address_lock:
            if request in self._evicted:
                return "evicted"
            return self._kept.get(request)

    def signed_in(self, request: Any) -> None:
        with self._address_lock:
            if request in self._kept:
                self._kept[request] = "signed-in"

    def _release(self, request: Any, address: str) -> None:
        with self._address_lock:
            if request in self._evicted:
                self._evicted.discard(request)
                return
            if self._kept.pop(request, None) is not None:
                return
        self._slots.release()
        self._address_freed(address)

    def open_stream(self) -> bool:
        """Take one of the streams' slots (shared by every queue); False when none is free."""
        return self._stream_cap > 0 and self._streams.acquire(blocking=False)

    def close_stream(self) -> None:
        self._streams.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        LOG.warning("console: a connection ended with an error")

    def server_close(self) -> None:
        with self._tails_lock:
            tails = list(self._tails.values())
        for tail in tails:
            tail.stop()
        super().server_close()


class RequestHandler(BaseHTTPRequestHandler):
    server: ConsoleServer
    protocol_version = "HTTP/1.1"
    server_version = "runnerq-console"
    sys_version = ""
    timeout = IDLE_TIMEOUT
    disable_nagle_algorithm = True  # one write per response, sent at once
    deadline: float | None = None  # when the request being read must have arrived

    # ------------------------------------------------------------ plumbing

    def version_string(self) -> str:
        return self.server_version  # no Python version in the Server header

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        # The path without its query: `/?token=...` must not reach a log.
        path = urlsplit(getattr(self, "path", "")).path[:200]
        LOG.debug("console: %s %s %s", getattr(self, "command", ""), path, code)

    def log_message(self, format: str, *args: Any) -> None:
        LOG.debug("console: %s", (format % args)[:200].split("?")[0])

    def setup(self) -> None:
        super().setup()
        self.rfile = io.BufferedReader(_DeadlineReader(self))

    def handle_one_request(self) -> None:
        """The standard library's, with our limits: the request line and headers refused
        as soon as they pass them, the whole request within its deadline."""
        kept = self.server.kept_state(self.connection)
        self.deadline = None
        if kept == "waiting":  # a kept slot: the whole request's headers at once
            self.deadline = time.monotonic() + self.server.config.signed_in_deadline
        elif kept == "evicted":
            self.close_connection = True
            return
        try:
            self.raw_requestline = self.rfile.readline(REQUEST_LINE_MAX + 1)
            if len(self.raw_requestline) > REQUEST_LINE_MAX:
                self.requestline = ""
                self.request_version = "HTTP/1.1"
                self.command = ""
                self.send_error(414)
                return
            if not self.raw_requestline:
                self.close_connection = True
                return
            if not self.parse_request():
                return
            if kept is not None and not self._signed_in():
                self.close_connection = True
                self._send(503, to_json({"error": "too many connections: try again"}),
                           "application/json")
                return
            self._dispatch(self.command)
        except TimeoutError:
            self.close_connection = True
            if self.deadline is not None:  # a request begun and not finished in time
                self.request_version = getattr(self, "request_version", "HTTP/1.1") \
                    or "HTTP/1.1"
                self.command = getattr(self, "command", "") or ""
                with contextlib.suppress(OSError):
                    self.send_error(408)
        finally:
            self.deadline = None

    def _signed_in(self) -> bool:
        """Whether this request, on a kept slot, carries the token or a live session (or
        logs in with the token); marks its connection signed in when it does."""
        gate = self.server.gate
        parts = urlsplit(self.path)
        given = dict(parse_qsl(parts.query)).get("token") if parts.path == "/" else None
        if not (gate.allows(self.headers) or gate.is_token(given)):
            return False
        self.server.signed_in(self.connection)
        return True

    def parse_request(self) -> bool:
        reader = self.rfile
        self.rfile = _HeaderBudget(reader, HEADERS_MAX)  # type: ignore[assignment]
        try:
            return super().parse_request()
        except _TooLarge:
            self.send_error(431)
            return False
        finally:
            self.rfile = reader

    def send_error(self, code: int, message: str | None = None,
                   explain: str | None = None) -> None:
        """The standard library's own errors (bad request line, unknown method...), as JSON."""
        self.close_connection = True
        if self.request_version == "HTTP/0.9":  # the line was unreadable: answer in 1.1
            self.request_version = self.protocol_version
        texts = {400: "bad request", 408: "the request did not arrive in time",
                 414: "request line too long", 431: "request headers too large",
                 501: "method not allowed"}
        status = 405 if code == 501 else code
        with contextlib.suppress(OSError):
            self._send(status, to_json({"error": texts.get(code, "bad request")}),
                       "application/json")

    def __getattr__(self, name: str) -> Any:
        # Every method, known or not, goes through the routes: 405 with `Allow`, not 501.
        if name.startswith("do_"):
            return lambda: self._dispatch(name[3:])
        raise AttributeError(name)

    def _send(self, status: int, body: bytes, content_type: str,
              headers: dict[str, str] | None = None, csp: str = security.API_CSP) -> None:
        """The status line, the headers and the body in one write (two writes meet
        Nagle's algorithm and the client's delayed ACK: 40 ms per kept-alive request)."""
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Content-Security-Policy", csp)
        for key, value in {**security.HEADERS, **(headers or {})}.items():
            self.send_header(key, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self._write(b"\r\n", body if self.command != "HEAD" else b"")

    def _write(self, *tail: bytes) -> None:
        """The buffered status line and headers, then `tail`, as one write."""
        buffered: list[bytes] = getattr(self, "_headers_buffer", [])
        self._headers_buffer: list[bytes] = []
        self.connection.settimeout(WRITE_TIMEOUT)
        self.wfile.write(b"".join([*buffered, *tail]))

    def reply(self, value: Any, status: int = 200) -> None:
        self._send(status, to_json(value), "application/json")

    def reply_list(self, items: list[Any], skipped: int) -> None:
        """One of RunnerQ's lists (a bare JSON array, as its page reads it): how many
        records were left out goes in `X-RunnerQ-Skipped`, since the body has no room."""
        self._send(200, to_json(items), "application/json",
                   {"X-RunnerQ-Skipped": str(skipped)})

    # ------------------------------------------------------------ dispatch

    def _dispatch(self, method: str) -> None:
        try:
            if method != "POST" and self.headers.get("Content-Length") not in (None, "0"):
                self.close_connection = True  # a body no route reads: no next request after it
            parts = urlsplit(self.path)
            path = parts.path
            params = dict(parse_qsl(parts.query, keep_blank_values=True))
            if not self.server.gate.host_allowed(self.headers):
                raise HttpError(403, "this console answers only to a loopback host name "
                                     "(localhost, 127.0.0.1): give it a token to serve others")
            if method == "GET" and path == "/" and "token" in params:
                self._login(params["token"])
                return
            if not self.server.gate.allows(self.headers):
                raise HttpError(401, "a token is required: open /?token=... once, or send "
                                     "Authorization: Bearer ...")
            handler, args = route(method, path)
            handler(self, args, params)
            self.server.note_answer()
        except HttpError as exc:
            if self.command == "POST":
                self.close_connection = True  # its body may be unread
            if exc.status == 503:  # refused for want of room: its connection freed too, or
                self.close_connection = True  # refused streams would hold the kept quarter
            self._send(exc.status, to_json({"error": str(exc)}), "application/json",
                       exc.headers)
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            self.close_connection = True
        except Exception as exc:
            self.server.note_failure(exc)
            status, message = failure(exc)
            try:
                self._send(status, to_json({"error": message}), "application/json")
            except OSError:
                self.close_connection = True

    def _login(self, given: str) -> None:
        cookie = self.server.gate.login(given)
        if cookie is None:
            raise HttpError(401, "wrong token")
        self._send(303, b"", "text/plain", {"Location": "/", "Set-Cookie": cookie})

    def body(self) -> dict[str, Any]:
        """The POST's JSON object (bounded, typed, and only from this console's pages)."""
        if not self.server.config.allow_actions:
            raise HttpError(403, "actions are off: start the console with --allow-actions")
        if not security.same_origin(self.headers):
            raise HttpError(403, "cross-origin request refused")
        kind = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        if kind != "application/json":
            raise HttpError(415, "send the body as application/json")
        length_text = self.headers.get("Content-Length")
        if length_text is None:
            raise HttpError(411, "Content-Length is required")
        if not re.fullmatch(r"[0-9]{1,12}", length_text.strip()):  # given, but no length
            self.close_connection = True  # where its body ends is unknown
            raise HttpError(400, "Content-Length is invalid: give the body's length in bytes")
        length = int(length_text.strip())
        if length > BODY_MAX:
            self.close_connection = True
            raise HttpError(413, f"the body is larger than {BODY_MAX} bytes")
        try:
            value = json.loads(self.rfile.read(length) or b"{}")
        except (ValueError, RecursionError):
            raise HttpError(400, "the body is not JSON") from None
        if not isinstance(value, dict):
            raise HttpError(400, "the body must be a JSON object")
        return value

    # ------------------------------------------------------------ pages and streams

    def page(self, args: dict[str, str], params: dict[str, str]) -> None:
        self._send(200, self.server.page, "text/html; charset=utf-8", csp=self.server.page_csp)

    def stream(self, shape: Callable[[Event], dict[str, Any] | None],
               params: dict[str, str]) -> None:
        """SSE: `id:` the position after each event, `data:` the event; keep-alives."""
        last = self.headers.get("Last-Event-ID") or params.get("cursor") or None
        if not self.server.open_stream():
            raise HttpError(503, "too many streams open: try again")
        try:
            tail = self.server.tail_of(self.server.views.backend(params.get("queue")))
            events = tail.subscribe(last)
        except TooManyClients:
            self.server.close_stream()
            raise HttpError(503, "too many streams open: try again") from None
        except BaseException:
            self.server.close_stream()
            raise
        self.close_connection = True
        self.send_response(200)
        for key, value in {"Content-Type": "text/event-stream; charset=utf-8",
                           "Content-Security-Policy": security.API_CSP,
                           "X-Accel-Buffering": "no", "Connection": "close",
                           **security.HEADERS}.items():
            self.send_header(key, value)
        keepalive = self.server.config.keepalive
        try:
            self._write(b"\r\n", b"retry: 1000\n\n")
            written = time.monotonic()
            for event, position in events:
                if is_idle(event, position):
                    if time.monotonic() - written >= keepalive:
                        self.wfile.write(b": keep-alive\n\n")
                        written = time.monotonic()
                    continue
                data = shape(event) if event is not None else None
                chunk = f"id: {position}\n"
                if data is not None:
                    chunk += "data: " + to_json(data).decode() + "\n"
                self.wfile.write((chunk + "\n").encode())
                written = time.monotonic()
        except (OSError, ValueError):
            pass  # the client went away
        except Exception as exc:  # headers are sent: end the stream, the client resumes
            status, _ = failure(exc)
            LOG.warning("console: a stream ended (%d)", status)
        finally:
            events.close()
            self.server.close_stream()


# ------------------------------------------------------------------ errors


def failure(exc: BaseException) -> tuple[int, str]:
    """The status and the one line an exception becomes (the URI never in it)."""
    from runnerq_cli.redaction import redact_uri

    if isinstance(exc, PreviewExpired):
        return 409, "this preview is unknown or expired: preview again"
    if isinstance(exc, NotFound):
        return 404, redact_uri(str(exc))
    if isinstance(exc, MalformedDocument):  # a stored document, not the server, is wrong
        return 422, redact_uri(str(exc))[:300]
    if isinstance(exc, InvalidArgument):
        return 400, redact_uri(str(exc))
    if isinstance(exc, WrongState):
        return 409, redact_uri(str(exc))
    if isinstance(exc, Unavailable):  # since when, once it answered (domain/outage.py)
        return 503, unavailable_line(exc)
    if isinstance(exc, RunnerQError):
        return 500, redact_uri(str(exc))[:300]
    if type(exc).__module__.startswith(("pymongo", "bson")):
        LOG.warning("console: database error: %s", type(exc).__name__)
        return 503, "the database is unavailable"
    LOG.exception("console: internal error")
    return 500, "internal error"


# ------------------------------------------------------------------ routes


def _observability_stats(h: RequestHandler, a: dict[str, str], p: dict[str, str]) -> None:
    h.reply(h.server.views.observability_stats())


def _observability_activities(h: RequestHandler, a: dict[str, str], p: dict[str, str]) -> None:
    key = a["key"]
    try:
        aid = activity_id(key)
    except InvalidArgument:
        if key not in obs.LISTS:
            raise HttpError(400, f"unknown list: use one of {', '.join(obs.LISTS)} "
                                 "or an activity id") from None
        h.reply_list(*h.server.views.observability_list(key, p))
        return
    h.reply(h.server.views.observability_activity(aid))


def _observability_events(h: RequestHandler, a: dict[str, str], p: dict[str, str]) -> None:
    h.reply(h.server.views.observability_events(activity_id(a["id"]), p))


def _observability_result(h: RequestHandler, a: dict[str, str], p: dict[str, str]) -> None:
    h.reply(h.server.views.observability_result(activity_id(a["id"])))


def _observability_dead_letters(h: RequestHandler, a: dict[str, str], p: dict[str, str]) -> None:
    h.reply_list(*h.server.views.observability_dead_letters(p))


def _runnerq_event(event: Event) -> dict[str, Any] | None:
    return obs.event(event) if obs.sendable(event) else None  # RunnerQ's shape carries it


def _our_event(event: Event) -> dict[str, Any] | None:
    data = event.to_json()
    data["activity_type"] = event.activity_type
    return data


def _observability_stream(h: RequestHandler, a: dict[str, str], p: dict[str, str]) -> None:
    h.stream(_runnerq_event, p)


def _stream(h: RequestHandler, a: dict[str, str], p: dict[str, str]) -> None:
    h.stream(_our_event, p)


def _info(h: RequestHandler, a: dict[str, str], p: dict[str, str]) -> None:
    from runnerq_cli import __version__

    config = h.server.config
    h.reply({"version": __version__, "queue": h.server.rq.queue,
             "database": h.server.rq.settings.database, "actions": config.allow_actions,
             "max_action": config.max_action, "token": config.token is not None,
             "offset_cap": OFFSET_CAP, "limit_cap": LIMIT_CAP})


def _view(name: str) -> Handler:
    """A route answering `Views.<name>(params)`."""
    def handler(h: RequestHandler, a: dict[str, str], p: dict[str, str]) -> None:
        h.reply(getattr(h.server.views, name)(p))
    return handler


def _queues(h: RequestHandler, a: dict[str, str], p: dict[str, str]) -> None:
    h.reply(h.server.views.queues())


def _activity(h: RequestHandler, a: dict[str, str], p: dict[str, str]) -> None:
    h.reply(h.server.views.activity(activity_id(a["id"]), p))


def _action(name: str) -> str:
    if name not in ACTIONS:
        raise HttpError(404, f"unknown action: use one of {', '.join(ACTIONS)}")
    return name


def _preview(h: RequestHandler, a: dict[str, str], p: dict[str, str]) -> None:
    action = _action(a["action"])
    body = h.body()
    rq = h.server.views.backend(p.get("queue"))
    h.reply(h.server.desk.preview(rq, action, body))


def _confirm(h: RequestHandler, a: dict[str, str], p: dict[str, str]) -> None:
    action = _action(a["action"])
    body = h.body()
    rq = h.server.views.backend(p.get("queue"))
    h.reply(h.server.desk.confirm(rq, action, body))


def _page(h: RequestHandler, a: dict[str, str], p: dict[str, str]) -> None:
    h.page(a, p)


_SEGMENT = "[^/]+"
_TABLE: list[tuple[str, dict[str, Handler]]] = [
    (r"/", {"GET": _page}),
    (r"/api/observability/stats", {"GET": _observability_stats}),
    (rf"/api/observability/activities/(?P<key>{_SEGMENT})", {"GET": _observability_activities}),
    (rf"/api/observability/activities/(?P<id>{_SEGMENT})/events",
         {"GET": _observability_events}),
    (rf"/api/observability/activities/(?P<id>{_SEGMENT})/result",
         {"GET": _observability_result}),
    (r"/api/observability/dead-letter", {"GET": _observability_dead_letters}),
    (r"/api/observability/stream", {"GET": _observability_stream}),
    (r"/api/info", {"GET": _info}),
    (r"/api/queues", {"GET": _queues}),
    (r"/api/stats", {"GET": _view("stats")}),
    (r"/api/failing", {"GET": _view("failing")}),
    (r"/api/workers", {"GET": _view("workers")}),
    (r"/api/pauses", {"GET": _view("pauses")}),
    (r"/api/schedules", {"GET": _view("schedules")}),
    (r"/api/limits", {"GET": _view("limits")}),
    (r"/api/doctor", {"GET": _view("doctor")}),
    (r"/api/audit", {"GET": _view("audit")}),
    (rf"/api/activity/(?P<id>{_SEGMENT})", {"GET": _activity}),
    (r"/api/search", {"GET": _view("search")}),
    (r"/api/activities", {"GET": _view("activities")}),
    (r"/api/stream", {"GET": _stream}),
    (r"/api/actions/(?P<action>[a-z-]+)/preview", {"POST": _preview}),
    (r"/api/actions/(?P<action>[a-z-]+)", {"POST": _confirm}),
]
ROUTES = [(re.compile(pattern), methods) for pattern, methods in _TABLE]


def route(method: str, path: str) -> tuple[Handler, dict[str, str]]:
    """The handler of `method path` and the path's parts; 404 or 405 (with Allow)."""
    for pattern, methods in ROUTES:
        match = pattern.fullmatch(path)
        if match is None:
            continue
        handler = methods.get(method)
        if handler is None:
            raise HttpError(405, f"method {method[:20]} not allowed here",
                            {"Allow": ", ".join(methods)})
        return handler, match.groupdict()
    raise HttpError(404, "no such route")


def serve(rq: RunnerQ, config: ConsoleConfig) -> ConsoleServer:
    """A bound server (not yet serving: call serve_forever, in a thread or not)."""
    security.check_binding(config.host, config.token)
    if config.ui is not None and config.allow_actions:
        raise InvalidArgument("a page given with --ui may not act: no --allow-actions with it")
    return ConsoleServer(rq, config)
