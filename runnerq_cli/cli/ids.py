"""Activity ids as the CLI takes them: a full UUID, or a unique prefix a text view showed.

A full UUID is parsed without a query; a prefix (at least 8 hex digits) is
looked up once (backend/domain/idprefix.py). Malformed or ambiguous: exit 2; no such
activity: exit 4.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from runnerq_cli.backend.api import RunnerQ


def is_full(text: str) -> bool:
    try:
        uuid.UUID(str(text).strip())
    except ValueError:
        return False
    return True


def activity_id(backend: RunnerQ, text: str, *, any_queue: bool = False) -> uuid.UUID:
    """The activity `text` names in the backend's queue (or, with `any_queue`, in any)."""
    from runnerq_cli.backend.domain.idprefix import prefix_of
    from runnerq_cli.errors import NotFound

    if is_full(text) or prefix_of(text) is None:
        return backend.inspector.resolve_id(text)  # parsed, or refused: no query
    try:
        return backend.inspector.resolve_id(text)
    except NotFound:
        if not any_queue:
            raise
    for name in backend.diagnosis.discover_queues():
        if name == backend.queue:
            continue
        try:
            return backend.for_queue(name).inspector.resolve_id(text)
        except NotFound:
            continue
    raise NotFound(f"no activity id starts with {prefix_of(text)} in any queue")


def activity_ids(backend: RunnerQ, texts: list[str]) -> list[str]:
    """Each of `texts` as a full id (prefixes resolved), for commands taking many ids."""
    return [t if is_full(t) else str(activity_id(backend, t)) for t in texts]
