"""The public API as a user imports it, and facts the worker and its registry share."""

from __future__ import annotations

import runnerq_cli
from runnerq_cli.backend.api import RunnerQ


def test_every_public_name_resolves() -> None:
    for name in runnerq_cli.__all__:
        assert getattr(runnerq_cli, name) is not None, name
    assert runnerq_cli.connect is runnerq_cli.backend.api.connect


def test_the_heartbeat_keeps_every_counter_the_worker_keeps(queue: RunnerQ) -> None:
    from runnerq_cli.worker.flights import Flights

    counters, _ = Flights(1, None).snapshot()
    counters = {name: n for n, name in enumerate(counters, start=1)}
    queue.registry.register_worker("w1")
    queue.registry.heartbeat_worker("w1", in_flight=0, counters=counters)
    [entry] = queue.registry.list_workers()
    assert entry.counters == counters  # `released` included
