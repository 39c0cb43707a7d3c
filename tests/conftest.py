"""Test bed: which MongoDB-compatible server the suite talks to (CONTRIBUTING.md, "Test servers").

1. RUNNERQ_TEST_MONGO_URI: that server (a real MongoDB, a replica set, Atlas);
   or RUNNERQ_TEST_MONGO_URIS: several, separated by spaces, one per xdist
   worker (CI's Python 3.11 run: a dev server for each worker).
2. Docker answers: a real MongoDB 8 in a container (a one-node replica set,
   so change streams are exercised too).
3. Otherwise: the local mongoeco wire-protocol server, in this process
   (mongoeco needs Python 3.13 or newer).
4. None of these (say Python 3.11 with no URI and no Docker): every test that
   needs a server is skipped, all with the one reason NO_SERVER below (one line
   in the summary).

Every tier is the real pymongo driver over a real TCP connection. Each test
gets its own database, dropped afterwards.

In parallel (`python -m pytest -n 2`, pytest-xdist) each worker process picks its
server itself: its own mongoeco server (or Docker container), the one server of
RUNNERQ_TEST_MONGO_URI shared by all, or its own of RUNNERQ_TEST_MONGO_URIS (worker
gwN takes the URI at N, round robin); database names carry the worker's id. The
controlling process starts no server.
"""

from __future__ import annotations

import contextlib
import functools
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from pymongo import MongoClient

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.backend.store.connection import close_clients
from runnerq_cli.config import Settings, load_settings
from tests.helpers import partitions_for_tests
from tests.waiting import wait_until


@dataclass(frozen=True)
class TestServer:
    uri: str
    kind: str  # "uri", "docker", "mongoeco"
    shared: bool = False  # other xdist workers send their commands to it too

    @functools.cached_property
    def real_mongodb(self) -> bool:
        """A MongoDB, not the dev server (a URI may point at one: CI's 3.11 run does)."""
        if self.kind == "mongoeco":
            return False
        if self.kind == "docker":
            return True
        from pymongo import MongoClient

        with MongoClient(self.uri, serverSelectionTimeoutMS=5000) as client:
            return client.admin.command("buildInfo").get("gitVersion") != "mongoeco"


_SERVER: TestServer | None = None
_CLEANUP: list = []


def _docker_available() -> bool:
    try:
        import docker

        docker.from_env().ping()
        return True
    except Exception:
        return False


def _start_docker_mongo() -> TestServer:
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.waiting_utils import wait_for_logs

    container = (DockerContainer("mongo:8").with_exposed_ports(27017)
                 .with_command("--replSet rs0 --bind_ip_all"))
    container.start()
    _CLEANUP.append(container.stop)
    wait_for_logs(container, "Waiting for connections", timeout=60)
    host, port = container.get_container_host_ip(), container.get_exposed_port(27017)
    uri = f"mongodb://{host}:{port}/?directConnection=true"
    with MongoClient(uri) as client:
        client.admin.command("replSetInitiate", {"_id": "rs0", "members": [
            {"_id": 0, "host": "localhost:27017"}]})
        wait_until(lambda: client.admin.command("hello").get("isWritablePrimary"),
                   timeout=30, interval=0.2, message="the replica set to elect a primary")
    return TestServer(uri, "docker")


NO_SERVER = (
    "no test server: set RUNNERQ_TEST_MONGO_URI to a MongoDB "
    "(e.g. `docker run -d -p 27017:27017 mongo:8` then "
    "RUNNERQ_TEST_MONGO_URI='mongodb://127.0.0.1:27017/?directConnection=true'), "
    "or start a dev server from a Python 3.13 environment (`runnerq-mongo dev-server "
    "--port 27018`) and point RUNNERQ_TEST_MONGO_URI at the URI it prints; "
    "see CONTRIBUTING.md, 'Test servers'")


def _mongoeco_available() -> bool:
    """mongoeco installs only on Python 3.13+; RUNNERQ_TEST_NO_MONGOECO=1 acts as if absent."""
    import importlib.util

    if os.environ.get("RUNNERQ_TEST_NO_MONGOECO") == "1":
        return False
    return importlib.util.find_spec("mongoeco") is not None


def _start_mongoeco() -> TestServer:
    from runnerq_cli.cli.devserver import start_in_thread

    server = start_in_thread()
    _CLEANUP.append(server.stop)
    return TestServer(server.uri, "mongoeco")


def _listed_uris() -> list[str]:
    return os.environ.get("RUNNERQ_TEST_MONGO_URIS", "").split()


