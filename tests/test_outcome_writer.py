"""The worker's outcome writer (runnerq_cli/worker/outcomes.py) on the group commit, with
a backend of its own (no server): every outcome handed over is written once, whoever
writes, through outages and back-offs; a claim loop held back for a backlog is woken."""

from __future__ import annotations

import collections
import random
import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest

import runnerq_cli.worker.outcomes as outcomes
from runnerq_cli.backend.domain.models import AckOutcome
from runnerq_cli.errors import Unavailable
from runnerq_cli.group_commit import GroupCommit
from runnerq_cli.worker.flights import Flight, Flights


class Backend:
    """Takes acknowledgements, or is away for a share of the calls (seeded)."""

    def __init__(self, seed: int, away: float) -> None:
        self._rnd = random.Random(seed)
        self._away = away
        self._lock = threading.Lock()
        self.acked: collections.Counter[str] = collections.Counter()
        self.settings = SimpleNamespace(max_retry_delay=60)

    def _answers(self) -> bool:
        with self._lock:
            return self._rnd.random() >= self._away

    def ack_success_many(self, acks: list[tuple[Any, Any]]) -> list[AckOutcome]:
        if not self._answers():
            raise Unavailable("away")
        with self._lock:
            self.acked.update(claim.lease_id for claim, _ in acks)
        return [AckOutcome.COMPLETED] * len(acks)

    def ack_failure(self, claim: Any, error: str, *, retryable: bool = True) -> AckOutcome:
        if not self._answers():
            raise Unavailable("away")
        with self._lock:
            self.acked[claim.lease_id] += 1
        return AckOutcome.RETRYING if retryable else AckOutcome.FAILED


def flight(flights: Flights, lease: str) -> Flight:
    activity = SimpleNamespace(activity_type="t", id=lease, retry_count=0,
                               retry_delay_seconds=1)
    claim = SimpleNamespace(lease_id=lease, activity_id=lease, activity=activity)
    one = Flight(claim, None, SimpleNamespace(), started=time.monotonic(),  # type: ignore[arg-type]
                 timeout_at=0.0, next_renew=0.0, lease_ends=0.0)
    flights.add(one)
    return one


@pytest.fixture
def quick_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(outcomes, "ACK_BACKOFF_FIRST", 0.001)
    monkeypatch.setattr(outcomes, "ACK_BACKOFF_MAX", 0.004)


def test_a_backlog_written_while_the_claimer_looked_wakes_it() -> None:
    # The claim loop counts the outcomes waiting; a writer takes and writes them all
    # before the loop notes that it is held back for them. Nothing then wakes the loop
    # (the writer looked for a held-back claimer before there was one): it slept a whole
    # poll interval with nothing waiting and every slot idle.
    flights = Flights(1, None)
    writer = outcomes.OutcomeWriter(Backend(0, away=0.0), flights,  # type: ignore[arg-type]
                                    threading.Event())
    for lease in ("a", "b"):  # OUTCOME_BACKLOG per slot
        writer.hand_over(flight(flights, lease), ("ok", None))

    class WrittenMeanwhile(GroupCommit[Any]):
        def __len__(self) -> int:
            waiting = super().__len__()
            self.__class__ = GroupCommit  # once: the writer gets in between, then as usual
            writer.write()
            return waiting

    writer._waiting.__class__ = WrittenMeanwhile
    flights.wake.clear()
    assert not writer.backlogged() or flights.wake.is_set()
    assert len(flights) == 0


@pytest.mark.usefixtures("quick_backoff")
@pytest.mark.parametrize("seed", range(10))
def test_outcomes_from_many_threads_are_written_once_each_through_outages(seed: int) -> None:
    # Slots hand over and write, a claim loop writes within its bound and sleeps as
    # sleep_bound says, the backend is away for a fifth of the calls (put back, held):
    # at the end (write_now, as at shutdown) each outcome was taken exactly once.
    backend = Backend(seed, away=0.2)
    flights = Flights(4, None)
    writer = outcomes.OutcomeWriter(backend, flights,  # type: ignore[arg-type]
                                    threading.Event())
    stop = threading.Event()
    start = threading.Barrier(7)

    def claim_loop() -> None:
        start.wait()
        while not stop.is_set():
            flights.wake.clear()
            writer.write(for_at_most=0.001)
            writer.backlogged()
            bound = writer.sleep_bound(0.005)
            if bound is not None:
                flights.wake.wait(bound)

    def slot(k: int) -> None:
        start.wait()
        rnd = random.Random(k)
        for j in range(100):
            outcome = ("ok", j) if rnd.random() < 0.7 else ("retry", "boom")
            writer.hand_over(flight(flights, f"{k}-{j}"), outcome)
            writer.write()

    threads = [threading.Thread(target=slot, args=(k,)) for k in range(6)]
    loop = threading.Thread(target=claim_loop)
    for thread in [loop, *threads]:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    stop.set()
    flights.wake.set()
    loop.join(timeout=30)
    deadline = time.monotonic() + 10
    while len(flights) and time.monotonic() < deadline:
        writer.write_now()
    assert len(flights) == 0 and flights.counters["unacknowledged"] == 0
    assert sorted(backend.acked) == sorted(f"{k}-{j}" for k in range(6) for j in range(100))
    assert set(backend.acked.values()) == {1}
