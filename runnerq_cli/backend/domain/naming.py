"""Queue names and the collection names derived from them (docs/design.md, "Collections")."""

from __future__ import annotations

import re
import socket
import uuid
from dataclasses import dataclass

from runnerq_cli import values

# One definition of a valid queue name, shared with every option and setting.
validate_queue_name = values.queue_name


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

    @property
    def schedules(self) -> str:
        """Recurring schedules (an addition of ours; docs/design.md, "Schedules")."""
        return f"runnerq_{self.queue}_schedules"

    @property
    def checkpoints(self) -> str:
        """Durable activities' checkpoints, sleeps and signals (docs/design.md, "Checkpoints")."""
        return f"runnerq_{self.queue}_checkpoints"

    @property
    def dependencies(self) -> str:
        """Which activity waits on which result (docs/design.md, "Dependencies")."""
        return f"runnerq_{self.queue}_dependencies"

    @property
    def limits(self) -> str:
        """Flow limits and the slots held under them (docs/design.md, "Flow control")."""
        return f"runnerq_{self.queue}_limits"

    def all(self) -> dict[str, str]:
        return {
            "activities": self.activities,
            "dead_letter": self.dead_letter,
            "results": self.results,
            "idempotency": self.idempotency,
            "events": self.events,
            "workers": self.workers,
            "control": self.control,
            "schedules": self.schedules,
            "checkpoints": self.checkpoints,
            "dependencies": self.dependencies,
            "limits": self.limits,
        }


def default_worker_id() -> str:
    """The id a worker registers under when given none: `host-8hexdigits` (the registry's
    documents are keyed by it; the random part keeps two workers of one host apart). The
    host name is kept to a worker id's characters (texts.worker_id): a host name with
    other characters would otherwise make an id the registry refuses."""
    host = re.sub(r"[^A-Za-z0-9._:@-]", "-", socket.gethostname())[:100] or "worker"
    return f"{host}-{uuid.uuid4().hex[:8]}"


# A worker's counters, as it keeps them and as its heartbeat stores them (one list).
# `unacknowledged`: outcomes given up unwritten (the server away past the retries, or
# refusing even a short failure): the reaper requeues them when their lease runs out.
COUNTERS = ("claimed", "succeeded", "retried", "failed", "dead_lettered", "claims_lost",
            "released", "unacknowledged")