def _worker_number() -> int:
    """N of the xdist worker gwN (0 without xdist)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return int(worker[2:]) if worker[2:].isdigit() else 0


def _worker_count() -> int:
    return int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))


def chosen_server() -> TestServer:
    """The server of the first available tier (kind "none" when there is none)."""
    global _SERVER
    if _SERVER is None:
        uris = _listed_uris()
        if uris:
            _SERVER = TestServer(uris[_worker_number() % len(uris)], "uri",
                                 shared=_worker_count() > len(uris))
        elif os.environ.get("RUNNERQ_TEST_MONGO_URI"):
            _SERVER = TestServer(os.environ["RUNNERQ_TEST_MONGO_URI"], "uri",
                                 shared=_worker_count() > 1)
        elif os.environ.get("RUNNERQ_TEST_NO_DOCKER") != "1" and _docker_available():
            _SERVER = _start_docker_mongo()
        elif _mongoeco_available():
            _SERVER = _start_mongoeco()
        else:
            _SERVER = TestServer("", "none")
    return _SERVER


def _xdist_controller(config: pytest.Config) -> bool:
    """The process that hands tests to xdist workers (it runs none of them itself)."""
    return not hasattr(config, "workerinput") and getattr(config.option, "dist", "no") != "no"


def _planned_kind() -> str:
    """The tier chosen_server() would take, without starting anything."""
    if _listed_uris():
        return "uris"
    if os.environ.get("RUNNERQ_TEST_MONGO_URI"):
        return "uri"
    if os.environ.get("RUNNERQ_TEST_NO_DOCKER") != "1" and _docker_available():
        return "docker"
    return "mongoeco" if _mongoeco_available() else "none"


def pytest_report_header(config: pytest.Config) -> str:
    if _xdist_controller(config):
        kind = _planned_kind()
        from runnerq_cli.redaction import redact_uri

        uri = redact_uri(os.environ.get("RUNNERQ_TEST_MONGO_URI", ""))
        listed = len(_listed_uris())
        each = {"uri": f"the server of RUNNERQ_TEST_MONGO_URI at {uri}, shared by every worker",
                "uris": f"the {listed} servers of RUNNERQ_TEST_MONGO_URIS, one per worker "
                        "(round robin)",
                "docker": "a real MongoDB 8 in Docker (testcontainers), one per worker",
                "mongoeco": "the local mongoeco wire-protocol server, one per worker",
                "none": f"none; tests that need one are skipped ({NO_SERVER})"}
        return f"runnerq test server: {each[kind]}"
    server = chosen_server()
    if server.kind == "none":
        return f"runnerq test server: none; tests that need one are skipped ({NO_SERVER})"
    names = {"uri": "the server of RUNNERQ_TEST_MONGO_URI",
             "docker": "a real MongoDB 8 in Docker (testcontainers)",
             "mongoeco": "the local mongoeco wire-protocol server"}
    from runnerq_cli.redaction import redact_uri

    return f"runnerq test server: {names[server.kind]} at {redact_uri(server.uri)}"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    close_clients()
    for stop in reversed(_CLEANUP):
        with contextlib.suppress(Exception):
            stop()


_NO_SERVER_TESTS: set[str] = set()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """No server at all: skip the tests that need one, all with the one reason NO_SERVER."""
    if chosen_server().kind != "none":
        return
    for item in items:
        if "server" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.skip(reason=NO_SERVER))
            _NO_SERVER_TESTS.add(item.nodeid)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    """Report those skips at one place, so `-ra` folds them into one line, said once."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and item.nodeid in _NO_SERVER_TESTS:
        report.longrepr = (__file__, None, f"Skipped: {NO_SERVER}")


@pytest.fixture(scope="session")
def server() -> TestServer:
    found = chosen_server()
    if found.kind == "none":
        pytest.skip(NO_SERVER)
    return found


@pytest.fixture
def server_to_itself(server: TestServer) -> TestServer:
    """The server, for a test that reads server-wide counters (serverStatus): skipped
    where other xdist workers share it (RUNNERQ_TEST_MONGO_URI with -n), as their
    commands would be counted too. It runs wherever each worker has its own server."""
    if server.shared:
        pytest.skip("reads server-wide counters: needs the server to itself (without -n, "
                    "or one per worker: RUNNERQ_TEST_MONGO_URIS)")
    return server


@pytest.fixture
def db_name(server: TestServer) -> Iterator[str]:
    # The xdist worker's id in the name: on a shared server, whose database is whose.
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    name = f"rq_test_{worker}{'_' if worker else ''}{uuid.uuid4().hex[:10]}"
    yield name
    _dropping_client().drop_database(name)


@functools.cache
def _dropping_client() -> MongoClient:
    """One client for the drops after every test (a new client each time cost ~7 ms of
    CPU per test, in-process on the mongoeco tier)."""
    client: MongoClient = MongoClient(chosen_server().uri)
    _CLEANUP.append(client.close)
    return client


