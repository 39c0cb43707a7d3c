"""The driver's durable operations (checkpoint, register_dependency, park, signal; a
child's submit is session.py's), each one call of the durable backend (`rq.durable`,
docs/design.md "Durable activities").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from runnerq_cli.conformance.args import Args
from runnerq_cli.errors import InvalidArgument

if TYPE_CHECKING:
    from runnerq_cli.conformance.session import Session

STATES = {"ok": "Ok", "error": "Err"}
PARK_KINDS = ("sleep", "signal", "await")


def checkpoint(session: Session, args: Args) -> dict[str, Any]:
    part = session.rq.durable
    claim, _ = session.held(args)
    state = args.text("state")
    if state not in STATES:
        raise InvalidArgument("state must be ok or error", "state")
    step = args.optional_text("step") or None
    part.checkpoint(claim, args.id("result_id"), STATES[state], args.raw.get("data"), step)
    return {}


def register_dependency(session: Session, args: Args) -> dict[str, Any]:
    part = session.rq.durable
    claim, _ = session.held(args)
    part.register_dependency(claim, args.id("producer"))
    return {}


def park(session: Session, args: Args) -> dict[str, Any]:
    part = session.rq.durable
    claim, _ = session.held(args)
    kind = args.text("kind")
    if kind not in PARK_KINDS:
        raise InvalidArgument(f"kind must be one of {', '.join(PARK_KINDS)}", "kind")
    part.park(claim, kind, args.text("step"), args.time("wake_at"),
              result_id=args.optional_id("result_id"), producer=args.optional_id("producer"))
    return {}


def signal(session: Session, args: Args) -> dict[str, Any]:
    part = session.rq.durable
    part.signal(args.id("target"), args.text("name"), args.raw.get("payload"))
    return {}


