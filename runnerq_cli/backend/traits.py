"""RunnerQ's two traits, as typed protocols: what a queue backend is, whatever stores it.

RunnerQ (the Rust library this queue is shared with) defines a backend by two traits:
`QueueBackend`, what producers and workers do, and `InspectionBackend`, what operators
and tools read. The MongoDB backend (`api.RunnerQ`) implements both as its own
methods; mypy --strict checks that it conforms (api.py), so a signature that drifts
from the trait fails the type check, not a user.

Everything else (operator actions, bulk, pause, dead letters, audit, diagnosis, the
worker registry, maintenance) is not part of a trait: it is reached through RunnerQ's
parts (`rq.operator`, `rq.bulk`, ...), each a class of its own.

The worker depends on `QueueBackend` for the queue, and on `WorkerBackend` for what a
worker process also does with it (its registry entry, its share of the chores, the
pause it obeys).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from runnerq_cli.backend.domain.documents import (
        Activity,
        Claim,
        DeadLetterRecord,
        Event,
        Result,
    )
    from runnerq_cli.backend.domain.event_cursor import EventCursor, EventFilter
    from runnerq_cli.backend.domain.models import AckOutcome, EnqueueResult
    from runnerq_cli.backend.domain.pause import PauseState
    from runnerq_cli.backend.domain.specs import ActivitySpec
    from runnerq_cli.backend.views.events import EventStream
    from runnerq_cli.config import Settings

__all__ = ["InspectionBackend", "PauseSource", "QueueBackend", "ScheduleFiring", "WakeUp",
           "WorkerBackend", "WorkerChores", "WorkerEntry"]


class QueueBackend(Protocol):
    """RunnerQ's queue trait: enqueue, claim, acknowledge, leases, results, and the two
    chores that move time along (the scheduler and the reaper).

    `enqueue_many`, `ack_success_many`, `release` and the outbox buffer are this
    backend's additions, for a worker's throughput and its shutdown.
    """

    @property
    def settings(self) -> Settings: ...

    @property
    def queue(self) -> str: ...

    def enqueue(self, activity_type: str | ActivitySpec,
                payload: Mapping[str, Any] | None = ..., **options: Any) -> EnqueueResult: ...

    def enqueue_many(self, specs: Sequence[ActivitySpec]) -> list[EnqueueResult | Exception]: ...

    def check_idempotency(self, activity_type: str, key: str,
                          activity_id: uuid.UUID) -> tuple[bool, uuid.UUID]: ...

    def dequeue(self, worker_id: str, *, types: Iterable[str] | None = ..., limit: int = ...,
                lease_seconds: float | None = ...,
                exclude_types: Iterable[str] | None = ...,
                on_claim: Callable[[Claim], None] | None = ...) -> list[Claim]: ...

    def ack_success(self, claim: Claim, result: Any = ...) -> AckOutcome: ...

    def ack_success_many(self, acks: Sequence[tuple[Claim, Any]],
                         ) -> list[AckOutcome | Exception]: ...

    def ack_failure(self, claim: Claim, error: str, *, retryable: bool = ...) -> AckOutcome: ...

    def extend_lease(self, claim: Claim, seconds: float | None = ...) -> bool: ...

    def report_progress(self, claim: Claim, progress: dict[str, Any]) -> None: ...

    def release(self, claim: Claim, reason: str = ...) -> bool: ...

    def store_result(self, activity_id: uuid.UUID | str, data: Any, state: str = ...) -> None: ...

    def get_result(self, activity_id: uuid.UUID | str) -> Result | None: ...

    def process_scheduled(self, limit: int | None = ...) -> int: ...

    def requeue_expired(self, limit: int = ...) -> dict[str, int]: ...

    def buffered_outbox(self, size: int = ..., *,
                        drain: bool = ...) -> AbstractContextManager[None]: ...

    def flush_outbox(self) -> int: ...


class WakeUp(Protocol):
    """A change stream as a wake-up (backend/store/changes.py: ChangeWake)."""

    @property
    def live(self) -> bool: ...

    def open(self) -> bool: ...

    def ensure(self) -> bool: ...

    def close(self) -> None: ...


class WorkerEntry(Protocol):
    """The worker registry, as a worker uses it: its own entry, and the fleet's size."""

    def register_worker(self, worker_id: str, *, types: list[str] | tuple[str, ...] = ...,
                        concurrency: int = ...) -> None: ...

    def heartbeat_worker(self, worker_id: str, *, in_flight: int,
                         counters: dict[str, int]) -> None: ...

    def unregister_worker(self, worker_id: str) -> None: ...

    def count_live_workers(self, stale_after: float = ...) -> int: ...


class WorkerChores(Protocol):
    """The chores a worker takes its share of beside the scheduler and the reaper, and
    the look at the queue's indexes it takes once at start."""

    def repair_outboxes(self, grace_seconds: float = ...) -> int: ...

    def repair_wakes(self) -> int: ...

    def missing_activity_indexes(self) -> list[str]: ...

    def purge_expired(self, limit: int = ...,
                      kinds: tuple[str, ...] = ...) -> dict[str, int]: ...


class PauseSource(Protocol):
    """Where a worker reads what is paused."""

    def paused(self) -> PauseState: ...


class ScheduleFiring(Protocol):
    """The schedules' firing chore, as a worker takes its share of it."""

    def fire_due(self, limit: int = ...) -> dict[str, int]: ...


class WorkerBackend(QueueBackend, Protocol):
    """What a worker process needs beyond the queue: its entry in the workers registry,
    its share of the other chores (outbox repair, retention, firing the schedules) and the
    pause it obeys: protocols of the methods it calls, not the backend's concrete parts."""

    @property
    def registry(self) -> WorkerEntry: ...

    @property
    def maintenance(self) -> WorkerChores: ...

    @property
    def control(self) -> PauseSource: ...

    def watch_claimable(self, types: Iterable[str], on_change: Callable[[], None],
                        max_await: float = ...) -> WakeUp: ...

    def watch_pauses(self, on_change: Callable[[], None], max_await: float = ...) -> WakeUp: ...

    def watch_limits(self, on_change: Callable[[], None], max_await: float = ...) -> WakeUp: ...

    def flow_limited(self) -> bool: ...

    def flow_retry_in(self) -> float | None: ...

    def flow_throttled(self) -> dict[str, int]: ...

    @property
    def schedules(self) -> ScheduleFiring: ...


class InspectionBackend(Protocol):
    """RunnerQ's inspection trait: counts, lists by status, one activity and its events,
    and the stream of lifecycle events. Nothing here changes anything."""

    def stats(self) -> dict[str, Any]: ...

    def list_pending(self, offset: int = ..., limit: int = ...) -> list[Activity]: ...

    def list_processing(self, offset: int = ..., limit: int = ...) -> list[Activity]: ...

    def list_scheduled(self, offset: int = ..., limit: int = ...) -> list[Activity]: ...

    def list_completed(self, offset: int = ..., limit: int = ...) -> list[Activity]: ...

    def list_dead_letter(self, offset: int = ..., limit: int = ...) -> list[DeadLetterRecord]: ...

    def get_activity(self, activity_id: uuid.UUID | str) -> Activity: ...

    def get_activity_events(self, activity_id: uuid.UUID | str,
                            limit: int = ...) -> list[Event]: ...

    def event_stream(self, *, cursor: EventCursor | None = ...,
                     filters: EventFilter | None = ..., mode: str = ...,
                     follow: bool = ..., poll_interval: float = ...) -> EventStream: ...
