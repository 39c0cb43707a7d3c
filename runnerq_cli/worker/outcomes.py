"""Writing attempts' outcomes: one writer at a time, successes in batches, retried.

The slots and the lease keeper hand outcomes over (`hand_over`); any thread may
then call `write` (a slot after its attempt, the claim loop). The batching is the
project's one group commit (runnerq_cli/group_commit.py): one thread writes at a
time, everything waiting, and loops while more arrives, so nothing handed over is
left behind and nobody waits. This module is the worker's policy on top of it. All
successes go in one `ack_success_many` (two commands however many), failures one by
one. An outcome the server does not take (it is away) is put back and tried again
after a back-off (the claim loop wakes for it), for up to TIMING.ack_retry_for; after
that the lease runs out and the reaper hands the activity to another worker. An
outcome the server refuses is recorded on its own, with an error saying why, and
never holds up the others (`_write_batch`).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from runnerq_cli.backend.domain.error_text import describe
from runnerq_cli.backend.domain.models import AckOutcome
from runnerq_cli.backend.domain.rules import retry_delay
from runnerq_cli.backend.domain.timing import TIMING
from runnerq_cli.errors import CheckpointConflict, ClaimLost, InvalidArgument
from runnerq_cli.errors import retry_later as server_away
from runnerq_cli.group_commit import GroupCommit
from runnerq_cli.worker.logs import (
    LEVELS,
    OUTCOME_LEVEL,
    WORKER_LOGGER,
    attempt_details,
    attempt_message,
    details,
)

if TYPE_CHECKING:
    from runnerq_cli.backend.traits import QueueBackend
    from runnerq_cli.worker.flights import Flight, Flights

log = logging.getLogger(WORKER_LOGGER)
ACK_BACKOFF_FIRST, ACK_BACKOFF_MAX = 0.2, 5.0
OUTCOME_BACKLOG = 2  # outcomes waiting to be written, per slot, before claims wait for them
# The worker counter each acknowledged outcome adds to.
OUTCOME_COUNTERS = {AckOutcome.COMPLETED: "succeeded", AckOutcome.RETRYING: "retried",
                    AckOutcome.FAILED: "failed", AckOutcome.DEAD_LETTERED: "dead_lettered"}
Outcome = tuple[str, Any]  # ("ok", result) | ("fatal", error) | ("retry", error) | PARKED
# A durable handler parked (worker/durable.py): the park ended the claim without counting
# an attempt, so there is nothing to write; the slot is free.
PARKED = "parked"


def log_attempt(flight: Flight, outcome: str, error: str | None,
                retry_in: float | None = None) -> None:
    """The record of a finished attempt (worker/logs.py); `retry_in` a retry's back-off.
    Every settled attempt comes here (or to `_give_up`): its metrics and span end here."""
    if flight.watch is not None:
        flight.watch.ended(outcome)
    level = LEVELS[OUTCOME_LEVEL.get(outcome, "info")]
    if not log.isEnabledFor(level):  # one record per attempt: build nobody's text
        return
    act = flight.claim.activity
    ended = flight.finished or time.monotonic()
    args = (outcome, act.activity_type, act.id, act.retry_count + 1,
            ended - flight.started, error, retry_in)
    log.log(level, attempt_message(*args), extra=attempt_details(*args))


def brief(exc: BaseException) -> str:
    """`Class: message`, one line, bounded, whatever the exception (error_text.py)."""
    return describe(exc)


class OutcomeWriter:
    """The outcomes waiting to be written, and the one thread writing them."""

    def __init__(self, backend: QueueBackend, flights: Flights, force: threading.Event) -> None:
        self._backend = backend
        self._flights = flights
        self._force = force  # stopping at once: give up on unwritten outcomes
        # The outcomes handed over and not yet written; held during a back-off.
        self._waiting: GroupCommit[tuple[Flight, Outcome]] = GroupCommit(self._write_batch)
        self._backoff = ACK_BACKOFF_FIRST
        self._backlogged = False  # claims held back for outcomes to be written

    # ---------------------------------------------------------- for claimers

    def backlogged(self) -> bool:
        """Outcomes are written more slowly than handlers finish: claim nothing until
        they are (a claim's lease is not renewed once it has finished).

        Counted again once the claimer is noted as held back: a writer that took the
        backlog between the first count and the note found no claimer to wake, and the
        claim loop would sleep a poll interval with nothing waiting."""
        backlog = OUTCOME_BACKLOG * self._flights.concurrency
        if len(self._waiting) < backlog:
            return False
        self._backlogged = True
        return len(self._waiting) >= backlog

    def retry_pending(self) -> bool:
        """A failed write waits for its back-off (the server is away)."""
        return self._waiting.held()

    def sleep_bound(self, seconds: float) -> float | None:
        """How long the claim loop may sleep while outcomes wait: `seconds`, or less
        until the next retry, or None for no sleep (outcomes wait and nobody writes)."""
        retry_in = self._waiting.held_for()
        if len(self._waiting) and retry_in > 0:
            return min(seconds, retry_in)
        if len(self._waiting) and not self._waiting.writing:
            return None
        return seconds

    # ------------------------------------------------------------- writing

    def hand_over(self, flight: Flight, outcome: Outcome) -> bool:
        """Settle the attempt with this outcome, to be written, unless it was settled
        elsewhere; True if it was handed over."""
        if not self._flights.take(flight):
            return False
        flight.finished = time.monotonic()
        if outcome[0] == PARKED:
            self._flights.drop(flight)
            log_attempt(flight, PARKED, None)
            self._flights.wake.set()  # room to claim
            return True
        self._waiting.hand_over((flight, outcome))
        return True

    def write(self, for_at_most: float | None = None) -> None:
        """Write the outcomes handed over, unless another thread is writing them."""
        self._waiting.write(for_at_most)

    def write_now(self) -> None:
        """At shutdown: write what is waiting at once, back-off or not (after a slot's
        write in progress): an outcome not written now would run the activity again."""
        self._waiting.flush()

    def _write_batch(self, batch: list[tuple[Flight, Outcome]]) -> None:
        """Write a batch; while the server is away, keep the rest for _retry_later.

        An outcome the server refuses never holds up the others: a refused result
        (backend: answered alone, InvalidArgument) is recorded as a non-retryable
        failure saying why, a refused failure once more with a short text
        (`_ack_failure`); one that cannot be written at all is given up and counted
        (`unacknowledged`): its lease runs out and the reaper requeues it.
        """
        successes = [(flight, outcome) for flight, outcome in batch if outcome[0] == "ok"]
        failures = [(flight, outcome) for flight, outcome in batch if outcome[0] != "ok"]
        away: Exception | None = None
        unwritten: list[tuple[Flight, Outcome]] = []
        if successes:
            try:
                answers: list[Any] = self._backend.ack_success_many(
                    [(flight.claim, outcome[1]) for flight, outcome in successes])
            except Exception as exc:  # the server is away (the backend answers refusals
                # claim by claim): try nothing more now
                away, answers = exc, [exc] * len(successes)
            for (flight, outcome), answer in zip(successes, answers, strict=True):
                if answer is away or (isinstance(answer, Exception) and server_away(answer)):
                    away = away or answer
                    unwritten.append((flight, outcome))
                elif isinstance(answer, InvalidArgument):  # the result cannot be stored
                    failures.append((flight, ("fatal", describe(answer, with_class=False))))
                elif isinstance(answer, ClaimLost | CheckpointConflict):
                    self._written(flight, outcome, ClaimLost(str(answer)))
                elif isinstance(answer, Exception):
                    failures.append((flight, ("fatal", "the result could not be stored: "
                                              + describe(answer))))
                else:
                    self._written(flight, outcome, answer)
        for flight, outcome in failures:
            if away is not None:
                unwritten.append((flight, outcome))
                continue
            try:
                self._ack_failure(flight, outcome)
            except Exception as exc:
                away = exc
                unwritten.append((flight, outcome))
        if away is not None:
            self._retry_later(unwritten, away)
        else:
            self._backoff = ACK_BACKOFF_FIRST
        if self._backlogged:
            self._backlogged = False
            self._flights.wake.set()  # the claim loop may claim again

    def _ack_failure(self, flight: Flight, outcome: Outcome) -> None:
        """Record a failed attempt; raises only while the server is away. A failure the
        server refuses is recorded once more with a short text saying so; refused again,
        it is given up (counted `unacknowledged`, logged)."""
        text, refusal = str(outcome[1]), None
        for _ in range(2):
            try:
                answer = self._backend.ack_failure(flight.claim, text,
                                                   retryable=outcome[0] != "fatal")
            except ClaimLost as exc:
                self._written(flight, outcome, exc)
                return
            except Exception as exc:
                if server_away(exc):
                    raise
                refusal = exc
                text = f"the failure could not be recorded: {describe(exc)}"
                continue
            self._written(flight, (outcome[0], text), answer)
            return
        self._give_up(flight, refusal or RuntimeError("refused"))

    def _give_up(self, flight: Flight, error: BaseException) -> None:
        if flight.watch is not None:
            flight.watch.ended("unacknowledged")
        self._flights.drop(flight)
        self._flights.count("unacknowledged")
        log.error("could not acknowledge; the reaper will requeue it when its lease expires",
                  extra=details(activity_id=str(flight.claim.activity_id), error=brief(error)))

    def _written(self, flight: Flight, outcome: Outcome,
                 answer: AckOutcome | ClaimLost) -> None:
        """Count and log an outcome the server took (or refused as a lost claim)."""
        self._flights.drop(flight)
        if isinstance(answer, ClaimLost):
            self._flights.count("claims_lost")
            log_attempt(flight, "claim_lost",
                        "claim lost: the activity was reclaimed; outcome dropped")
            return
        self._flights.count(OUTCOME_COUNTERS[answer])
        log_attempt(flight, answer.value, None if outcome[0] == "ok" else outcome[1],
                    self._back_off(flight) if answer is AckOutcome.RETRYING else None)

    def _back_off(self, flight: Flight) -> float:
        """The back-off the backend gave this retry: the same rule (rules.retry_delay) on
        the same snapshot (the claim's retry_count) and setting, so the log can say when
        the next attempt is due without another read."""
        act = flight.claim.activity
        return retry_delay(act.retry_delay_seconds, act.retry_count,
                           self._backend.settings.max_retry_delay)

    def _retry_later(self, unwritten: list[tuple[Flight, Outcome]],
                     error: BaseException) -> None:
        now = time.monotonic()
        keep = []
        for flight, outcome in unwritten:
            flight.ack_give_up = flight.ack_give_up or now + TIMING.ack_retry_for
            if now >= flight.ack_give_up or self._force.is_set():
                self._give_up(flight, error)
            else:
                keep.append((flight, outcome))
        self._waiting.put_back(keep)
        self._waiting.hold(now + self._backoff)
        self._backoff = min(self._backoff * 2, ACK_BACKOFF_MAX)
