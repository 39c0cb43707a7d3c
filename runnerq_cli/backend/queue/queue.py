"""The queue side of docs/design.md ("Operations", "The rules"): claim, acknowledge,
leases, results; enqueueing is enqueueing.py's, reached through `ActivityQueue.enqueuer`.

Every state change is one atomic update of the activity document, fenced
where a claim is involved; what it must also write elsewhere travels in the
document's outbox (see `writes.py`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

from pymongo import ReturnDocument

from runnerq_cli.backend.domain import queries
from runnerq_cli.backend.domain.derived import attempt_events
from runnerq_cli.backend.domain.error_text import describe, error_text
from runnerq_cli.backend.domain.keys import ORPHAN_KEY_GRACE as ORPHAN_KEY_GRACE  # re-exported
from runnerq_cli.backend.domain.models import (
    TERMINAL_STATUSES,
    AckOutcome,
    Activity,
    Claim,
    EventType,
    Result,
    Status,
    check_fields,
    parse_activity_id,
)
from runnerq_cli.backend.domain.partitions import term as partition_term
from runnerq_cli.backend.domain.partitions import term_of
from runnerq_cli.backend.domain.results import checked_result, same_value
from runnerq_cli.backend.domain.rules import attempts_remain, retry_delay
from runnerq_cli.backend.domain.specs import ActivitySpec as ActivitySpec  # re-exported
from runnerq_cli.backend.domain.waits import AWAITED, WAKE_UPDATE, waiting_on
from runnerq_cli.backend.queue.aside import TYPE_MISMATCH, checked, set_aside, set_aside_unclaimable
from runnerq_cli.backend.queue.enqueueing import Enqueuer
from runnerq_cli.backend.queue.pending_types import PendingTypes
from runnerq_cli.backend.store.changes import ChangeWake
from runnerq_cli.backend.store.connection import server_away
from runnerq_cli.backend.store.driver import DUPLICATE_KEY
from runnerq_cli.backend.store.servertime import ServerTime, When, server_update, write_time
from runnerq_cli.backend.store.statements import Statement, update_statements
from runnerq_cli.backend.store.writes import (
    merge_updates,
    new_event,
    outbox_update,
    stamp,
)
from runnerq_cli.errors import (
    CheckpointConflict,
    ClaimLost,
    CommandFailed,
    InvalidArgument,
)
from runnerq_cli.group_commit import Answers

ACK_OUTCOMES = frozenset(o.value for o in AckOutcome)
LEASE_FIELDS = {"worker_id": "", "lease_id": "", "lease_deadline": ""}
# What a claim returns: the activity without the bookkeeping of earlier attempts, nor the
# lease fields the claim itself just wrote (the claimer knows them: fewer bytes back). An
# outbox (rarely there: an operator's action not copied yet) comes back to be checked: the
# attempt's outcome must be writable into it (aside.py).
CLAIM_PROJECTION = {"last_lease_id": 0, "last_outcome": 0, "last_worker_id": 0,
                    "status": 0, "worker_id": 0, "lease_id": 0, "lease_deadline": 0}
# What a reader of a result relies on (MalformedDocument otherwise).
RESULT_TYPES: dict[str, tuple[type, ...]] = {"state": (str,),
                                             "created_at": (datetime, type(None))}
# What an acknowledgement returns: only what the outbox flush needs.
OUTBOX_PROJECTION = {"outbox": 1, "activity_type": 1, AWAITED: 1, "parent_activity_id": 1}


class ActivityQueue(Enqueuer):
    """Producer and worker operations on one queue: enqueue (enqueueing.Enqueuer), claim,
    acknowledge, leases, results, and the outbox buffer their writes go through."""

    _pending_types: PendingTypes | None = None  # claims around paused types (made on use)
    # The last dequeue of a partitioned queue found every partition empty: the next one
    # asks once whether any has work before claiming partition by partition.
    _all_dry = False

    # ------------------------------------------------------------------ claim

    def dequeue(self, worker_id: str, *, types: Iterable[str] | None = None, limit: int = 1,
                lease_seconds: float | None = None,
                exclude_types: Iterable[str] | None = None,
                on_claim: Callable[[Claim], None] | None = None) -> list[Claim]:
        """Claim up to `limit` pending activities in claim order.

        Each claim is one atomic findOneAndUpdate, so two claimers never get
        the same activity. `types` limits the claim to those activity types;
        `exclude_types` leaves those out (paused types, control.py).
        `on_claim` is called with each claim as soon as it is made (a worker
        starts the handler while the next claim travels).
        """
        if limit < 1:
            raise InvalidArgument("limit must be at least 1")
        present: list[str] = []
        if exclude_types and not types:  # around paused types: name the claimable ones
            if self._pending_types is None:
                self._pending_types = PendingTypes()
            present = self._pending_types.claimable(self._ctx.activities, exclude_types)
            if not present:
                return []  # nothing pending beyond the paused types
        count = self._ctx.partitions.current()
        claimable = queries.claim(types, exclude_types, present)
        if count > 1 and self._all_dry:
            probe = queries.claimable_anywhere(count, types, exclude_types, present)
            if self._ctx.activities.find_one(probe.filter, {"_id": 1}) is None:
                return []  # still idle: one command, not one empty claim per partition
        lease = timedelta(seconds=_lease_seconds(lease_seconds, self._ctx.settings.lease))
        claims: list[Claim] = []
        dry: set[int] = set()  # partitions this call found empty: not asked again
        partition = None
        while len(claims) < limit:  # an activity set aside (malformed) takes no place
            if count > 1:  # one partition per claim, in rotation (docs/design.md)
                if len(dry) >= count:
                    break
                partition = self._ctx.partitions.claims.take(count)
                if partition in dry:
                    continue
                claimable = queries.claim(types, exclude_types, present, partition=partition)
            now = write_time(self._ctx.clock)
            lease_id = uuid.uuid4().hex
            deadline = now + lease  # the server's $$NOW + lease (servertime.py)
            # No event is stored: Dequeued/Started are derived from started_at (derived.py),
            # stamped by the server as the claim lands (a tail reads by it).
            try:
                doc = self._ctx.activities.find_one_and_update(
                    claimable.filter, server_update(merge_updates(
                        {"$set": {"status": Status.PROCESSING.value, "worker_id": worker_id,
                                  "lease_id": lease_id, "lease_deadline": deadline},
                         "$inc": {"claims": 1}},
                        stamp(self._ctx.clock, now, "started_at"))),
                    projection=CLAIM_PROJECTION, sort=claimable.sort_list,
                    return_document=ReturnDocument.AFTER)
            except CommandFailed as exc:  # a `claims` that is not a number (aside.py)
                if exc.code != TYPE_MISMATCH or not set_aside_unclaimable(
                        self._ctx, claimable, worker_id):
                    raise
                continue
            if doc is None:
                if partition is not None:
                    dry.add(partition)
                    continue
                break
            if isinstance(deadline, ServerTime):  # one $$NOW for both: started_at + lease
                deadline = deadline.after(doc["started_at"])
            stored_deadline = deadline.replace(microsecond=deadline.microsecond // 1000 * 1000)
            doc = {**doc, "status": Status.PROCESSING.value, "worker_id": worker_id,
                   "lease_id": lease_id, "lease_deadline": stored_deadline}  # as written
            activity, problem = checked(doc)
            if activity is None:  # never run, never left running: set aside
                set_aside(self._ctx, doc, str(problem),
                          _held_by_lease(doc["_id"], lease_id, term_of(doc)),
                          worker_id, lease_id, "claim")
                continue
            claim = Claim(activity, lease_id, worker_id, deadline)
            claims.append(claim)
            if on_claim is not None:
                on_claim(claim)
        if count > 1:
            self._all_dry = not claims and len(dry) >= count
        return claims

    def watch_claimable(self, types: Iterable[str], on_change: Callable[[], None],
                        max_await: float = 1.0) -> ChangeWake:
        """A wake-up (store/changes.py) calling `on_change` when work may have become
        claimable for `types` (() for any); not opened yet: `open()` says whether the
        server offers change streams (docs/design.md, "Idle workers and change streams")."""
        return ChangeWake(self._ctx.activities, queries.claimable_changes(types), on_change,
                          max_await=max_await, name="runnerq-wake")

    def watch_pauses(self, on_change: Callable[[], None], max_await: float = 1.0) -> ChangeWake:
        """A wake-up calling `on_change` when the pause document changes (a pause, a
        resume): an idle worker that obeys a pause stays on its streams instead of polling
        for the resume, which changes no activity. Not opened yet, as watch_claimable."""
        return ChangeWake(self._ctx.control, queries.pause_changes(), on_change,
                          max_await=max_await, name="runnerq-pause-wake")

    # ------------------------------------------------------------ acknowledge

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
            ({**_held_by(acks[i][0]), **({} if awaited(acks[i][0]) else UNAWAITED)},
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
                        _held_by(claim), server_update(self._completion(claim, now))
                ).matched_count:
                    woken.append(claim.activity_id)
                    answers[i] = AckOutcome.COMPLETED
                    continue
                answers[i] = self._repeat_or_lost(claim, AckOutcome.COMPLETED, acks[i][1])
            except ClaimLost as exc:
                answers[i] = exc
        if woken:
            self._ctx.activities.update_many(waiting_on(woken), WAKE_UPDATE)
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
                    refused[i] = _claim_lost(claim)
                elif not same_value(doc.get("data"), result):
                    refused[i] = _checkpoint_conflict(claim)
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
                              result=_err(error, "non_retryable", now, claim.number)),
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
                outbox_update(now, [*self._ended_attempt(claim), retrying]),
            )
        else:
            outcome = AckOutcome.DEAD_LETTERED
            update = dead_letter_update(act, error, now, wid, claim.lease_id)
        return self._acknowledge(claim, update, outcome)

    @staticmethod
    def _ended_attempt(claim: Claim) -> list[dict[str, Any]]:
        """The attempt's derived Dequeued/Started, stored because `started_at` is cleared."""
        act = claim.activity
        if act.started_at is None:
            return []
        return attempt_events(act.id, act.activity_type, act.started_at, claim.worker_id,
                              act.retry_count + 1, claim.lease_deadline)

    def _acknowledge(self, claim: Claim, update: dict[str, Any], outcome: AckOutcome,
                     result: Any = None) -> AckOutcome:
        doc = self._ctx.activities.find_one_and_update(
            _held_by(claim), server_update(update), projection=flush_projection(update),
            return_document=ReturnDocument.AFTER)
        if doc is None:
            return self._repeat_or_lost(claim, outcome, result)
        self._ctx.outbox.submit(doc)
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
                    raise _checkpoint_conflict(claim)
            elif first is not AckOutcome.COMPLETED and outcome is not AckOutcome.COMPLETED:
                return first
        raise _claim_lost(claim)

    def extend_lease(self, claim: Claim, seconds: float | None = None) -> bool:
        """Move the lease deadline to now + `seconds`; False if this claim already ended.

        Raises ClaimLost if the activity was reclaimed by someone else.
        """
        now = write_time(self._ctx.clock)
        deadline = now + timedelta(seconds=_lease_seconds(seconds, self._ctx.settings.lease))
        event = new_event(claim.activity_id, claim.activity.activity_type,
                          EventType.LEASE_EXTENDED.value, now, claim.worker_id,
                          lease_deadline=deadline)
        doc = self._ctx.activities.find_one_and_update(
            _held_by(claim),
            server_update(merge_updates({"$set": {"lease_deadline": deadline}},
                                        outbox_update(now, [event]))),
            projection=OUTBOX_PROJECTION, return_document=ReturnDocument.AFTER)
        if doc is not None:
            self._ctx.outbox.submit(doc)
            return True
        if self._ctx.activities.count_documents(
            {"_id": claim.activity_id, **partition_term(claim.activity.partition),
             "last_lease_id": claim.lease_id}, limit=1
        ):
            return False
        raise _claim_lost(claim)

    def release(self, claim: Claim, reason: str = "released by worker") -> bool:
        """Give a held activity back to the queue without counting an attempt.

        Used at shutdown for work that could not finish; False if not held.
        """
        now = write_time(self._ctx.clock)
        event = new_event(claim.activity_id, claim.activity.activity_type,
                          EventType.REQUEUED.value, now, claim.worker_id, reason=reason,
                          started_at=claim.activity.started_at)
        doc = self._ctx.activities.find_one_and_update(
            _held_by(claim),
            server_update(merge_updates(
                {"$set": {"status": Status.PENDING.value},
                 "$unset": {**LEASE_FIELDS, "started_at": ""}},
                outbox_update(now, [*self._ended_attempt(claim), event]))),
            projection=OUTBOX_PROJECTION, return_document=ReturnDocument.AFTER)
        self._ctx.outbox.submit(doc)
        return doc is not None

    # --------------------------------------------------------------- results

    def store_result(self, activity_id: uuid.UUID | str, data: Any, state: str = "Ok") -> None:
        """Upsert a result directly (ack_success already stores the handler's result);
        InvalidArgument for a value that cannot be a result (results.checked_result)."""
        if state not in ("Ok", "Err"):
            raise InvalidArgument("result state must be Ok or Err")
        aid = parse_activity_id(activity_id)
        data = checked_result(data)
        now = self._ctx.clock()
        self._ctx.results.replace_one(
            {"_id": aid}, {"_id": aid, "activity_id": aid, "state": state, "data": data,
                           "created_at": now}, upsert=True)

    def get_result(self, activity_id: uuid.UUID | str) -> Result | None:
        """The result of the activity's last run, or None when there is none (yet).

        Only a terminal activity has a result: one stored for an activity that
        is pending, scheduled or running again, or was cancelled (only a waiting
        activity can be), belongs to a run an operator retried, and is not
        shown. A result still in the activity's outbox comes first: it is
        visible from the moment the activity is acknowledged.
        A success's result is written just before its acknowledgement, with
        the claim's lease: it counts only once that claim was acknowledged
        (a crash or a lost claim in between leaves one that is not shown).
        An activity no longer there (aged out) keeps its stored result until
        the results TTL.
        """
        aid = parse_activity_id(activity_id)
        activity = self._ctx.activities.find_one(
            {"_id": aid}, {"status": 1, "outbox.result": 1, "last_lease_id": 1,
                           "last_outcome": 1})
        if activity is not None and activity.get("status") not in TERMINAL_STATUSES:
            return None
        if activity is not None and activity.get("status") == "cancelled":
            # Cancelled before it ran again: a stored result is a retried run's.
            return None
        doc = ((activity or {}).get("outbox") or {}).get("result")
        if doc is None:
            doc = self._ctx.results.find_one({"_id": aid})
            if doc is None:
                return None
            lease = doc.get("lease_id")
            if activity is not None and lease is not None and (
                    lease != activity.get("last_lease_id")
                    or activity.get("last_outcome") != AckOutcome.COMPLETED.value):
                return None  # a success nobody acknowledged (a crash, a stale claim)
        check_fields(doc, RESULT_TYPES, "result", ("state",))  # another program's, maybe
        return Result(aid, doc["state"], doc.get("data"), doc.get("created_at"))

    # ------------------------------------------------------------- the outbox

    @contextmanager
    def buffered_outbox(self, size: int = 64, *, drain: bool = True) -> Iterator[None]:
        """Batch outbox copies (events, results) for throughput inside the block.

        On exit the buffer is drained, unless `drain` is False (a worker stopped
        at once leaves it to the repair: the copies are safe in the documents).
        """
        previous = self._ctx.outbox.buffer_size
        self._ctx.outbox.buffer_size = size
        try:
            yield
        finally:
            self._ctx.outbox.buffer_size = previous
            if drain:
                self._ctx.outbox.drain()

    def flush_outbox(self) -> int:
        """Copy out the buffered outboxes now; returns how many."""
        return self._ctx.outbox.drain()


