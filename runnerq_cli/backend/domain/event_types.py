"""The types of the events docs/design.md lists ("Events"): what the event log records.

Its own module because an enqueue writes no event itself (the outbox does, writes.py):
building this enum costs about 0.4 ms of CPU at import, and a command that only enqueues
need not pay it (benchmarks/bench_cli_startup.py part 2)."""

from __future__ import annotations

from enum import StrEnum


class EventType(StrEnum):
    ENQUEUED = "Enqueued"
    SCHEDULED = "Scheduled"
    DEQUEUED = "Dequeued"
    STARTED = "Started"
    COMPLETED = "Completed"
    FAILED = "Failed"
    RETRYING = "Retrying"
    DEAD_LETTER = "DeadLetter"
    REQUEUED = "Requeued"
    LEASE_EXTENDED = "LeaseExtended"
    RESULT_STORED = "ResultStored"
    CANCELLED = "Cancelled"
    RETRIED = "Retried"
    REDRIVEN = "Redriven"
    RUN_NOW = "RunNow"
    RESCHEDULED = "Rescheduled"
    PRIORITY_CHANGED = "PriorityChanged"
    PROGRESS = "Progress"  # a running handler's progress (docs/design.md, "Progress")
    # Durable activities (docs/design.md, "Events of durable activities")
    YIELDED = "Yielded"
    SIGNALED = "Signaled"
    SPAWN_LINKED = "SpawnLinked"
    # Queue-level records (activity_id null): the audit trail (audit.py), pause and resume.
    OPERATOR_ACTION = "OperatorAction"
    PAUSED = "Paused"
    RESUMED = "Resumed"
