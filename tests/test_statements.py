"""backend/store/statements.py: several updates in one `update` command, as a bulk write would.

Against the test server; the retry is shown through a TCP proxy that cuts the
connection carrying the next `update` command (a network error mid-command).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import uuid
from collections.abc import Iterator

import pytest
from pymongo import MongoClient, WriteConcern, monitoring, uri_parser
from pymongo.errors import AutoReconnect, OperationFailure

from runnerq_cli.backend.store.statements import update_statements
from runnerq_cli.errors import WriteUnconfirmed


class Commands(monitoring.CommandListener):
    """The `update` commands a client sent."""

    def __init__(self) -> None:
        self.sent: list[dict] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name == "update":
            self.sent.append(dict(event.command))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


class CuttingProxy:
    """Forwards TCP to the server; `cut(n)` drops the connections carrying the next n
    `update` commands before the server sees them."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.cuts = 0
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def cut(self, times: int) -> None:
        with self.lock:
            self.cuts = times

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            threading.Thread(target=self._pipe, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, False),
                             daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, to_server: bool) -> None:
        try:
            while data := source.recv(65536):
                if to_server and b"\x02update\x00" in data:
                    with self.lock:
                        cut, self.cuts = self.cuts > 0, max(0, self.cuts - 1)
                    if cut:
                        break
                sink.sendall(data)
        except OSError:
            pass
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def collection(server, db_name) -> Iterator:
    client: MongoClient = MongoClient(server.uri, uuidRepresentation="standard")
    col = client[db_name]["statements"]
    col.insert_many([{"_id": i, "n": 0} for i in range(3)])
    yield col
    client.close()


def test_matched_counts_existing_documents_and_errors_come_by_index(collection):
    matched, errors = update_statements(collection, [
        ({"_id": 0}, {"$set": {"n": 1}}, False),
        ({"_id": 99}, {"$set": {"n": 1}}, False),           # matches nothing
        ({"_id": 1, "n": 5}, {"$set": {"n": 1}}, True),      # upsert: a duplicate _id
        ({"_id": 7}, {"$set": {"n": 7}}, True),              # upsert: inserted
        ({"_id": 2}, {"$set": {"n": 2}}, False),
    ])
    assert matched == 2  # the upserted document is not a match
    assert [(e["index"], e["code"]) for e in errors] == [(2, 11000)]
    assert {d["_id"]: d["n"] for d in collection.find()} == {0: 1, 1: 0, 2: 2, 7: 7}


def test_statements_too_large_for_one_command_go_in_several(server, db_name, collection):
    # Three 7 MiB values cannot share a command (16 MiB at most): the driver refuses
    # to send it, and the statements go in parts (as a bulk write would split them);
    # an error keeps its statement's index.
    big = "x" * (7 * 1024 * 1024)
    listener = Commands()
    client: MongoClient = MongoClient(server.uri, event_listeners=[listener])
    try:
        matched, errors = update_statements(client[db_name]["statements"], [
            ({"_id": 0}, {"$set": {"big": big}}, False),
            ({"_id": 1}, {"$set": {"big": big}}, False),
            ({"_id": 2}, {"$set": {"big": big}}, False),
            ({"_id": 1, "n": 5}, {"$set": {"n": 1}}, True),  # a duplicate _id, in the last
        ])
    finally:
        client.close()
    assert matched == 3
    assert [(e["index"], e["code"]) for e in errors] == [(3, 11000)]
    sizes = [len(c["updates"]) for c in listener.sent]  # only what was sent
    assert len(sizes) > 1 and sum(sizes) == 4
    assert collection.count_documents({"big": big}) == 3


def test_the_collections_write_concern_goes_with_the_command(server, db_name, collection):
    listener = Commands()
    client: MongoClient = MongoClient(server.uri, event_listeners=[listener])
    try:
        plain = client[db_name]["statements"]
        update_statements(plain, [({"_id": 0}, {"$set": {"n": 3}}, False)])
        majority = plain.with_options(write_concern=WriteConcern(w="majority"))
        update_statements(majority, [({"_id": 0}, {"$set": {"n": 4}}, False)])
    finally:
        client.close()
    assert "writeConcern" not in listener.sent[0]  # the server's default
    assert listener.sent[1]["writeConcern"] == {"w": "majority"}


def test_a_write_concern_the_server_cannot_meet_is_an_error(collection):
    # A replica set applies the update and reports the concern it could not meet; a
    # server that refuses w: 50 outright (standalone, dev server) cannot show this.
    unmeetable = collection.with_options(write_concern=WriteConcern(w=50, wtimeout=200))
    try:
        update_statements(unmeetable, [({"_id": 0}, {"$set": {"n": 9}}, False)])
    except WriteUnconfirmed as exc:
        assert "writeConcernError" in exc.details
        assert collection.find_one({"_id": 0})["n"] == 9
    except OperationFailure as exc:
        pytest.skip(f"this server refuses the write concern outright: {exc}")
    else:
        pytest.skip("this server ignores write concerns")


def test_a_network_error_is_retried_once_then_raised(server, db_name, collection):
    parsed = uri_parser.parse_uri(server.uri)
    if len(parsed["nodelist"]) != 1 or parsed["username"]:
        pytest.skip("the proxy stands in front of one server without credentials")
    proxy = CuttingProxy(*parsed["nodelist"][0])
    client: MongoClient = MongoClient(f"mongodb://127.0.0.1:{proxy.port}/?directConnection=true",
                                      uuidRepresentation="standard",
                                      serverSelectionTimeoutMS=5000)
    try:
        col = client[db_name]["statements"]
        key = uuid.uuid4().hex
        proxy.cut(1)
        matched, errors = update_statements(col, [({"_id": 0}, {"$set": {"key": key}}, False)])
        assert (matched, errors) == (1, [])
        assert collection.find_one({"_id": 0})["key"] == key
        proxy.cut(2)
        with pytest.raises(AutoReconnect):
            update_statements(col, [({"_id": 1}, {"$set": {"key": key}}, False)])
        assert "key" not in collection.find_one({"_id": 1})
    finally:
        client.close()
        proxy.close()
