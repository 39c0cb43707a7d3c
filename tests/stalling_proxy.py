"""A TCP proxy to the test server that never forwards some commands: a slow server.

The handshake and every other command pass through, so the client has reached
the server; a command whose name is in `stall` is read and dropped, and its
client waits for an answer until its socket timeout; one in `slow` is forwarded
`delay` seconds late (a server that answers, slowly); after `stall_everything()`
nothing is answered (a server stopped midway); between `hold()` and `release()` every
message is held, then forwarded in order (a server stopped with `kill -STOP` and
continued: the requests sent meanwhile are read and answered late, the connections
stay open). OP_MSG framing: a 16-byte
header, 4 bytes of flags, a section kind byte, then the command document, whose
first element's name is the command's.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from typing import Any
from urllib.parse import urlsplit


def _command_name(message: bytes) -> str:
    if len(message) < 27 or struct.unpack_from("<i", message, 12)[0] != 2013:  # OP_MSG
        return ""
    end = message.find(b"\x00", 26)
    return message[26:end].decode("latin-1") if end > 0 else ""


def _read_message(sock: socket.socket) -> bytes | None:
    head = b""
    while len(head) < 4:
        chunk = sock.recv(4 - len(head))
        if not chunk:
            return None
        head += chunk
    length = struct.unpack("<i", head)[0]
    body = head
    while len(body) < length:
        chunk = sock.recv(length - len(body))
        if not chunk:
            return None
        body += chunk
    return body


class StallingProxy:
    """127.0.0.1:port -> the server of `uri`; commands named in `stall` get no answer."""

    def __init__(self, uri: str, stall: set[str], slow: set[str] | None = None,
                 delay: float = 0.0) -> None:
        parts = urlsplit(uri)
        self.target = (parts.hostname or "127.0.0.1", parts.port or 27017)
        self.stall = stall
        self.slow = slow or set()
        self.delay = delay
        self.stalled: list[str] = []
        self.everything = False  # stall_everything(): no command is answered any more
        self._flowing = threading.Event()  # cleared by hold(): messages wait, none lost
        self._flowing.set()
        self.held = 0  # messages that waited for release()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._closing = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def uri(self, original: str) -> str:
        parts = urlsplit(original)
        netloc = parts.netloc.rsplit("@", 1)
        auth = netloc[0] + "@" if len(netloc) == 2 else ""
        return parts._replace(netloc=f"{auth}127.0.0.1:{self.port}").geturl()

    def _accept(self) -> None:
        while not self._closing.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            threading.Thread(target=self._upstream, args=(client, server), daemon=True).start()
            threading.Thread(target=self._downstream, args=(server, client), daemon=True).start()

    def _upstream(self, client: socket.socket, server: socket.socket) -> None:
        try:
            while (message := _read_message(client)) is not None:
                name = _command_name(message)
                if name in self.stall or self.everything:
                    self.stalled.append(name)
                    continue  # read, never forwarded: no answer comes
                if name in self.slow:
                    time.sleep(self.delay)
                if not self._flowing.is_set():
                    self.held += 1
                    self._flowing.wait()
                server.sendall(message)
        except OSError:
            pass
        finally:
            server.close()

    def _downstream(self, server: socket.socket, client: socket.socket) -> None:
        try:
            while chunk := server.recv(65536):
                client.sendall(chunk)
        except OSError:
            pass
        finally:
            client.close()

    def stall_everything(self) -> None:
        """From now on no command gets an answer, the driver's checks included: a server
        that stopped (`kill -STOP`) in the middle of a run."""
        self.everything = True

    def hold(self) -> None:
        """From now on every message waits here, the driver's checks and new connections'
        handshakes included: a server alive but not answering (stopped, swapping, a
        stalled disk). Nothing is dropped and no connection is closed."""
        self._flowing.clear()

    def release(self) -> None:
        """The held messages go on, in order, and so does everything after them."""
        self._flowing.set()

    def close(self) -> None:
        self._flowing.set()
        self._closing.set()
        self.listener.close()


def _command(message: bytes) -> dict[str, Any]:
    """The command document of an OP_MSG (its kind-0 section), decoded."""
    import bson

    length = struct.unpack_from("<i", message, 21)[0]
    return bson.decode(message[21:21 + length])


def _reply(request: bytes, document: dict[str, Any]) -> bytes:
    """An OP_MSG answering `request` with `document` (flags 0, one kind-0 section)."""
    import bson

    body = struct.pack("<I", 0) + b"\x00" + bson.encode(document)
    request_id = struct.unpack_from("<i", request, 4)[0]
    return struct.pack("<iiii", 16 + len(body), 0x5EED, request_id, 2013) + body


class AnsweringProxy(StallingProxy):
    """As StallingProxy, but a command for which `answer(message)` returns a reply
    document is answered by the proxy itself and never reaches the server."""

    def __init__(self, uri: str) -> None:
        super().__init__(uri, set())

    def answer(self, message: bytes) -> dict[str, Any] | None:
        return None

    def _upstream(self, client: socket.socket, server: socket.socket) -> None:
        try:
            while (message := _read_message(client)) is not None:
                reply = self.answer(message)
                if reply is not None:
                    client.sendall(_reply(message, reply))
                    continue
                server.sendall(message)
        except OSError:
            pass
        finally:
            server.close()


class InterruptingProxy(AnsweringProxy):
    """The first `times` `update` commands on the collection named `collection` are
    answered by the proxy itself, as a server shutting down answers a batch: ok, nothing
    written, a write error with code 11600 (InterruptedAtShutdown)."""

    def __init__(self, uri: str, collection: str, times: int) -> None:
        super().__init__(uri)
        self.collection = collection
        self.left = times
        self.interrupted = 0

    def answer(self, message: bytes) -> dict[str, Any] | None:
        if (self.left > 0 and _command_name(message) == "update"
                and _command(message).get("update") == self.collection):
            self.left -= 1
            self.interrupted += 1
            return {"ok": 1.0, "n": 0, "nModified": 0, "writeErrors": [
                {"index": 0, "code": 11600, "errmsg": "interrupted at shutdown"}]}
        return None


# Commands a server stepping down still answers: the handshake, monitoring, auth.
_STEPDOWN_ANSWERED = {"hello", "isMaster", "ismaster", "ping", "buildInfo", "buildinfo",
                      "saslStart", "saslContinue", "endSessions", ""}
_WRITES = {"insert", "update", "delete", "findAndModify", "createIndexes", "dropIndexes",
           "drop", "create", "collMod", "commitTransaction", "abortTransaction"}


class SteppingDownProxy(AnsweringProxy):
    """`step_down(seconds)` makes it answer, for that long, every command as a replica
    set member that is no longer primary does: a write with NotWritablePrimary (10107),
    anything else with NotPrimaryNoSecondaryOk (13435), the handshake and monitoring
    passed through. Nothing refused reaches the server, as nothing a stepped-down
    member refuses is applied. A one-server stand-in for a primary's stepdown (the
    public workflow steps a real one down)."""

    def __init__(self, uri: str) -> None:
        super().__init__(uri)
        self.refusing_until = 0.0
        self.refused: dict[str, int] = {}
        self.answering = "member"

    def step_down(self, seconds: float, *, answering: str = "member") -> str:
        """`answering`: "member", a member no longer primary ("not primary"); "mongos",
        a mongos whose shard has no primary (FailedToSatisfyReadPreference, 133, for
        every command); "unreached", a mongos that lost its network to a shard
        (HostUnreachable, 6); "shutdown", a server on its way down (ShutdownInProgress, 91,
        which pymongo counts as "not primary" too: also what a standalone answers)."""
        self.answering = answering
        self.refusing_until = time.monotonic() + seconds
        return "stepped down"

    def answer(self, message: bytes) -> dict[str, Any] | None:
        name = _command_name(message)
        if time.monotonic() >= self.refusing_until or name in _STEPDOWN_ANSWERED:
            return None
        self.refused[name] = self.refused.get(name, 0) + 1
        if self.answering == "mongos":
            return {"ok": 0.0, "code": 133, "codeName": "FailedToSatisfyReadPreference",
                    "errmsg": "Could not find host matching read preference "
                              "{ mode: \"primary\" } for set s1"}
        if self.answering == "unreached":
            return {"ok": 0.0, "code": 6, "codeName": "HostUnreachable",
                    "errmsg": "Connection refused calling s1/127.0.0.1:27101"}
        if self.answering == "shutdown":
            return {"ok": 0.0, "code": 91, "codeName": "ShutdownInProgress",
                    "errmsg": "The server is in quiesce mode and will shut down"}
        if name in _WRITES:
            return {"ok": 0.0, "code": 10107, "codeName": "NotWritablePrimary",
                    "errmsg": "not primary"}
        return {"ok": 0.0, "code": 13435, "codeName": "NotPrimaryNoSecondaryOk",
                "errmsg": "not primary and secondaryOk=false"}
