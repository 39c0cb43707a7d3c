"""Claiming (docs/design.md, "Claim order", "Partitions", "Idle workers and change
streams"): pending activities taken in claim order, each under a new lease, and the
wake-ups that tell an idle worker when work may have become claimable.

A claimed document that is malformed is set aside (aside.py), never handed out.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any

from pymongo import ReturnDocument

from runnerq_cli.backend.domain import queries
from runnerq_cli.backend.domain.documents import Claim
from runnerq_cli.backend.domain.models import Status
from runnerq_cli.backend.domain.partitions import term_of
from runnerq_cli.backend.queue.aside import TYPE_MISMATCH, checked, set_aside, set_aside_unclaimable
from runnerq_cli.backend.queue.attempt_writes import held_by_lease, lease_length
from runnerq_cli.backend.queue.flow_claims import LimitedClaims, limited_scope, plain_scope
from runnerq_cli.backend.queue.pending_types import PendingTypes
from runnerq_cli.backend.store.changes import ChangeWake
from runnerq_cli.backend.store.context import Part
from runnerq_cli.backend.store.servertime import ServerTime, When, server_update, write_time
from runnerq_cli.backend.store.stamps import stamp
from runnerq_cli.backend.store.writes import merge_updates
from runnerq_cli.errors import CommandFailed, InvalidArgument

# What a claim returns: the activity without the bookkeeping of earlier attempts, nor the
# lease fields the claim itself just wrote (the claimer knows them: fewer bytes back). An
# outbox (rarely there: an operator's action not copied yet) comes back to be checked: the
# attempt's outcome must be writable into it (aside.py).
CLAIM_PROJECTION = {"last_lease_id": 0, "last_outcome": 0, "last_worker_id": 0,
                    "status": 0, "worker_id": 0, "lease_id": 0, "lease_deadline": 0}


class Claims(Part):
    """The claim of pending activities (`dequeue`) and the wake-ups of idle claimers."""

    _pending_types: PendingTypes | None = None  # claims around paused types (made on use)
    # The last dequeue of a partitioned queue found every partition empty: the next one
    # asks once whether any has work before claiming partition by partition.
    _all_dry = False

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

        Types with a flow limit (docs/design.md, "Flow control") are claimed first, each
        under a slot (flow_claims.py); the plain claim leaves them out. A queue without
        limits pays one read of the limit documents' ids every few seconds.
        """
        if limit < 1:
            raise InvalidArgument("limit must be at least 1")
        limited = self._ctx.flow.limited(self._ctx.limits)
        if not limited:
            return self._dequeue_plain(worker_id, types, limit, lease_seconds, exclude_types,
                                       on_claim)
        seconds = lease_length(lease_seconds, self._ctx.settings.lease)
        got = LimitedClaims(self.claim_under_slot, self._ctx, worker_id, seconds, on_claim).claim(
            limited_scope(types, exclude_types, limited), limit)
        plain_types, plain_excluded = plain_scope(types, exclude_types, limited)
        if len(got) >= limit or plain_types == []:
            return got
        return got + self._dequeue_plain(worker_id, plain_types, limit - len(got),
                                         lease_seconds, plain_excluded, on_claim)

    def _dequeue_plain(self, worker_id: str, types: Iterable[str] | None, limit: int,
                       lease_seconds: float | None, exclude_types: Iterable[str] | None,
                       on_claim: Callable[[Claim], None] | None) -> list[Claim]:
        """The plain claim (docs/design.md, "Claim order") of types without a limit."""
        present = self._present_types(types, exclude_types)
        if present is None:
            return []  # nothing pending beyond the paused types
        count = self._ctx.partitions.current()
        claimable = queries.claim(types, exclude_types, present)
        if count > 1 and self._all_dry:
            probe = queries.claimable_anywhere(count, types, exclude_types, present)
            if self._ctx.activities.find_one(probe.filter, {"_id": 1}) is None:
                return []  # still idle: one command, not one empty claim per partition
        lease = timedelta(seconds=lease_length(lease_seconds, self._ctx.settings.lease))
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
                    claimable.filter, self._claim_update(worker_id, lease_id, deadline, now),
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
            claim = self._claimed(doc, worker_id, lease_id, deadline)
            if claim is None:
                continue
            claims.append(claim)
            if on_claim is not None:
                on_claim(claim)
        if count > 1:
            self._all_dry = not claims and len(dry) >= count
        return claims

    def _present_types(self, types: Iterable[str] | None,
                       exclude_types: Iterable[str] | None) -> list[str] | None:
        """The pending types a claim around paused ones names ([] when it excludes none
        or names its own `types`); None when nothing is pending beyond the paused types."""
        if not (exclude_types and not types):
            return []
        if self._pending_types is None:
            self._pending_types = PendingTypes()
        return self._pending_types.claimable(self._ctx.activities, exclude_types) or None

    def _claimed(self, doc: dict[str, Any], worker_id: str, lease_id: str,
                 deadline: When) -> Claim | None:
        """The claim of a document just claimed; None when it is malformed (set aside:
        never run, never left running)."""
        if isinstance(deadline, ServerTime):  # one $$NOW for both: started_at + lease
            deadline = deadline.after(doc["started_at"])
        stored_deadline = deadline.replace(microsecond=deadline.microsecond // 1000 * 1000)
        doc = {**doc, "status": Status.PROCESSING.value, "worker_id": worker_id,
               "lease_id": lease_id, "lease_deadline": stored_deadline}  # as written
        activity, problem = checked(doc)
        if activity is None:
            set_aside(self._ctx, doc, str(problem),
                      held_by_lease(doc["_id"], lease_id, term_of(doc)),
                      worker_id, lease_id, "claim")
            return None
        return Claim(activity, lease_id, worker_id, deadline)

    def claim_under_slot(self, activity_type: str, key: str, worker_id: str, lease_id: str,
                         lease_seconds: float) -> Claim | None:
        """The claim of a limited type's key under the slot taken for `lease_id`
        (docs/design.md, "A limited claim", step 3): claim order within the key, and
        `slot` set so that whoever ends the claim frees the slot. None: nothing claimed."""
        claimable = queries.keyed_claim(activity_type, key)
        now = write_time(self._ctx.clock)
        deadline = now + timedelta(seconds=lease_seconds)
        try:
            doc = self._ctx.activities.find_one_and_update(
                claimable.filter,
                self._claim_update(worker_id, lease_id, deadline, now, slot=activity_type),
                projection=CLAIM_PROJECTION, sort=claimable.sort_list,
                return_document=ReturnDocument.AFTER)
        except CommandFailed as exc:  # a `claims` that is not a number (aside.py)
            if exc.code != TYPE_MISMATCH:
                raise
            set_aside_unclaimable(self._ctx, claimable, worker_id)
            return None
        return None if doc is None else self._claimed(doc, worker_id, lease_id, deadline)

    def _claim_update(self, worker_id: str, lease_id: str, deadline: When,
                      now: When, slot: str | None = None) -> Any:
        """The update of one claim: processing under a new lease, one more claim counted,
        `started_at` stamped by the server as it lands (a tail reads by it); a limited
        claim also names its `slot`."""
        fields: dict[str, Any] = {"status": Status.PROCESSING.value, "worker_id": worker_id,
                                  "lease_id": lease_id, "lease_deadline": deadline}
        if slot is not None:
            fields["slot"] = slot
        return server_update(merge_updates(
            {"$set": fields, "$inc": {"claims": 1}},
            stamp(self._ctx.clock, now, "started_at")))

    def watch_claimable(self, types: Iterable[str], on_change: Callable[[], None],
                        max_await: float = 1.0) -> ChangeWake:
        """A wake-up (store/changes.py) calling `on_change` when work may have become
        claimable for `types` (() for any); not opened yet: `open()` says whether the
        server offers change streams (docs/design.md, "Idle workers and change streams")."""
        return ChangeWake(self._ctx.activities, queries.claimable_changes(types), on_change,
                          max_await=max_await, name="runnerq-wake")

    def watch_limits(self, on_change: Callable[[], None], max_await: float = 1.0) -> ChangeWake:
        """A wake-up calling `on_change` when a slot frees or a limit changes anywhere in
        the fleet (queries.limit_changes); while it is live, this process leaves a type
        full by its concurrency until told (flowstate.py). Not opened yet."""
        def changed() -> None:
            self._ctx.flow.changed()
            on_change()
        wake = ChangeWake(self._ctx.limits, queries.limit_changes(), changed,
                          max_await=max_await, name="runnerq-limit-wake")
        self._ctx.flow.watch = wake
        return wake

    def flow_limited(self) -> bool:
        """Whether this process last read any flow limit (no command)."""
        return bool(self._ctx.flow.known())

    def flow_throttled(self) -> dict[str, int]:
        """Starts put off by a full flow limit since the last call, by type (a worker's
        `runnerq_activity_throttled_total`)."""
        return self._ctx.flow.drain_throttled()

    def flow_retry_in(self) -> float | None:
        """Seconds until a limited type left alone may be claimed again by this process
        (a rate's next start, a back-off's end); None when none waits on a clock."""
        return self._ctx.flow.retry_in()

    def watch_pauses(self, on_change: Callable[[], None], max_await: float = 1.0) -> ChangeWake:
        """A wake-up calling `on_change` when the pause document changes (a pause, a
        resume): an idle worker that obeys a pause stays on its streams instead of polling
        for the resume, which changes no activity. Not opened yet, as watch_claimable."""
        return ChangeWake(self._ctx.control, queries.pause_changes(), on_change,
                          max_await=max_await, name="runnerq-pause-wake")
