"""RunnerQ's conformance scenarios (runnerq/runnerq-spec 0.8.0, `conformance/scenarios/`,
all 44), restated in tests/conformance/scenarios/ and played through our driver
(`python -m runnerq_cli.conformance`, in processes of its own, as RunnerQ's runner starts
an SDK's driver) on the test server. Every expectation is checked on the documents the
driver wrote, through docs/design.md's mapping of the spec's columns
(tests/conformance/mapping.py), and every stored event against the spec's events schema
(tests/conformance/events_schema.py). The mixed scenarios run two drivers at once.

One pytest case per scenario, named after it. Two drivers per test process, started once
and reused: each scenario `open`s a fresh queue in its own database, as the spec's runner
gives each scenario a fresh queue.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from pymongo import MongoClient

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.config import Settings
from tests.conformance.driver_process import DriverProcess, driver_env
from tests.conformance.mapping import ScenarioLoader
from tests.conformance.player import Player

SCENARIOS = Path(__file__).parent / "conformance" / "scenarios"
SPEC_VERSION = "0.8.0"

# Where our backend differs from the spec on purpose or by design, found by these
# scenarios: the check stays as the spec says, the case is expected to fail (strict: it
# must fail, so a fix shows), and the reason says which of the two documents decides.
# None at 0.8: the DeadLetter event's `reason` and the reaper's record of the expired
# claim were added when these scenarios found them missing.
DIFFERENCES: dict[str, str] = {}
# The drain: 120 activities claimed by two driver processes racing (about 5 s of CPU on
# the in-process test server): a race proof, run once in CI (CONTRIBUTING.md, "CI").
PROOFS = ("mixed/concurrent-claimers-never-overlap",)


def _scenarios() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted(SCENARIOS.glob("*/*.yaml")):
        scenario = yaml.load(path.read_text(), ScenarioLoader)
        found.append((f"{path.parent.name}/{path.stem}", scenario))
    return found


def _cases() -> Iterator[Any]:
    for name, scenario in _scenarios():
        marks: list[Any] = [pytest.mark.slow]  # each plays through driver processes
        if name in PROOFS:
            marks.append(pytest.mark.proof)
        if name in DIFFERENCES:
            marks.append(pytest.mark.xfail(reason=DIFFERENCES[name], strict=True))
        yield pytest.param(scenario, id=name, marks=marks)


class Drivers:
    """The test process's drivers, started on first use and kept for every scenario."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.started: dict[str, DriverProcess] = {}

    def get(self, name: str) -> DriverProcess:
        if name not in self.started or self.started[name].proc.poll() is not None:
            self.started[name] = DriverProcess(name, self.env)
        return self.started[name]

    def stop(self) -> None:
        for driver in self.started.values():
            driver.stop()


@pytest.fixture(scope="session")
def conformance_drivers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Drivers]:
    drivers = Drivers(driver_env(str(tmp_path_factory.mktemp("conformance-xdg"))))
    yield drivers
    drivers.stop()


def _driver_names(steps: list[dict[str, Any]]) -> list[str]:
    """The drivers a scenario uses: `first` always, and those its steps name (`by`)."""
    names = ["first"]
    for step in steps:
        verb = next(iter(step))
        by = step[verb].get("by") if verb in ("submit_many", "drain") else step.get("by")
        for name in [by] if isinstance(by, str) else by or []:
            if name not in names:
                names.append(name)
    return names


@pytest.mark.parametrize("scenario", list(_cases()))
def test_scenario(scenario: dict[str, Any], conformance_drivers: Drivers,
                  settings: Settings, server: Any) -> None:
    spec = scenario["spec"]
    assert spec["version"] == SPEC_VERSION and spec["file"] and spec["commit"]
    queue = "cf_" + uuid.uuid4().hex[:8]
    drivers = {name: conformance_drivers.get(name) for name in _driver_names(
        scenario["steps"])}
    for driver in drivers.values():
        reply = driver.call("open", {"dsn": server.uri, "queue": queue,
                                     "database": settings.database}, timeout=120)
        assert reply == {"ok": {}}, f"open: {reply}{driver.log()}"
    views = RunnerQ(replace(settings, queue=queue))
    client: MongoClient[Any] = MongoClient(server.uri, uuidRepresentation="standard",
                                           tz_aware=True)
    try:
        Player(drivers, client[settings.database], queue, views).play(scenario["steps"])
    finally:
        client.close()


def test_every_scenario_of_the_spec_is_restated() -> None:
    """44 at 0.8.0: ack 4, claim 4, durable 13, failure 5, idempotency 6, lease 4,
    mixed 3, retention 5; each names the spec file it restates, in its own area."""
    counts: dict[str, int] = {}
    for name, scenario in _scenarios():
        area = name.split("/")[0]
        counts[area] = counts.get(area, 0) + 1
        assert scenario["spec"]["file"] == name + ".json"
        assert scenario["about"].strip()
    assert counts == {"ack": 4, "claim": 4, "durable": 13, "failure": 5, "idempotency": 6,
                      "lease": 4, "mixed": 3, "retention": 5}
