"""Who may read the console and who may act through it (docs/console.md, "Security").

The console shows a queue's payloads, errors and results: on a loopback address
only the machine's users reach it; anywhere else it needs a token. Browsers
cannot put a header on an EventSource, so the page carries a session: opening
`/?token=...` once trades the token for a random session id kept in this
process (a cookie, HttpOnly, SameSite=Strict, named after the console's port);
the token itself is never stored in the browser, and cookies, which ignore
ports, carry to another port of the host only an id that means nothing there.
Scripts send `Authorization: Bearer`. Actions also need a same-origin request,
so no other site's page can make a visitor's browser act.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import re
import secrets
import threading
import time
from collections.abc import Callable
from typing import Protocol

from runnerq_cli.errors import InvalidArgument

TOKEN_MIN = 24
TOKEN_DISTINCT_MIN = 6  # different characters: `aaaa...` or `abab...` is no secret
SESSIONS_KEPT = 256  # the oldest session is forgotten beyond (its page logs in again)
SESSION_SECONDS = 12 * 3600.0  # a session's life from its login
COOKIE_PREFIX = "runnerq_console_"
_SCRIPT = re.compile(r"<script(?P<attrs>[^>]*)>(?P<body>.*?)</script>", re.S | re.I)



class Headers(Protocol):
    """What is read of a request's headers (http.client.HTTPMessage, a dict)."""

    def get(self, name: str, default: None = None) -> str | None: ...


HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
}
API_CSP = "default-src 'none'; frame-ancestors 'none'"
# A page given with --ui is not ours (RunnerQ's writes fields into innerHTML): only the
# scripts and inline handlers written in the file run, by hash (ui_csp); markup that
# data carries into the page never does. It may not act (--ui with --allow-actions is
# refused at start) and its requests go only to this server.
_HANDLER = re.compile(r"""\son[a-z]+=(?:"(?P<dq>[^"]*)"|'(?P<sq>[^']*)')""", re.I)


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 and `localhost`: reachable from this machine only."""
    name = host.strip().strip("[]")
    if name.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def token_problem(token: str) -> str | None:
    """Why `token` cannot be the console's token, or None: printable ASCII without
    space, quotes, `;`, `,` or `\\` (it travels in a header), TOKEN_MIN long, and
    not made of a few characters repeated."""
    if not all("!" <= c <= "~" for c in token) or any(c in token for c in ";,\"\\'"):
        return ("the console token must be printable ASCII without spaces, quotes, ';', "
                "',' or '\\'")
    if len(token) < TOKEN_MIN:
        return f"the console token must be at least {TOKEN_MIN} characters"
    if len(set(token)) < TOKEN_DISTINCT_MIN:
        return ("the console token is weak (a few characters repeated): use a random one, "
                "such as `openssl rand -hex 16`")
    return None


def check_binding(host: str, token: str | None) -> None:
    """Refuse a non-loopback address without a token, and a token that is no secret."""
    if token is not None:
        problem = token_problem(token)
        if problem is not None:
            raise InvalidArgument(problem)
    if token is None and not is_loopback(host):
        raise InvalidArgument(
            f"{host} is not a loopback address: give a token (token or RUNNERQ_CONSOLE_TOKEN) "
            "so only those who hold it can read the queue")


def _script_hashes(html: str) -> list[str]:
    """The CSP hash of each inline <script> element of `html`."""
    hashes = []
    for match in _SCRIPT.finditer(html):
        if "src=" in match.group("attrs").lower():
            continue
        # The browser hashes the script's text after the parser turned CRLF and CR into LF.
        hashes.append(_hash(match.group("body")))
    return hashes


def _hash(text: str) -> str:
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    digest = hashlib.sha256(text.encode()).digest()
    return f"'sha256-{base64.b64encode(digest).decode()}'"


def page_csp(html: str) -> str:
    """Our page's policy: its own inline scripts by hash, nothing else runs."""
    scripts = " ".join(_script_hashes(html)) or "'none'"
    return (f"default-src 'none'; script-src {scripts}; style-src 'unsafe-inline'; "
            "connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'; "
            "base-uri 'none'; form-action 'none'")


