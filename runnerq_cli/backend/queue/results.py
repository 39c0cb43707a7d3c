"""Results (docs/design.md, "Results"): stored directly, and read with the visibility
rule (only a terminal activity's last acknowledged run has one).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from runnerq_cli.backend.domain.documents import Result, check_fields
from runnerq_cli.backend.domain.models import TERMINAL_STATUSES, AckOutcome, parse_activity_id
from runnerq_cli.backend.domain.results import checked_result
from runnerq_cli.backend.store.context import Part
from runnerq_cli.errors import InvalidArgument

# What a reader of a result relies on (MalformedDocument otherwise).
RESULT_TYPES: dict[str, tuple[type, ...]] = {"state": (str,),
                                             "created_at": (datetime, type(None))}


class Results(Part):
    """`store_result` and `get_result`."""

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
        cancelled = activity is not None and activity.get("status") == "cancelled"
        doc = ((activity or {}).get("outbox") or {}).get("result")
        if doc is None:
            doc = self._ctx.results.find_one({"_id": aid})
            if doc is None:
                return None
            lease = doc.get("lease_id")
            if activity is not None and lease is not None and not cancelled and (
                    lease != activity.get("last_lease_id")
                    or activity.get("last_outcome") != AckOutcome.COMPLETED.value):
                return None  # a success nobody acknowledged (a crash, a stale claim)
        if cancelled and not _cancellation(doc):
            # A cancelled activity's result is its cancellation's; any other stored one
            # is a run an operator retried before the cancel (or a cancel of an earlier
            # version, which stored none).
            return None
        check_fields(doc, RESULT_TYPES, "result", ("state",))  # another program's, maybe
        return Result(aid, doc["state"], doc.get("data"), doc.get("created_at"))


def _cancellation(doc: Any) -> bool:
    """Whether a result is an operator cancel's own (`type: "cancelled"`)."""
    data = doc.get("data") if isinstance(doc, dict) else None
    return isinstance(data, dict) and data.get("type") == "cancelled"
