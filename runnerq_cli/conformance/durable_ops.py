"""The driver's durable operations (checkpoint, register_dependency, park, signal, a
child's submit, tree cleanup), each one call of the durable backend (`rq.durable`,
docs/design.md "Durable activities"). A backend without it answers `unsupported`,
naming the operation.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import TYPE_CHECKING, Any

from runnerq_cli.backend.domain.specs import ActivitySpec
from runnerq_cli.conformance.args import Args, Unsupported
from runnerq_cli.errors import InvalidArgument

if TYPE_CHECKING:
    from runnerq_cli.backend.domain.models import EnqueueResult
    from runnerq_cli.conformance.session import Session

STATES = {"ok": "Ok", "error": "Err"}
PARK_KINDS = ("sleep", "signal", "await")


def durable(session: Session, op: str) -> Any:
    """The queue's durable backend, or `unsupported` naming the operation."""
    part = getattr(session.rq, "durable", None)
    if part is None:
        raise Unsupported(f"durable op {op} not implemented")
    return part


def submit_child(session: Session, args: Args, activity_type: str, payload: dict[str, Any],
                 options: dict[str, Any]) -> EnqueueResult:
    """A submit with `parent`, `root`, `depth` and a `fence` (the parent's claim)."""
    fields = {f.name for f in dataclasses.fields(ActivitySpec)}
    if not {"parent_id", "root_id", "depth"} <= fields:
        raise Unsupported("durable op submit (parent, root, depth, fence) not implemented")
    lineage: dict[str, Any] = {"parent_id": args.optional_id("parent"),
                               "root_id": args.optional_id("root"),
                               "depth": args.integer("depth", 0, minimum=0)}
    spec = ActivitySpec(activity_type, payload, **options, **lineage)
    fence = session.held(args, "fence")[0] if args.given("fence") else None
    return session.rq.enqueue(spec, fence=fence)


def checkpoint(session: Session, args: Args) -> dict[str, Any]:
    part = durable(session, "checkpoint")
    claim, _ = session.held(args)
    state = args.text("state")
    if state not in STATES:
        raise InvalidArgument("state must be ok or error", "state")
    step = args.optional_text("step") or None
    part.checkpoint(claim, args.id("result_id"), STATES[state], args.raw.get("data"), step)
    return {}


def register_dependency(session: Session, args: Args) -> dict[str, Any]:
    part = durable(session, "register_dependency")
    claim, _ = session.held(args)
    part.register_dependency(claim, args.id("producer"))
    return {}


def park(session: Session, args: Args) -> dict[str, Any]:
    part = durable(session, "park")
    claim, _ = session.held(args)
    kind = args.text("kind")
    if kind not in PARK_KINDS:
        raise InvalidArgument(f"kind must be one of {', '.join(PARK_KINDS)}", "kind")
    part.park(claim, kind, args.text("step"), args.time("wake_at"),
              result_id=args.optional_id("result_id"), producer=args.optional_id("producer"))
    return {}


def signal(session: Session, args: Args) -> dict[str, Any]:
    part = durable(session, "signal")
    part.signal(args.id("target"), args.text("name"), args.raw.get("payload"))
    return {}


def cleanup(session: Session, args: Args) -> dict[str, Any]:
    """Tree retention: the count of roots deleted."""
    part = durable(session, "cleanup")
    ages = {"completed_s": args.number("completed_s", 0), "failed_s": args.number("failed_s", 0),
            "batch": args.integer("batch", 1000, minimum=1)}
    events_s = args.number("events_s", 0)
    if "events_s" in inspect.signature(part.cleanup).parameters:
        ages["events_s"] = events_s
    elif events_s > 0:
        raise Unsupported("durable op cleanup (events_s) not implemented")
    return {"count": int(part.cleanup(**ages))}
