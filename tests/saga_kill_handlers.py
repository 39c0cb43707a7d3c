"""examples/order_saga.py's handlers with kill points (tests/test_order_saga_kills.py).

A worker started with `--app tests.saga_kill_handlers` runs the example's own handler
functions, unchanged, with a `ctx` that forwards every call to the worker's own and, at
the point named by ORDER_SAGA_KILL_AT, SIGKILLs its process: a crash exactly there, with
nothing flushed or released. Just before dying it writes ORDER_SAGA_KILL_REPORT (JSON): the
point, and the steps of this process whose function had started and whose checkpoint it
had not yet seen stored: the steps a kill interrupts mid-way, the only ones allowed to run
again. The example keeps no seam for this; the kill points live here.

Points, `NAME:WHEN`. A step (`charge`, `refund`; a child's `book:PARCEL`): `before` (reached,
nothing run), `mid` (its function returned, so the side effect happened, and its
checkpoint is not written), `after` (the checkpoint stored). The approval wait
(`approval`) and the wait for the children (`wait_all`): `parked` (the park stored) and
`after` (the wait answered). A spawn (`ship:PARCEL`): `after` (the child stored).
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from runnerq_cli import HandlerRegistry
from runnerq_cli.worker.durable import Suspended


def _load_example() -> Any:
    path = Path(__file__).resolve().parents[1] / "examples" / "order_saga.py"
    spec = importlib.util.spec_from_file_location("examples_order_saga", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


saga = _load_example()
registry = HandlerRegistry()  # ours only: load_app collects every registry among globals

_lock = threading.Lock()
_in_flight: set[str] = set()  # steps whose function started, checkpoint not seen stored


def reached(point: str) -> None:
    """Die here if this is the kill point. The lock is held to the end, so no step of
    another thread starts or is seen stored after the report's snapshot."""
    if point != os.environ.get("ORDER_SAGA_KILL_AT"):
        return
    with _lock:
        report = json.dumps({"point": point, "in_flight": sorted(_in_flight)})
        Path(os.environ["ORDER_SAGA_KILL_REPORT"]).write_text(report)
        os.kill(os.getpid(), signal.SIGKILL)


class KillPoints:
    """The worker's ctx, forwarding every call, with the kill points around them."""

    def __init__(self, ctx: Any, suffix: str = "") -> None:
        self._ctx = ctx
        self._suffix = suffix  # a child's steps are named with its parcel: book:p2

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ctx, name)

    def step(self, name: str, fn: Callable[[], Any]) -> Any:
        key = name + self._suffix

        def run() -> Any:
            with _lock:
                _in_flight.add(key)
            value = fn()
            reached(f"{key}:mid")
            return value

        reached(f"{key}:before")
        try:
            value = self._ctx.step(name, run)
        finally:
            with _lock:  # stored (or failed for good, or not run: a replay)
                _in_flight.discard(key)
        reached(f"{key}:after")
        return value

    def wait_for_signal(self, name: str, timeout: float | None = None) -> Any:
        try:
            value = self._ctx.wait_for_signal(name, timeout)
        except Suspended:
            reached(f"{name}:parked")
            raise
        reached(f"{name}:after")
        return value

    def spawn(self, activity_type: str, payload: Any = None, *, step: str,
              **options: Any) -> Any:
        handle = self._ctx.spawn(activity_type, payload, step=step, **options)
        reached(f"{step}:after")
        return handle

    def wait_all(self, handles: Sequence[Any]) -> list[Any]:
        try:
            values: list[Any] = self._ctx.wait_all(handles)
        except Suspended:
            reached("wait_all:parked")
            raise
        reached("wait_all:after")
        return values


@registry.handler("order")
def order(payload: dict[str, Any], ctx: Any) -> Any:
    return saga.order(payload, KillPoints(ctx))


@registry.handler("ship_parcel")
def ship_parcel(payload: dict[str, Any], ctx: Any) -> Any:
    return saga.ship_parcel(payload, KillPoints(ctx, f":{payload['parcel']}"))
