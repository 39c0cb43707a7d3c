"""The driver's durable operations (checkpoint, register_dependency, park, signal, a
child's submit, tree cleanup), each one call of the durable backend (`rq.durable`,
docs/design.md "Durable activities"). A backend without it answers `unsupported`,
naming the operation.
"""

from __future__ import annotations

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
    """A submit with `parent`, `root`, `depth` and a `fence` (the parent's claim).

    Fenced, it is our spawn, which takes the lineage from the parent it is fenced on (its
    id, its root, its depth + 1): lineage arguments that say otherwise are refused rather
    than silently replaced. Unfenced, the lineage is written as given."""
    lineage: dict[str, Any] = {"parent_id": args.optional_id("parent"),
                               "root_id": args.optional_id("root"),
                               "depth": args.integer("depth", 0, minimum=0)}
    spec = ActivitySpec(activity_type, payload, **options, **lineage)
    if not args.given("fence"):
        return session.rq.enqueue(spec)
    part = durable(session, "submit (fence)")
    fence, _ = session.held(args, "fence")
    if lineage["parent_id"] not in (None, fence.activity_id):
        raise InvalidArgument("parent must be the fence's activity: a spawn's parent is the "
                              "activity whose claim fences it", "parent")
    result: EnqueueResult = part.spawn(fence, spec)
    return result


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