def dead_letter_update(act: Activity, error: str, now: When, worker_id: str | None,
                       lease_id: str | None) -> dict[str, Any]:
    """The one update that dead-letters `act`: its state, event, Err result and record."""
    dead = new_event(act.id, act.activity_type, EventType.DEAD_LETTER.value, now, worker_id,
                     error=error, retry_count=act.retry_count, attempt=act.retry_count + 1,
                     started_at=act.started_at)
    state: dict[str, Any] = {"status": Status.DEAD_LETTER.value, "completed_at": now,
                             "last_error": error, "last_error_at": now,
                             "last_outcome": AckOutcome.DEAD_LETTERED.value}
    if worker_id is not None:
        state["last_worker_id"] = worker_id
    unset = dict(LEASE_FIELDS)
    if lease_id is not None:
        state["last_lease_id"] = lease_id
    else:  # the reaper: no claim acknowledged this, and no earlier one may answer for it
        unset["last_lease_id"] = ""
    return merge_updates(
        {"$set": state, "$unset": unset},
        outbox_update(now, [dead],
                      result=_err(error, "dead_letter", now, act.extra.get("claims")),
                      dead_letter={"error": error, "failed_at": now}),
    )


def flush_projection(update: dict[str, Any]) -> dict[str, int] | None:
    """What the outbox flush needs back: the outbox, or everything for a dead-letter record
    (it keeps a snapshot of the activity)."""
    return None if "outbox.dead_letter" in update.get("$set", {}) else OUTBOX_PROJECTION


