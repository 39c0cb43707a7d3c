"""Which RunnerQ queues a database holds, from its `runnerq_{queue}_activities` collections."""

from __future__ import annotations

import re

from runnerq_cli.backend.driver import Database
from runnerq_cli.backend.naming import validate_queue_name
from runnerq_cli.errors import InvalidArgument, NotFound

_QUEUE_COLLECTION = re.compile(r"runnerq_(.+)_activities")


def discover_queues(db: Database) -> list[str]:
    """Every RunnerQ queue in the database, from its `runnerq_{queue}_activities` collection."""
    found = []
    for name in db.list_collection_names():
        match = _QUEUE_COLLECTION.fullmatch(name)
        if not match:
            continue
        try:
            found.append(validate_queue_name(match.group(1)))
        except InvalidArgument:
            continue  # someone else's collection that merely looks like ours
    return sorted(set(found))


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
