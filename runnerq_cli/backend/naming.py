"""Queue names and the collection names derived from them (docs/design.md, "Collections")."""

from __future__ import annotations

import re
from dataclasses import dataclass

from runnerq_cli.errors import InvalidArgument

QUEUE_NAME_MAX = 64
_QUEUE_NAME = re.compile(r"[A-Za-z0-9_-]+")


def validate_queue_name(name: str) -> str:
    """Return `name` if it may become part of a collection name, else raise.

    Only letters, digits, `_` and `-`, at most 64 characters: anything else
    could escape the `runnerq_{queue}_` prefix or exceed MongoDB's limits.
    """
    if not isinstance(name, str) or not name:
        raise InvalidArgument("invalid queue name: it must not be empty")
    if len(name) > QUEUE_NAME_MAX:
        raise InvalidArgument(
            f"invalid queue name {name[:20]!r}...: at most {QUEUE_NAME_MAX} characters"
        )
    if not _QUEUE_NAME.fullmatch(name):
        raise InvalidArgument(
            f"invalid queue name {name!r}: use only letters, digits, '_' and '-'"
        )
    return name


@dataclass(frozen=True)
class CollectionNames:
    """The collections of one queue."""

    queue: str

    def __post_init__(self) -> None:
        validate_queue_name(self.queue)

    @property
    def activities(self) -> str:
        return f"runnerq_{self.queue}_activities"

    @property
    def dead_letter(self) -> str:
        return f"runnerq_{self.queue}_dead_letter"

    @property
    def results(self) -> str:
        return f"runnerq_{self.queue}_results"

    @property
    def idempotency(self) -> str:
        return f"runnerq_{self.queue}_idempotency"

    @property
    def events(self) -> str:
        return f"runnerq_{self.queue}_events"

    @property
    def workers(self) -> str:
        """The worker registry (an addition of ours; other programs may ignore it)."""
        return f"runnerq_{self.queue}_workers"

    @property
    def control(self) -> str:
        """Operator controls such as a pause (an addition of ours; other programs may ignore it)."""
        return f"runnerq_{self.queue}_control"

    def all(self) -> dict[str, str]:
        return {
            "activities": self.activities,
            "dead_letter": self.dead_letter,
            "results": self.results,
            "idempotency": self.idempotency,
            "events": self.events,
            "workers": self.workers,
            "control": self.control,
        }