UNAWAITED = {AWAITED: {"$exists": False}}


def awaited(claim: Claim) -> bool:
    """Whether something waited on the claimed activity when it was claimed (a child, or
    one marked `awaited`): its success then wakes."""
    extra = claim.activity.extra
    return bool(extra.get(AWAITED)) or extra.get("parent_activity_id") is not None


def _held_by(claim: Claim) -> dict[str, Any]:
    """The fence of every write that takes a claim: the activity, still running under it
    (in its partition: the whole shard key, so it goes to one shard)."""
    return _held_by_lease(claim.activity_id, claim.lease_id,
                          partition_term(claim.activity.partition))


def _held_by_lease(activity_id: Any, lease_id: str,
                   partition: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"_id": activity_id, **(partition or {}), "lease_id": lease_id,
            "status": Status.PROCESSING.value}


def _claim_lost(claim: Claim) -> ClaimLost:
    return ClaimLost(f"claim lost: activity {claim.activity_id} is no longer held by lease "
                     f"{claim.lease_id}")


def _checkpoint_conflict(claim: Claim) -> CheckpointConflict:
    return CheckpointConflict(f"checkpoint conflict: activity {claim.activity_id} was already "
                              f"completed by lease {claim.lease_id} with another result")


def _lease_seconds(asked: float | None, default: float) -> float:
    """The lease asked for, else the configured one; never zero or negative."""
    seconds = default if asked is None else asked
    if not seconds > 0:
        raise InvalidArgument(f"lease must be longer than 0 seconds, got {seconds!r}")
    return seconds


def _err(error: str, kind: str, now: When, claim_number: int | None) -> dict[str, Any]:
    """An Err result, with the claim it ends (so an older claim's late success cannot
    replace it)."""
    return {"state": "Err", "data": {"error": error, "type": kind}, "created_at": now,
            "claim": int(claim_number or 0)}

