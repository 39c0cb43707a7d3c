"""Whether a queue exists: operator writes to a misspelt queue are refused, not created.

A queue exists when its activities collection does (`runnerq_{queue}_activities`,
made by its first enqueue or by `init-indexes`). Writing an operator's pause,
an audit record or an import to a queue that does not exist would create its
collections silently while the real queue, one letter away, keeps running:
`require_queue` refuses (NotFound) naming the closest existing queue,
unless the caller says a new queue is meant (`create`).
"""

from __future__ import annotations

import difflib
import re
from typing import Any

from runnerq_cli.errors import NotFound

_ACTIVITIES = re.compile(r"runnerq_([A-Za-z0-9_-]+)_activities")


def existing_queues(db: Any) -> list[str]:
    """The queues of the database, from their activities collections (one command)."""
    names = db.list_collection_names(filter={"name": {"$regex": r"^runnerq_.*_activities$"}})
    return sorted({m.group(1) for n in names if (m := _ACTIVITIES.fullmatch(n))})


def require_queue(db: Any, queue: str, *, create: bool = False) -> None:
    """Return if `queue` exists (or `create`); else NotFound with the closest name."""
    if create:
        return
    queues = existing_queues(db)
    if queue in queues:
        return
    close = difflib.get_close_matches(queue, queues, n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    if not queues:
        hint = " (it has no queues)"
    raise NotFound(f"queue {queue!r} does not exist in database {db.name!r}{hint}; "
                   "nothing written")
