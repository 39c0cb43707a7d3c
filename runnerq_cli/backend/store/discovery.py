"""Which RunnerQ queues a database holds, and the refusal of a queue that does not exist.

A queue exists when its activities collection does (`runnerq_{queue}_activities`,
made by its first enqueue or by `init-indexes`); a collection that merely looks
like ours (a name no queue may have) is someone else's. Writing an operator's
pause, an audit record or an import to a queue that does not exist would create
its collections silently while the real queue, one letter away, keeps running:
`require_queue` refuses (NotFound) naming the closest existing queue, unless the
caller says a new queue is meant (`create`).
"""

from __future__ import annotations

import re

from runnerq_cli import values
from runnerq_cli.backend.domain.naming import validate_queue_name
from runnerq_cli.backend.store.driver import Database
from runnerq_cli.errors import InvalidArgument, NotFound

_QUEUE_COLLECTION = re.compile(r"runnerq_(.+)_activities")


def discover_queues(db: Database) -> list[str]:
    """Every RunnerQ queue in the database, from its activities collection (one command:
    the server lists only the names that look like ours)."""
    found = []
    for name in db.list_collection_names(filter={"name": {"$regex": r"^runnerq_.+_activities$"}}):
        match = _QUEUE_COLLECTION.fullmatch(name)
        if not match:
            continue
        try:
            found.append(validate_queue_name(match.group(1)))
        except InvalidArgument:
            continue  # someone else's collection that merely looks like ours
    return sorted(set(found))


def require_queue(db: Database, queue: str, *, create: bool = False) -> None:
    """Return if `queue` exists (or `create`); else NotFound with the closest name."""
    if create:
        return
    absent = absent_queue(db, queue)
    if absent is not None:
        raise NotFound(f"{absent}; nothing written")


def absent_queue(db: Database, queue: str) -> str | None:
    """'queue Q does not exist in database D (did you mean 'P'?)' when `queue` has no
    activities collection, else None: a read's note (reads refuse no queue), and the
    start of a write's refusal (`require_queue`)."""
    queues = discover_queues(db)
    if queue in queues:
        return None
    close = values.closest(queue, queues)
    known = ", ".join(queues[:10]) + (", ..." if len(queues) > 10 else "")
    hint = (f"did you mean {close!r}?" if close
            else f"queues there: {known}" if queues else "it has no queues yet")
    return f"queue {queue!r} does not exist in database {db.name!r} ({hint})"


def require_queues(db: Database, wanted: list[str]) -> list[str]:
    """`wanted`, each checked to exist; NotFound names the queues that do."""
    known = discover_queues(db)
    for name in wanted:
        validate_queue_name(name)
        if name not in known:
            listed = ", ".join(known[:20]) or "none"
            raise NotFound(f"queue {name!r} not found in database {db.name!r} "
                           f"(queues there: {listed})")
    return wanted
