"""Acknowledgements (docs/design.md, "Results", "The rules"): a claim ends in a success
(its result written first, then the activity) or a failure (retried after a back-off,
failed, or dead-lettered), each fenced on the claim; a repeat of the same answer is
answered as the first was, anything else is a lost claim or a checkpoint conflict.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from pymongo import ReturnDocument

from runnerq_cli.backend.domain.documents import Claim
from runnerq_cli.backend.domain.error_text import describe, error_text
from runnerq_cli.backend.domain.event_types import EventType
from runnerq_cli.backend.domain.models import AckOutcome, Status
from runnerq_cli.backend.domain.partitions import term as partition_term
from runnerq_cli.backend.domain.results import checked_result, same_value
from runnerq_cli.backend.domain.rules import attempts_remain, retry_delay
from runnerq_cli.backend.domain.waits import WAKE_UPDATE, waiting_on
from runnerq_cli.backend.queue.attempt_writes import (
    LEASE_FIELDS,
    UNAWAITED,
    awaited,
    checkpoint_conflict,
    claim_lost,
    dead_letter_update,
    ended_attempt,
    err_result,
    flush_projection,
    held_by,
)
from runnerq_cli.backend.queue.flow_claims import free_claims
from runnerq_cli.backend.store.context import Part
from runnerq_cli.backend.store.failures import DUPLICATE_KEY, server_away
from runnerq_cli.backend.store.servertime import server_update, write_time
from runnerq_cli.backend.store.stamps import stamp
from runnerq_cli.backend.store.statements import Statement, update_statements
from runnerq_cli.backend.store.writes import merge_updates, new_event, outbox_update
from runnerq_cli.errors import ClaimLost, InvalidArgument
from runnerq_cli.group_commit import Answers

ACK_OUTCOMES = frozenset(o.value for o in AckOutcome)


class Acknowledgements(Part):
    """The answers of a claim's attempt: `ack_success` (grouped across threads),
    `ack_success_many`, `ack_failure`."""

    def ack_success(self, claim: Claim, result: Any = None) -> AckOutcome:
        """Complete the claimed activity and store its result (None is a result too).

        Concurrent calls from several threads share their round trips
        (runnerq_cli/group_commit.py, the group commit the worker's outcome
        writer uses too; it calls `ack_success_many` itself): a success costs
        the activity one write and the results collection one, and stores no
        event (Completed and ResultStored are derived from completed_at).
        """
        group = self._ctx.success_acks
        if group is None:
            group = self._ctx.success_acks = Answers(self.ack_success_many)
        return group.submit((claim, result))

    def ack_success_many(self, acks: Sequence[tuple[Claim, Any]],
                         ) -> list[AckOutcome | Exception]:
        """`ack_success` for many claims in two commands; one outcome (or error) each.

        Order (docs/design.md, "Results"): the result is written first, fenced
        on the claim number so an older claim never replaces a newer claim's
        result; then the activity, fenced on the lease. A crash in between
        leaves a result that readers ignore (its lease is not the activity's
        last acknowledged one) and that the next attempt replaces.

        A result that is not one (results.py: not JSON, too large...) is answered with
        InvalidArgument before anything is sent; a batch the server refuses as a whole
        is tried again claim by claim, so one refused result never costs the others
        (a server that cannot be reached raises, for the caller to try again).
        """
        answers: list[AckOutcome | Exception | None] = [None] * len(acks)
        checked: list[tuple[int, tuple[Claim, Any]]] = []
        for i, (claim, result) in enumerate(acks):
            try:
                checked.append((i, (claim, checked_result(result))))
            except InvalidArgument as exc:
                answers[i] = exc
        try:
            got = self._ack_checked([ack for _, ack in checked]) if checked else []
        except Exception as exc:
            if server_away(exc):
                raise
            got = ([self._ack_alone(ack) for _, ack in checked] if len(checked) > 1
                   else [InvalidArgument(f"the result cannot be stored: {describe(exc)}")])
        for (i, _), answer in zip(checked, got, strict=True):
            answers[i] = answer
        return [a for a in answers if a is not None]

    def _ack_alone(self, ack: tuple[Claim, Any]) -> AckOutcome | Exception:
        try:
            return self._ack_checked([ack])[0]
        except Exception as exc:
            if server_away(exc):
                raise
            return InvalidArgument(f"the result cannot be stored: {describe(exc)}")

    def _ack_checked(self, acks: Sequence[tuple[Claim, Any]]) -> list[AckOutcome | Exception]:
        """ack_success_many of results already checked."""
        now = self._ctx.clock()
        refused = self._write_results(acks, now)
        answers: list[AckOutcome | Exception | None] = [refused.get(i) for i in range(len(acks))]
        todo = [i for i in range(len(acks)) if answers[i] is None]
        if not todo:
            return [a for a in answers if a is not None]
        # A claim of an activity nothing waited on when it was claimed is fenced on that
        # too (`awaited` absent): one marked meanwhile misses here and is completed below,
        # with its wake (docs/design.md, "Waking"). A plain success sends no wake.
        statements: list[Statement] = [
            ({**held_by(acks[i][0]), **({} if awaited(acks[i][0]) else UNAWAITED)},
             self._completion(acks[i][0], now), False) for i in todo]
        matched = update_statements(self._ctx.activities, statements)[0]
        woken = [acks[i][0].activity_id for i in todo if awaited(acks[i][0])]
        for i in todo:
            if matched == len(todo):
                answers[i] = AckOutcome.COMPLETED
                continue
            claim = acks[i][0]
            try:  # some were not held as read: marked awaited, a repeat, or a lost claim
                if not awaited(claim) and self._ctx.activities.update_one(
                        held_by(claim), server_update(self._completion(claim, now))
                ).matched_count:
                    woken.append(claim.activity_id)
                    answers[i] = AckOutcome.COMPLETED
                    continue
                answers[i] = self._repeat_or_lost(claim, AckOutcome.COMPLETED, acks[i][1])
            except ClaimLost as exc:
                answers[i] = exc
        if woken:
            self._ctx.activities.update_many(waiting_on(woken), WAKE_UPDATE)
        free_claims(self._ctx, [acks[i][0] for i in todo
                                if answers[i] is AckOutcome.COMPLETED])  # limited: slots free
        return [a for a in answers if a is not None]

    def _completion(self, claim: Claim, now: datetime) -> dict[str, Any]:
        """A success's activity update; completed_at is stamped by the server as the update
        lands (a tail reads by it)."""
        return merge_updates({
            "$set": {"status": Status.COMPLETED.value, "last_lease_id": claim.lease_id,
                     "last_worker_id": claim.worker_id,
                     "last_outcome": AckOutcome.COMPLETED.value},
            "$unset": LEASE_FIELDS}, stamp(self._ctx.clock, now, "completed_at"))

    def _write_results(self, acks: Sequence[tuple[Claim, Any]],
                       now: datetime) -> dict[int, Exception]:
        """Upsert each claim's result unless a newer claim's is there; the refused ones."""
        writes: list[Statement] = [(
            {"_id": claim.activity_id, "claim": {"$not": {"$gte": claim.number}}},
            {"$set": {"activity_id": claim.activity_id, "state": "Ok", "data": result,
                      "created_at": now, "claim": claim.number, "lease_id": claim.lease_id}},
            True) for claim, result in acks]
        errors = update_statements(self._ctx.results, writes)[1]
        if not errors:
            return {}
        refused: dict[int, Exception] = {}
        held = [e["index"] for e in errors if e.get("code") == DUPLICATE_KEY]
        for error in errors:
            if error.get("code") != DUPLICATE_KEY:
                refused[error["index"]] = InvalidArgument(
                    f"the result cannot be stored: {error.get('errmsg', 'refused')}")
        if held:
            stored = {doc["_id"]: doc for doc in self._ctx.results.find(
                {"_id": {"$in": [acks[i][0].activity_id for i in held]}},
                {"lease_id": 1, "data": 1})}
            for i in held:
                claim, result = acks[i]
                doc = stored.get(claim.activity_id) or {}
                # The same claim saying the same again is a repeat, saying something else
                # a checkpoint conflict (the first value stays); another claim's: lost.
                if doc.get("lease_id") != claim.lease_id:
                    refused[i] = claim_lost(claim)
                elif not same_value(doc.get("data"), result):
                    refused[i] = checkpoint_conflict(claim)
        return refused

    def ack_failure(self, claim: Claim, error: str, *, retryable: bool = True) -> AckOutcome:
        """Record a failed attempt: retry after a back-off, fail, or dead-letter.

        Exactly one event records the attempt: `Retrying`, `Failed` or
        `DeadLetter`. Attempts are judged on the claim's snapshot of
        `retry_count`, which cannot change while the claim is held.
        """
        now = write_time(self._ctx.clock)  # the server's, as the update lands
        act = claim.activity
        aid, wid = act.id, claim.worker_id
        error = error_text(str(error))
        attempt = {"error": error, "attempt": act.retry_count + 1, "started_at": act.started_at}
        common = {"last_error": error, "last_error_at": now, "last_lease_id": claim.lease_id,
                  "last_worker_id": wid}
        if not retryable:
            outcome = AckOutcome.FAILED
            failed = new_event(aid, act.activity_type, EventType.FAILED.value, now, wid,
                               retryable=False, **attempt)
            update = merge_updates(
                {"$set": {**common, "status": Status.FAILED.value, "completed_at": now,
                          "last_outcome": outcome.value}, "$unset": LEASE_FIELDS},
                outbox_update(now, [failed],
                              result=err_result(error, "non_retryable", now, claim.number)),
            )
        elif attempts_remain(act.retry_count, act.max_retries):
            outcome = AckOutcome.RETRYING
            delay = retry_delay(act.retry_delay_seconds, act.retry_count,
                                self._ctx.settings.max_retry_delay)
            due = now + timedelta(seconds=delay)
            state: dict[str, Any] = {**common, "last_outcome": outcome.value}
            unset = {**LEASE_FIELDS, "started_at": ""}  # it has not started again
            if delay > 0:
                state.update(status=Status.SCHEDULED.value, scheduled_at=due)
            else:  # due now: a scheduled_at of an earlier back-off would only mislead
                state.update(status=Status.PENDING.value)
                unset["scheduled_at"] = ""
            retrying = new_event(aid, act.activity_type, EventType.RETRYING.value, now, wid,
                                 delay_seconds=float(delay), scheduled_at=due,
                                 retry_count=act.retry_count + 1, **attempt)
            retrying["detail"]["previous_scheduled_at"] = act.scheduled_at
            update = merge_updates(
                {"$set": state, "$unset": unset, "$inc": {"retry_count": 1}},
                outbox_update(now, [*ended_attempt(claim), retrying]),
            )
        else:
            outcome = AckOutcome.DEAD_LETTERED
            update = dead_letter_update(act, error, now, wid, claim.lease_id)
        return self._acknowledge(claim, update, outcome)

    def _acknowledge(self, claim: Claim, update: dict[str, Any], outcome: AckOutcome,
                     result: Any = None) -> AckOutcome:
        doc = self._ctx.activities.find_one_and_update(
            held_by(claim), server_update(update), projection=flush_projection(update),
            return_document=ReturnDocument.AFTER)
        if doc is None:
            return self._repeat_or_lost(claim, outcome, result)
        self._ctx.outbox.submit(doc)
        free_claims(self._ctx, [claim])  # a limited claim's slot frees (flow_claims.py)
        return outcome

    def _repeat_or_lost(self, claim: Claim, outcome: AckOutcome, result: Any) -> AckOutcome:
        """A repeated ack of the same claim answers as the first did, if it says the same.

        The same outcome (and for a success the same result) is harmless; a
        success repeated with another result is a checkpoint conflict (the
        first result stays); anything else, or a claim that was never
        acknowledged, is a lost claim: never silently dropped.
        """
        done = self._ctx.activities.find_one(
            {"_id": claim.activity_id, **partition_term(claim.activity.partition),
             "last_lease_id": claim.lease_id}, {"last_outcome": 1})
        if done is not None and done.get("last_outcome") in ACK_OUTCOMES:
            first = AckOutcome(done["last_outcome"])
            if first is AckOutcome.COMPLETED and outcome is AckOutcome.COMPLETED:
                stored = self._ctx.results.find_one(
                    {"_id": claim.activity_id, "lease_id": claim.lease_id}, {"data": 1})
                if stored is not None and same_value(stored.get("data"), result):
                    return first
                if stored is not None:
                    raise checkpoint_conflict(claim)
            elif first is not AckOutcome.COMPLETED and outcome is not AckOutcome.COMPLETED:
                return first
        raise claim_lost(claim)
