"""Every timing of the queue's upkeep, in one place: heartbeats, staleness, chores.

The worker engine (how often it does what), the worker registry and `workers`
(who counts as live), maintenance (outbox repair's grace), `doctor` and
`metrics` (when something is overdue) all read `TIMING`, and the numbers
docs/workers.md, docs/diagnose.md and docs/design.md state are tested against it
(tests/test_timing.py): change a value here and the docs' test says which
sentence to change.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TimingPolicy:
    """The queue's clocks, in seconds."""

    # Each worker refreshes its registry entry this often.
    heartbeat_every: float = 5.0
    # An operator's view (`workers`, `doctor`, `metrics`): a worker silent this long is
    # stale, its process probably dead.
    worker_stale_after: float = 30.0
    # The fleet that shares the chores: a worker silent for three heartbeats no longer
    # counts, so the survivors' turns come due soon after a death.
    fleet_stale_after: float = 15.0
    # The registry's TTL index removes an entry silent this long.
    registry_ttl: int = 600
    # A worker copies out the outboxes it buffered this often.
    outbox_drain_every: float = 0.5
    # Outbox repair: every `repair_every` (shared by the fleet), copy out the outboxes
    # older than `repair_grace` (by then no live writer is about to copy them itself).
    repair_every: float = 15.0
    repair_grace: float = 30.0
    # The reaper runs every lease / 4, kept between these bounds.
    reaper_every_min: float = 1.0
    reaper_every_max: float = 15.0
    # The retention purge.
    purge_every: float = 600.0
    # Each shared chore's interval varies by this fraction either way (workers started
    # together drift apart).
    chore_jitter: float = 0.25
    # The most live workers the shared chores are spread over.
    max_fleet_share: int = 64
    # An outcome the server did not take is retried this long; then the lease runs out
    # and the reaper hands the activity on.
    ack_retry_for: float = 30.0
    # `doctor`: an expired lease still unreaped this long past its deadline means no
    # reaper runs (one runs at least every reaper_every_max).
    lease_overdue: float = 30.0
    # `doctor`: an attempt still held (its lease renewed) this long past its
    # timeout_seconds means its worker renews a claim it no longer runs.
    timeout_overdue: float = 30.0
    # `doctor`: an outbox older than this was left by a crash and no repair ran since
    # (repair_grace + repair_every would have copied it).
    outbox_overdue: float = 60.0

    def reaper_every(self, lease: float) -> float:
        """The reaper's interval for a worker's lease."""
        return max(self.reaper_every_min, min(lease / 4, self.reaper_every_max))

    @property
    def repaired_within(self) -> float:
        """How long after a crash its outboxes are copied out by a live fleet."""
        return self.repair_grace + self.repair_every


TIMING = TimingPolicy()