@pytest.fixture
def settings(server: TestServer, db_name: str) -> Settings:
    """Settings for a fresh database; no config file or environment leaks in.

    Timeouts of 30 s, not 5: the mongoeco server runs in this process and shares its
    GIL with the test (and, on a busy machine, the cores with everything else), so a
    heartbeat may wait seconds; pymongo would then drop the pool mid-test
    ("operation cancelled"). Tests of timeouts set their own.
    """
    return load_settings(None, overrides={"uri": server.uri, "database": db_name,
                                          "queue": "tests", "connect_timeout": 30.0,
                                          "server_selection_timeout": 30.0},
                         environ={"RUNNERQ_CONFIG": ""})


class FakeClock:
    """A clock the test moves by hand (backend timing rules without sleeping)."""

    def __init__(self) -> None:
        now = datetime.now(UTC)
        self.now = now.replace(microsecond=now.microsecond // 1000 * 1000)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test marked `partitioned` runs on a queue of 1 partition and of 4 (through the
    `partitions` fixture, which the `queue` and `backend` fixtures use)."""
    if metafunc.definition.get_closest_marker("partitioned") is not None \
            and "partitions" in metafunc.fixturenames:
        metafunc.parametrize("partitions", [1, 4], ids=["p1", "p4"])


@pytest.fixture
def partitions() -> int:
    """The partition count of the fixtures' queue: RUNNERQ_TEST_PARTITIONS (default 1);
    1 and 4 for a test marked `partitioned`."""
    return partitions_for_tests()


def _made(backend: RunnerQ, partitions: int) -> RunnerQ:
    """`backend` with its indexes, of `partitions` partitions."""
    if partitions > 1:
        backend.maintenance.set_partitions(partitions)
    backend.maintenance.init_indexes()
    return backend


@pytest.fixture
def queue(settings: Settings, clock: FakeClock, partitions: int) -> RunnerQ:
    """A backend on a fresh database with indexes, driven by the fake clock."""
    return _made(RunnerQ(settings, clock=clock), partitions)


@pytest.fixture
def backend(settings: Settings, partitions: int) -> RunnerQ:
    """A backend on a fresh database with indexes, on the real clock (workers, processes)."""
    return _made(RunnerQ(settings), partitions)


@pytest.fixture
def cli_env(server: TestServer, db_name: str, tmp_path) -> dict[str, str]:
    """Environment for running the CLI against the test database, isolated from the user's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNNERQ_")}
    env.update(RUNNERQ_MONGO_URI=server.uri, RUNNERQ_DATABASE=db_name, RUNNERQ_QUEUE="tests",
               XDG_CONFIG_HOME=str(tmp_path / "xdg"), NO_COLOR="1", COLUMNS="200",
               # The test server answers one request at a time (shared by the xdist
               # workers on the URI tier): a heartbeat may wait past the 5 s default and
               # the client would drop its pool ("operation cancelled"). Tests of
               # timeouts set their own.
               RUNNERQ_CONNECT_TIMEOUT="30s")
    return env


@dataclass(frozen=True)
class CliResult:
    code: int
    stdout: str
    stderr: str


@pytest.fixture
def run_cli(cli_env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
            capsys: pytest.CaptureFixture[str]):
    """Run `runnerq-mongo ARGS` in this process (fast): real parsing, exit codes, output.

    `input` feeds standard input. Use `run_cli_subprocess` where a real
    process matters (signals, tracebacks, the console script itself).
    """
    import io

    from runnerq_cli.cli.app import main

    def run(*args: str, input: str | None = None, env: dict[str, str] | None = None) -> CliResult:
        for key in [k for k in os.environ if k.startswith("RUNNERQ_")]:
            monkeypatch.delenv(key)
        for key, value in {**cli_env, **(env or {})}.items():
            monkeypatch.setenv(key, value)
        monkeypatch.setattr(sys, "stdin", io.StringIO(input or ""))
        capsys.readouterr()
        code = main(list(args))
        out, err = capsys.readouterr()
        return CliResult(code, out, err)

    return run


@pytest.fixture
def run_cli_subprocess(cli_env: dict[str, str]):
    """Run `python -m runnerq_cli ARGS` as a separate process, as a user would."""

    def run(*args: str, input: str | None = None, env: dict[str, str] | None = None,
            timeout: float = 60) -> CliResult:
        proc = subprocess.run([sys.executable, "-m", "runnerq_cli", *args], input=input,
                              capture_output=True, text=True, timeout=timeout,
                              env={**cli_env, **(env or {})})
        return CliResult(proc.returncode, proc.stdout, proc.stderr)

    return run
