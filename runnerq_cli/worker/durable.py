"""The worker's replay: durable primitives answered from what is stored.

A durable handler runs again from the top after every wake, retry or crash
(docs/design.md, "The replay contract"; docs/workers.md, "Durable handlers"). Each
primitive first reads what an earlier run stored under its name and answers from it;
only what was never stored runs or waits. `Replay` holds one attempt's state: its claim
(every write is fenced on it), the names used in this run, whether a durable wait is
in progress, and whether the attempt has parked.

A wait that cannot finish within the attempt parks the activity (the storage's `park`,
which ends the claim without counting an attempt) and raises `Suspended`, a control-flow
exception (a BaseException, so `except Exception` in a handler does not swallow it) that
the worker catches: a parked attempt has no outcome to write (execute.py, outcomes.py).
"""

from __future__ import annotations

import contextvars
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from runnerq_cli.backend.domain.checkpoints import (
    Kind,
    ParkKind,
    checked_name,
    checked_timeout,
    checkpoint_id,
    step_key,
)
from runnerq_cli.backend.domain.models import OnDuplicate
from runnerq_cli.backend.domain.specs import ActivitySpec
from runnerq_cli.errors import CheckpointConflict, InvalidArgument
from runnerq_cli.worker.handlers import NonRetryableError, RetryableError

if TYPE_CHECKING:
    from runnerq_cli.backend.domain.documents import Claim, Result
    from runnerq_cli.backend.domain.models import EnqueueResult


class DurableStore(Protocol):
    """What the replay needs of the durable storage (`RunnerQ.durable`, the backend's
    backend/queue/durable.py): the worker depends on this shape, not on the backend."""

    def checkpoint(self, claim: Claim, result_id: uuid.UUID, state: str, data: Any,
                   step: str | None) -> None: ...

    def register_dependency(self, claim: Claim, producer: uuid.UUID) -> None: ...

    def park(self, claim: Claim, kind: str, step: str, wake_at: datetime,
             result_id: uuid.UUID | None = None, producer: uuid.UUID | None = None
             ) -> bool: ...

    def get_result(self, result_id: uuid.UUID) -> Result | None: ...

    def spawn(self, claim: Claim, spec: ActivitySpec) -> EnqueueResult: ...

    def now(self) -> datetime: ...

__all__ = ["ChildFailed", "ChildHandle", "DurableContractError", "Replay", "SignalTimeout",
           "StepFailed", "Suspended"]

IN_PROCESS_AWAIT = 2.0  # seconds a wait for children is waited in process before parking
POLL = 0.1  # seconds between looks at a child's result while waiting in process
MARGIN = 2.0  # an in-process sleep keeps min(MARGIN, half the remainder) of the timeout
FOREVER = timedelta(days=36500)  # the wake time of a wait without a deadline
# Set while a step's function runs: a durable call inside it breaks the contract.
_IN_STEP: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "runnerq_in_step", default=None)
SPAWN_OPTIONS = frozenset({"priority", "delay_seconds", "scheduled_at", "max_retries",
                           "timeout_seconds", "retry_delay_seconds", "metadata"})


class Suspended(BaseException):
    """The attempt parked (a sleep, a signal wait, an await): the claim is over and the
    worker writes no outcome. Let it propagate: a handler that swallows it still ends
    parked (the worker knows), but code after it would run for nothing."""


class DurableContractError(NonRetryableError):
    """The handler broke the replay contract (a duplicate name, a durable call inside a
    step's function, two durable waits at once): the activity fails for good, since a
    retry would break it again."""


class StepFailed(NonRetryableError):
    """A step whose function failed for good: raised again, from its stored Err, on
    every replay (its function does not run again)."""


class SignalTimeout(NonRetryableError):
    """`wait_for_signal` reached its deadline without the signal."""


class ChildFailed(NonRetryableError):
    """A child activity ended without a value (failed, dead-lettered or cancelled)."""

    def __init__(self, child: ChildHandle, error: str) -> None:
        super().__init__(f"child {child.step!r} ({child.activity_id}) failed: {error}")
        self.child = child
        self.error = error


