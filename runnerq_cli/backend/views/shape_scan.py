"""The malformed documents a queue holds, found on the server with the shapes' `$type`
queries (domain/shapes.py: the tables are pure, these reads are not): doctor's
`documents` check and the malformed count of `stats`. Bounded as shapes.py says.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from runnerq_cli.backend.domain.models import Status
from runnerq_cli.backend.domain.shapes import (
    ACTIVITY,
    MALFORMED_LIMIT,
    PAUSE,
    SCANNED_STATUSES,
    SET_ASIDE_PREFIX,
    SHAPE_SCAN_LIMIT,
    WORKER,
    Malformed,
    Shape,
)
from runnerq_cli.backend.store.context import QueueContext
from runnerq_cli.backend.store.driver import Collection


def malformed(ctx: QueueContext) -> list[Malformed]:
    """Malformed live activities, workers and control documents (bounded, see the module)."""
    found = malformed_activities(ctx)
    found += _named(ctx.workers, ctx.workers.find(WORKER.mismatch()).limit(MALFORMED_LIMIT),
                    WORKER)
    found += _named(ctx.control, ctx.control.find({"_id": "pause", **PAUSE.mismatch()}),
                    PAUSE)
    return found


def malformed_activities(ctx: QueueContext) -> list[Malformed]:
    """The activities of another shape than the table's, among live, dead-lettered and
    those of no status of ours (at most SHAPE_SCAN_LIMIT looked at and MALFORMED_LIMIT
    named per status): what doctor's `documents` check names."""
    found: list[Malformed] = []
    mismatch = ACTIVITY.mismatch()
    # ... and those of no status of ours (none, or not text): nothing ever claims them
    unknown = {"$nin": [s.value for s in Status]}
    for status in (*SCANNED_STATUSES, unknown):
        pipeline: list[dict[str, Any]] = [
            {"$match": {"status": status}}, {"$limit": SHAPE_SCAN_LIMIT},
            {"$match": mismatch}, {"$limit": MALFORMED_LIMIT}]
        found += _named(ctx.activities, ctx.activities.aggregate(pipeline), ACTIVITY)
    return found


def set_aside_activities(ctx: QueueContext, exclude: Iterable[str] = ()) -> list[Malformed]:
    """Dead-lettered activities a reader set aside as malformed (their `last_error` says
    so), at most MALFORMED_LIMIT, but those of `exclude` (ids as text): one whose defect
    was in a field the set-aside wrote (a lease field) is well formed afterwards, and
    still counts. Served by the finished index (`status`, `completed_at`)."""
    from runnerq_cli.backend.domain.index_specs import EVER

    skip = set(exclude)
    found: list[Malformed] = []
    for doc in ctx.activities.find(
            {"status": Status.DEAD_LETTER.value, "completed_at": {"$gte": EVER},
             "last_error": {"$regex": f"^{SET_ASIDE_PREFIX}"}},
            {"last_error": 1}).limit(MALFORMED_LIMIT + len(skip)):
        if str(doc["_id"]) not in skip and len(found) < MALFORMED_LIMIT:
            found.append(Malformed(ctx.activities.name, str(doc["_id"]),
                                   "set aside: " + str(doc["last_error"])[len(SET_ASIDE_PREFIX):]))
    return found


def _named(collection: Collection, docs: Iterable[dict[str, Any]],
           shape: Shape) -> list[Malformed]:
    out = []
    for doc in docs:
        problem = shape.problem(doc)
        if problem is not None:
            out.append(Malformed(collection.name, str(doc.get("_id")), problem))
    return out
