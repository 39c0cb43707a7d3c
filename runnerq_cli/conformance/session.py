"""The driver's operations on the queue `open` chose, each one call of the backend.

The spec's names and arguments meet ours here (docs/design.md maps the columns): a
claim's token is our `lease_id`; `max_attempts` is `max_retries`; the spec's
`dead_letter` outcome is our `dead_lettered`. The durable operations are
durable_ops.py's.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from runnerq_cli.backend.domain.documents import Claim
from runnerq_cli.backend.domain.interop import JSON_V1, split_business_key
from runnerq_cli.backend.domain.models import AckOutcome, EnqueueResult
from runnerq_cli.backend.domain.specs import ActivitySpec
from runnerq_cli.conformance.args import Args
from runnerq_cli.errors import ClaimLost, InvalidArgument, NotFound

if TYPE_CHECKING:
    from runnerq_cli.backend.api import RunnerQ

# The protocol's defaults for absent arguments (conformance/README.md).
DEFAULT_TIMEOUT_S = 30
DEFAULT_LEASE_MS = 30000
# Our outcome names, as the spec says them.
OUTCOMES = {AckOutcome.RETRYING: "retrying", AckOutcome.FAILED: "failed",
            AckOutcome.DEAD_LETTERED: "dead_letter", AckOutcome.COMPLETED: "completed"}
LINEAGE_ARGS = ("parent", "root", "depth", "fence")


class Session:
    """One driver's connection and queue (`open`), and the operations on them."""

    def __init__(self) -> None:
        self._rq: RunnerQ | None = None
        self.worker_id = f"conformance-{os.uname().nodename}-{os.getpid()}"

    @property
    def rq(self) -> RunnerQ:
        if self._rq is None:
            raise InvalidArgument("open a queue first (op open)")
        return self._rq

    # ------------------------------------------------------------------ open

    def open(self, args: Args) -> dict[str, Any]:
        """Connect to `dsn` (or `uri`), use `queue` in `database`, make its indexes."""
        from runnerq_cli.backend.api import RunnerQ
        from runnerq_cli.config import load_settings

        uri = args.text("uri") if args.given("uri") else args.text("dsn")
        overrides = {"uri": uri, "queue": args.text("queue"),
                     "database": args.optional_text("database")}
        settings = load_settings(None, overrides=overrides)
        self._rq = RunnerQ(settings)
        self._rq.maintenance.init_indexes()
        return {}

    # ------------------------------------------------------------ the queue's

    def submit(self, args: Args) -> dict[str, Any]:
        """Enqueue under the runner's id; `{"existing": id}` when a key returned its holder."""
        options: dict[str, Any] = {
            "priority": args.integer("priority", 2, minimum=1),
            "max_retries": args.integer("max_attempts", 3, minimum=0),
            "timeout_seconds": args.integer("timeout_s", DEFAULT_TIMEOUT_S, minimum=1),
            "metadata": args.raw.get("metadata") or {},
            "activity_id": args.id("id"),
        }
        if args.number("delay_s", 0) > 0:
            options["delay_seconds"] = args.number("delay_s", 0)
        payload = args.raw.get("payload")
        if payload is not None and not isinstance(payload, dict):
            raise InvalidArgument("payload must be a JSON object here (an activity's payload "
                                  "is a document, docs/design.md)", "payload")
        key = args.raw.get("key")
        if key is not None:
            keyed = Args(key)
            options["idempotency_key"] = keyed.text("key")
            options["on_duplicate"] = keyed.text("on_duplicate", "return_existing")
        if any(args.given(name) for name in LINEAGE_ARGS):
            result = self._submit_child(args, args.text("type"), payload or {}, options)
        else:
            result = self.rq.enqueue(ActivitySpec(args.text("type"), payload or {}, **options))
        return {} if result.created else {"existing": str(result.activity_id)}

    def _submit_child(self, args: Args, activity_type: str, payload: dict[str, Any],
                      options: dict[str, Any]) -> EnqueueResult:
        """A submit with `parent`, `root`, `depth` and a `fence` (the parent's claim).

        Fenced, it is our spawn, which takes the lineage from the parent it is fenced on
        (its id, its root, its depth + 1): a `parent` that says otherwise is refused
        rather than silently replaced. Unfenced, the lineage is written as given."""
        lineage: dict[str, Any] = {"parent_id": args.optional_id("parent"),
                                   "root_id": args.optional_id("root"),
                                   "depth": args.integer("depth", 0, minimum=0)}
        spec = ActivitySpec(activity_type, payload, **options, **lineage)
        if not args.given("fence"):
            return self.rq.enqueue(spec)
        fence, _ = self.held(args, "fence")
        if lineage["parent_id"] not in (None, fence.activity_id):
            raise InvalidArgument("parent must be the fence's activity: a spawn's parent is "
                                  "the activity whose claim fences it", "parent")
        return self.rq.durable.spawn(fence, spec)

    def claim(self, args: Args) -> dict[str, Any]:
        """The scheduler first (our workers run it), then claims in claim order."""
        self.rq.process_scheduled()
        claims = self.rq.dequeue(self.worker_id, types=args.types("types"),
                                 limit=args.integer("limit", 1, minimum=1),
                                 lease_seconds=args.integer("lease_ms", DEFAULT_LEASE_MS,
                                                            minimum=1) / 1000)
        return {"claims": [{"id": str(c.activity_id), "token": c.lease_id} for c in claims]}

    def renew(self, args: Args) -> dict[str, Any]:
        claim, _ = self.held(args)
        seconds = args.integer("lease_ms", DEFAULT_LEASE_MS, minimum=1) / 1000
        try:
            return {"renewed": self.rq.extend_lease(claim, seconds)}
        except ClaimLost:  # reclaimed: this claim can renew nothing
            return {"renewed": False}

    def complete(self, args: Args) -> dict[str, Any]:
        """A success; a token that no longer holds is answered by the repeat rules alone
        (docs/design.md, "Repeated acknowledgements"): a success writes its result
        before its fence, so a stale claim must never get that far."""
        claim, held = self.held(args)
        value = args.raw.get("value")
        if held:
            self.rq.ack_success(claim, value)
        else:
            self.rq._repeat_or_lost(claim, AckOutcome.COMPLETED, value)
        return {}

    def fail(self, args: Args) -> dict[str, Any]:
        """A failure: its one update is fenced, so a stale claim writes nothing."""
        claim, _ = self.held(args)
        outcome = self.rq.ack_failure(claim, args.text("reason"),
                                      retryable=args.flag("retryable", True))
        return {"outcome": OUTCOMES[outcome]}

    def lookup_key(self, args: Args) -> dict[str, Any]:
        """The holder of an encoded business key (we store the key and type apart)."""
        split = split_business_key(args.text("key"))
        if split is None:
            raise InvalidArgument("key must be an encoded business key (rq:key:v2:...)", "key")
        holder = self.rq.key_holder(split[1], split[0])
        if holder is None:
            raise NotFound(f"no activity holds the key {split[0]!r:.60} of {split[1]!r:.60}")
        return {"id": str(holder)}

    def reap(self, args: Args) -> dict[str, Any]:
        counts = self.rq.requeue_expired(args.integer("limit", 100, minimum=1))
        return {"count": sum(counts.values())}

    def cleanup(self, args: Args) -> dict[str, Any]:
        """Retention by tree with the request's windows (0: off): the roots deleted."""
        return {"count": self.rq.maintenance.cleanup(
            args.number("completed_s", 0), args.number("failed_s", 0),
            args.integer("batch", 1000, minimum=1), events_s=args.number("events_s", 0))}

    def get_result(self, args: Args) -> dict[str, Any]:
        result = self.rq.durable.get_result(args.id("id"))
        if result is None:
            return {"result": None}
        return {"result": {"state": "ok" if result.state == "Ok" else "error",
                           "data": result.data,
                           "serialization": getattr(result, "serialization", None) or JSON_V1}}

    # ------------------------------------------------------------ claims

    def held(self, args: Args, name: str = "claim") -> tuple[Claim, bool]:
        """The claim `{id, token}` rebuilt from the activity document, and whether the
        token still holds it. A stale one keeps its token: every fenced write then misses."""
        activity_id, token = args.claim(name)
        try:
            activity = self.rq.get_activity(activity_id)
        except NotFound:
            raise ClaimLost(f"activity {activity_id} does not exist: no claim holds it") \
                from None
        held = activity.status == "processing" and activity.lease_id == token
        claim = Claim(activity, token, activity.worker_id or self.worker_id,
                      activity.lease_deadline or datetime.now(UTC))
        return claim, held

