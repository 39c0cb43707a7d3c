"""The change-stream test server (nx-27017, CONTRIBUTING "Test servers"): a fixture that
starts one per test, and a database of the test's own on it.

nx-27017 is the one server here that accepts `watch()`; the suite uses it only for the
change-stream paths, asserting what it gets right. Import the fixtures by name.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.database import Database


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def nx_server(tmp_path: Path) -> Iterator[str]:
    """A fresh nx-27017 on a free loopback port (skips when it is not installed)."""
    exe = shutil.which("nx-27017") or str(Path(sys.executable).parent / "nx-27017")
    if not Path(exe).exists():
        pytest.skip("nx-27017 is not installed (pip install nx-27017): no change-stream server")
    port = _free_port()
    proc = subprocess.Popen([exe, "--db", "memory", "--host", "127.0.0.1", "-p", str(port),
                             "--pid-file", str(tmp_path / "nx.pid"),
                             "--log-file", str(tmp_path / "nx.log")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            break
        time.sleep(0.05)
    else:
        proc.kill()
        pytest.skip("nx-27017 did not start")
    yield f"mongodb://127.0.0.1:{port}/?directConnection=true"
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()



@pytest.fixture
def nx(nx_server: str) -> Iterator[Database[dict[str, Any]]]:
    """A database of its own on the test's nx-27017."""
    client: MongoClient[dict[str, Any]] = MongoClient(nx_server, uuidRepresentation="standard",
                                                      tz_aware=True)
    yield client[f"rq_nx_{uuid.uuid4().hex[:6]}"]
    client.close()