def ui_csp(html: str) -> str:
    """A --ui page's policy: no 'unsafe-inline' script. Its inline <script> elements run
    by hash, and so do the inline handlers written in the file as fixed text
    (`onclick="sortBy('status')"`, by hash with 'unsafe-hashes'); a handler the page
    builds from data (`onclick="copy('${id}')"`) or that data carries in (`<img
    onerror=...>` from a stored field) matches no hash and does not run."""
    handlers = []
    for match in _HANDLER.finditer(html):
        text = match.group("dq") if match.group("dq") is not None else match.group("sq")
        if "${" not in text and "&" not in text:
            handlers.append(_hash(text))
    scripts = _script_hashes(html)
    if handlers:
        scripts += ["'unsafe-hashes'", *dict.fromkeys(handlers)]
    allowed = " ".join(scripts) or "'none'"
    return (f"default-src 'none'; script-src {allowed}; style-src 'unsafe-inline' "
            "https://fonts.googleapis.com; font-src https://fonts.gstatic.com data:; "
            "connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'; "
            "base-uri 'none'; form-action 'none'")


class Gate:
    """The token rule: None lets every request in (a loopback console without a token).

    With a token: `Authorization: Bearer TOKEN`, or the cookie of a session that a
    login with the token opened (sessions live in this process: a restart forgets them).
    """

    def __init__(self, token: str | None, port: int, host: str = "127.0.0.1",
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.token = token
        self.cookie = f"{COOKIE_PREFIX}{port}"
        self.host = host
        self._clock = clock
        self._lock = threading.Lock()
        self._sessions: dict[str, float] = {}  # session id -> when it ends

    def host_allowed(self, headers: Headers) -> bool:
        """Without a token, only requests addressed to this machine by a loopback name.

        A page of another site can point its own name at 127.0.0.1 (DNS rebinding) and
        then read this console as its own origin; its requests carry its name in
        `Host`, which is refused here. With a token, the token is the protection.
        """
        if self.token is not None:
            return True
        value = headers.get("Host")
        if value is None:
            return True  # HTTP/1.0 without Host: no browser sends that
        name = value.strip()
        if name.startswith("["):
            name = name[1:].partition("]")[0]
        elif name.count(":") == 1:
            name = name.partition(":")[0]
        return is_loopback(name) or name == self.host

    def _matches(self, given: str | None) -> bool:
        assert self.token is not None
        return given is not None and hmac.compare_digest(
            given.encode("utf-8", "replace"), self.token.encode())

    def is_token(self, given: str | None) -> bool:
        """Whether `given` is this console's token (False on a console without one)."""
        return self.token is not None and self._matches(given)

    def _session(self, given: str | None) -> bool:
        if not given:
            return False
        with self._lock:
            ends = self._sessions.get(given)
            if ends is None:
                return False
            if ends <= self._clock():
                del self._sessions[given]
                return False
            return True

    def allows(self, headers: Headers) -> bool:
        if self.token is None:
            return True
        auth = headers.get("Authorization") or ""
        if auth.startswith("Bearer ") and self._matches(auth[len("Bearer "):].strip()):
            return True
        return self._session(cookie_value(headers.get("Cookie") or "", self.cookie))

    def login(self, given: str | None) -> str | None:
        """The Set-Cookie value of a new session when `given` (from `?token=`) is the
        token, else None. The cookie holds a random id, never the token."""
        if self.token is None or not self._matches(given):
            return None
        session = secrets.token_urlsafe(32)
        with self._lock:
            now = self._clock()
            for key in [k for k, ends in self._sessions.items() if ends <= now]:
                del self._sessions[key]
            while len(self._sessions) >= SESSIONS_KEPT:
                self._sessions.pop(next(iter(self._sessions)))
            self._sessions[session] = now + SESSION_SECONDS
        return (f"{self.cookie}={session}; HttpOnly; SameSite=Strict; Path=/; "
                f"Max-Age={int(SESSION_SECONDS)}")


def cookie_value(header: str, name: str) -> str | None:
    for part in header.split(";"):
        key, sep, value = part.strip().partition("=")
        if sep and key == name:
            return value
    return None


def same_origin(headers: Headers) -> bool:
    """A request a page of this console made (or a script: no browser headers at all).

    `Sec-Fetch-Site` (sent by every current browser) must say same-origin; `Origin`,
    when present, must name the host the request was sent to.
    """
    site = headers.get("Sec-Fetch-Site")
    if site is not None and site != "same-origin":
        return False
    origin = headers.get("Origin")
    if origin is None:
        return True
    host = headers.get("Host") or ""
    return origin in (f"http://{host}", f"https://{host}")
