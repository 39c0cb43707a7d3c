"""An order saga as a durable handler: charge, wait for approval, ship each parcel as a
child activity, wait for all of them, refund if anything fails.

Run a worker with it, enqueue an order, approve it:

    $ runnerq-mongo worker --app order_saga           # from this directory
    $ runnerq-mongo enqueue order '{"order": "A-17", "amount": 4200, "parcels": ["p1", "p2"]}' \
          --idempotency-key A-17
    $ python -c 'import runnerq_cli; runnerq_cli.connect().durable.signal_by_key(
          "order", "A-17", "approval", {"by": "ada"})'

The handler runs again from the top after every wake, retry or crash (docs/workers.md,
"Durable handlers"): the charge is a step, so it runs once whatever happens after it;
each parcel's child is spawned under a step name, so a replay finds the same child
instead of shipping twice; the approval and the parcels are waited for parked, holding
no worker. Code outside `ctx.*` calls runs on every replay: keep it free of side effects.

`charge_card`, `refund_card` and `book_courier` stand in for your payment provider and
courier; here they append a line to the file named by ORDER_SAGA_LEDGER (if set), which
is how the test suite counts what really happened.
"""

from __future__ import annotations

import os
import time
from typing import Any

from runnerq_cli import (
    ChildFailed,
    DurableContext,
    HandlerRegistry,
    NonRetryableError,
    SignalTimeout,
)

registry = HandlerRegistry()
APPROVAL_TIMEOUT = 48 * 3600.0  # seconds an order waits for its approval


def _record(line: str) -> None:
    """The stand-in side effect: one line in the ledger file."""
    path = os.environ.get("ORDER_SAGA_LEDGER")
    if path:
        with open(path, "a", encoding="utf-8") as ledger:
            ledger.write(line + "\n")


def charge_card(order: str, amount: int) -> dict[str, Any]:
    _record(f"charge {order}")
    return {"charge_id": f"ch-{order}", "amount": amount}


def refund_card(charge: dict[str, Any]) -> dict[str, Any]:
    _record(f"refund {charge['charge_id']}")
    return {"refunded": charge["amount"]}


def book_courier(order: str, parcel: str) -> str:
    _record(f"ship {order}/{parcel}")
    time.sleep(float(os.environ.get("ORDER_SAGA_SHIP_SECONDS", "0")))  # a slow courier
    if parcel.startswith("lost"):
        raise NonRetryableError(f"parcel {parcel} cannot be shipped")
    return f"track-{order}-{parcel}"


@registry.handler("order")
def order(payload: dict[str, Any], ctx: DurableContext) -> dict[str, Any]:
    """The saga. Every `ctx.*` name is a key of what is stored: stable and unique."""
    order_id = str(payload["order"])
    charge = ctx.step("charge", lambda: charge_card(order_id, int(payload["amount"])))
    try:
        approval = ctx.wait_for_signal(
            "approval", timeout=float(payload.get("approval_timeout", APPROVAL_TIMEOUT)))
        parcels = [ctx.spawn("ship_parcel", {"order": order_id, "parcel": parcel},
                             step=f"ship:{parcel}", max_retries=2)
                   for parcel in payload["parcels"]]
        tracking = ctx.wait_all(parcels)
    except (SignalTimeout, ChildFailed) as exc:
        refund = ctx.step("refund", lambda: refund_card(charge))
        raise NonRetryableError(f"order {order_id} failed and was refunded "
                                f"({refund['refunded']}): {exc}") from None
    return {"order": order_id, "charge": charge["charge_id"], "approved_by": approval,
            "tracking": tracking}


@registry.handler("ship_parcel")
def ship_parcel(payload: dict[str, Any], ctx: DurableContext) -> str:
    """One parcel: booking the courier is a step, so a retry does not book it twice."""
    return str(ctx.step("book", lambda: book_courier(payload["order"], payload["parcel"])))