@dataclass(frozen=True)
class ChildHandle:
    """A spawned child: what `wait` and `wait_all` take."""

    activity_id: uuid.UUID
    activity_type: str
    step: str
    created: bool  # False when a replay re-attached to the child an earlier run spawned


def _error_of(result: Result) -> str:
    data = result.data
    if isinstance(data, Mapping) and data.get("error") is not None:
        return str(data["error"])
    return str(data)


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _parse_time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, str):
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    return None


class Replay:
    """One attempt's durable state and its primitives (sync; the async forms in
    durable_context.py use the same plans)."""

    def __init__(self, durable: DurableStore, claim: Claim, timeout_at: float,
                 cancelled: threading.Event) -> None:
        self.durable = durable
        self.claim = claim
        self.timeout_at = timeout_at  # monotonic: when the attempt times out
        self.cancelled = cancelled
        self.parked = False
        self.broken: DurableContractError | None = None
        self._names: set[tuple[str, str]] = set()
        self._waits = 0
        self._lock = threading.Lock()

    @property
    def activity_id(self) -> uuid.UUID:
        return self.claim.activity_id

    # ------------------------------------------------------------ the contract

    def _break(self, message: str) -> DurableContractError:
        error = DurableContractError(message)
        self.broken = self.broken or error
        return error

    def enter(self, call: str, kind: str | None, name: Any, what: str) -> str:
        """Check a durable call before anything is read or written: a valid name
        (InvalidArgument), not inside a step's function, not after the attempt parked or
        broke the contract, and (with `kind`) a name not used before in this run."""
        if self.parked:
            raise Suspended()
        if self.broken is not None:
            raise self.broken
        checked = checked_name(name, what)
        inside = _IN_STEP.get()
        if inside is not None:
            raise self._break(f"ctx.{call}({checked!r}) inside the function of step "
                              f"{inside!r}: durable calls belong in the handler, not in a "
                              "step (the step's function may run again)")
        if kind is not None:
            with self._lock:
                if (kind, checked) in self._names:
                    raise self._break(f"ctx.{call}: the name {checked!r} is used twice in "
                                      "one run; names are the keys of what is stored and "
                                      "must be unique within a handler")
                self._names.add((kind, checked))
        return checked

    def begin_wait(self, call: str) -> None:
        """A durable wait starts; two at once (asyncio.gather) break the contract: a
        parked activity waits for one thing."""
        with self._lock:
            if self._waits:
                raise self._break(f"ctx.{call} while another durable wait is in progress: "
                                  "wait for one thing at a time (use ctx.wait_all for "
                                  "several children), not asyncio.gather of waits")
            self._waits += 1

    def end_wait(self) -> None:
        with self._lock:
            self._waits -= 1

    def _park(self, kind: ParkKind, step: str, wake_at: datetime,
              result_id: uuid.UUID | None = None, producer: uuid.UUID | None = None) -> None:
        if self.broken is not None:
            raise self.broken
        if producer is not None:
            self.durable.register_dependency(self.claim, producer)
        self.durable.park(self.claim, kind.value, step, wake_at, result_id=result_id,
                          producer=producer)
        self.parked = True
        raise Suspended()

    def _remaining(self) -> float:
        """Seconds an in-process wait may use: the attempt's remaining timeout less a
        margin of min(MARGIN, half the remainder)."""
        left = self.timeout_at - time.monotonic()
        return left - min(MARGIN, left / 2) if left > 0 else 0.0

    def _store(self, result_id: uuid.UUID, state: str, data: Any, step: str | None) -> Any:
        """Write a checkpoint; a conflict (another run stored first) answers the stored
        value, which wins."""
        try:
            self.durable.checkpoint(self.claim, result_id, state, data, step)
        except CheckpointConflict:
            stored = self.durable.get_result(result_id)
            if stored is None:
                raise
            return stored.data
        return data

    # ------------------------------------------------------------------ steps

    def step_lookup(self, name: Any) -> tuple[str, uuid.UUID, Result | None]:
        checked = self.enter("step", Kind.RUN.value, name, "step name")
        cid = checkpoint_id(self.activity_id, Kind.RUN.value, checked)
        return checked, cid, self.durable.get_result(cid)

    @staticmethod
    def replayed(name: str, found: Result) -> Any:
        if found.state == "Ok":
            return found.data
        raise StepFailed(f"step {name!r} failed: {_error_of(found)}")

    def step_failed(self, name: str, cid: uuid.UUID, error: NonRetryableError) -> None:
        """Memoize a step's failure for good: replays raise it again without running."""
        message = str(error) or type(error).__name__
        self._store(cid, "Err", {"error": message}, f"run:{name}")

    def step_done(self, name: str, cid: uuid.UUID, value: Any) -> Any:
        """Store the step's value. One that cannot be stored (not JSON, too large) fails
        the activity for good, as a handler's result that cannot be stored does: a
        retry would run the step again for the same refusal."""
        try:
            return self._store(cid, "Ok", value, f"run:{name}")
        except InvalidArgument as exc:
            raise NonRetryableError(f"step {name!r}: its value cannot be stored: {exc}"
                                    ) from None

    def step(self, name: Any, fn: Callable[[], Any]) -> Any:
        """Run `fn` once: its value is stored and answered on every replay."""
        checked, cid, found = self.step_lookup(name)
        if found is not None:
            return self.replayed(checked, found)
        token = _IN_STEP.set(checked)
        try:
            value = fn()
        except NonRetryableError as exc:
            if not isinstance(exc, DurableContractError):
                self.step_failed(checked, cid, exc)
            raise
        finally:
            _IN_STEP.reset(token)
        return self.step_done(checked, cid, value)

    # ------------------------------------------------------------------ sleeps

    def sleep_plan(self, name: Any, seconds: Any) -> float:
        """The seconds to wait in process (0: the sleep is over); parks (Suspended) when
        the wait does not fit the attempt."""
        seconds = checked_timeout(seconds, "sleep duration")
        checked = self.enter("sleep", Kind.SLEEP.value, name, "sleep name")
        cid = checkpoint_id(self.activity_id, Kind.SLEEP.value, checked)
        found = self.durable.get_result(cid)
        wake_at = _parse_time(found.data.get("wake_at")) if found is not None and isinstance(
            found.data, Mapping) else None
        if wake_at is None:
            wanted = self.durable.now() + timedelta(seconds=seconds)
            stored = self._store(cid, "Ok", {"wake_at": _iso(wanted)}, f"sleep:{checked}")
            wake_at = _parse_time(stored.get("wake_at") if isinstance(stored, Mapping)
                                  else None) or wanted
        left = (wake_at - self.durable.now()).total_seconds()
        if left <= 0:
            return 0.0
        if left <= self._remaining():
            return left
        self._park(ParkKind.SLEEP, f"sleep:{checked}", wake_at)
        raise AssertionError("unreachable")  # pragma: no cover

    def sleep(self, name: Any, seconds: Any) -> None:
        self.begin_wait("sleep")
        try:
            self.block(self.sleep_plan(name, seconds))
        finally:
            self.end_wait()

    def block(self, seconds: float) -> None:
        """Wait in process, ending early (retryable) if the attempt is cancelled."""
        if self.cancelled.wait(seconds):
            raise RetryableError("the attempt ended (timed out, lost its claim or the worker "
                                 "is stopping) during a durable wait")

    # ----------------------------------------------------------------- signals

    def wait_for_signal(self, name: Any, timeout: Any = None, held: bool = False) -> Any:
        """The signal's payload: one sent before the wait counts; parks until it comes
        or the deadline (timeout seconds from the first arrival; None: no deadline)."""
        seconds = None if timeout is None else checked_timeout(timeout, "signal timeout")
        checked = self.enter("wait_for_signal", Kind.SIGNAL.value, name, "signal name")
        if not held:  # the async form holds the wait from the loop
            self.begin_wait("wait_for_signal")
        try:
            signal_id = checkpoint_id(self.activity_id, Kind.SIGNAL.value, checked)
            found = self.durable.get_result(signal_id)
            if found is not None:
                return found.data
            deadline = self._deadline(checked, seconds)
            if deadline is not None and deadline <= self.durable.now():
                found = self.durable.get_result(signal_id)  # once more, at the deadline
                if found is not None:
                    return found.data
                raise SignalTimeout(f"no signal {checked!r} within {_iso(deadline)}: the "
                                    "wait timed out")
            self._park(ParkKind.SIGNAL, f"signal:{checked}",
                       deadline or self.durable.now() + FOREVER, result_id=signal_id)
            raise AssertionError("unreachable")  # pragma: no cover
        finally:
            if not held:
                self.end_wait()

    def _deadline(self, name: str, seconds: float | None) -> datetime | None:
        """The wait's deadline, fixed at its first arrival (the `signalwait` record)."""
        rid = checkpoint_id(self.activity_id, Kind.SIGNAL_WAIT.value, name)
        found = self.durable.get_result(rid)
        if found is None:
            wanted = None if seconds is None else self.durable.now() + timedelta(seconds=seconds)
            data = self._store(rid, "Ok", {"deadline": None if wanted is None
                                           else _iso(wanted)}, None)
        else:
            data = found.data
        return _parse_time(data.get("deadline")) if isinstance(data, Mapping) else None

    # ---------------------------------------------------------------- children

    def spawn(self, activity_type: str, payload: Mapping[str, Any] | None, step: Any,
              options: Mapping[str, Any]) -> ChildHandle:
        """A child keyed by its step (step_key), fenced on the claim: a replay answers
        the child the earlier run spawned."""
        unknown = sorted(set(options) - SPAWN_OPTIONS)
        if unknown:
            raise InvalidArgument(f"ctx.spawn does not take {', '.join(unknown)} (a child's "
                                  "id and key come from its step)")
        checked = self.enter("spawn", "spawn", step, "spawn step")
        act = self.claim.activity
        root = act.extra.get("root_activity_id") or act.id
        spec = ActivitySpec(activity_type, dict(payload or {}),
                            idempotency_key=step_key(root, act.id, checked),
                            on_duplicate=OnDuplicate.RETURN_EXISTING, **options)
        answer = self.durable.spawn(self.claim, spec)
        return ChildHandle(answer.activity_id, activity_type, checked, answer.created)

    def children_plan(self, handles: Sequence[ChildHandle]) -> list[ChildHandle]:
        """Check `wait_all`'s argument; the children whose results are not there yet."""
        if self.parked:
            raise Suspended()
        if self.broken is not None:
            raise self.broken
        if not isinstance(handles, Sequence) or not all(
                isinstance(h, ChildHandle) for h in handles):
            raise InvalidArgument("ctx.wait and ctx.wait_all take what ctx.spawn returned")
        if _IN_STEP.get() is not None:
            raise self._break(f"ctx.wait inside the function of step {_IN_STEP.get()!r}: "
                              "durable calls belong in the handler, not in a step")
        return [h for h in handles if self.durable.get_result(h.activity_id) is None]

    def park_on(self, missing: list[ChildHandle]) -> None:
        """Park until the first missing child's result (a replay looks again)."""
        first = missing[0]
        self._park(ParkKind.AWAIT, f"child:{first.step}", self.durable.now() + FOREVER,
                   result_id=first.activity_id, producer=first.activity_id)

    def collect(self, handles: Sequence[ChildHandle]) -> list[Any]:
        """Every child's value, in order; the first that failed raises ChildFailed."""
        values = []
        for handle in handles:
            found = self.durable.get_result(handle.activity_id)
            if found is None:  # pragma: no cover - checked by the caller
                raise RetryableError(f"child {handle.activity_id} has no result yet")
            if found.state != "Ok":
                raise ChildFailed(handle, _error_of(found))
            values.append(found.data)
        return values

    def in_process_for(self) -> float:
        return max(0.0, min(IN_PROCESS_AWAIT, self._remaining()))

    def wait_all(self, handles: Sequence[ChildHandle]) -> list[Any]:
        missing = self.children_plan(handles)
        self.begin_wait("wait_all" if len(handles) != 1 else "wait")
        try:
            until = time.monotonic() + self.in_process_for()
            while missing and time.monotonic() < until:
                self.block(min(POLL, max(0.0, until - time.monotonic())))
                missing = [h for h in missing
                           if self.durable.get_result(h.activity_id) is None]
            if missing:
                self.park_on(missing)
            return self.collect(handles)
        finally:
            self.end_wait()
