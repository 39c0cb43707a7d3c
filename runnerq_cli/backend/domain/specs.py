"""Activity specs: `ActivitySpec`, its bounds, and its options from what users type.

`enqueue` (its flags and `--from` lines) and `dlq import` read the same options;
every value goes through `values.py` (durations and times through times.py), and
`ActivitySpec` checks the whole, so a value is refused once, with one message,
whatever reads it. A whole NDJSON line (`enqueue --from`, `dlq import`) is read by
spec_lines.py: a plain enqueue reads none, and need not compile it.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from runnerq_cli import values
from runnerq_cli.backend.domain import tracecontext
from runnerq_cli.backend.domain.models import (
    OnDuplicate,
    Priority,
    check_metadata_key,
)
from runnerq_cli.backend.domain.sizes import ACTIVITY_TYPE_MAX, IDEMPOTENCY_KEY_MAX_BYTES
from runnerq_cli.errors import InvalidArgument

if TYPE_CHECKING:
    from runnerq_cli.backend.domain.write_times import When

DEFAULT_MAX_RETRIES = 3
DEFAULT_TIMEOUT_SECONDS = 300
DEFAULT_RETRY_DELAY_SECONDS = 1
KEY_MAX_CHARS = 200


def flow_key(value: Any, what: str = "key") -> str:
    """An activity's flow key (docs/design.md, "Flow control"): text of 1 to 200
    characters, one line. Here, not with the limits (flow.py), since every enqueue
    checks it and only claims and `limit` need the rest."""
    if not isinstance(value, str) or not value:
        raise InvalidArgument(f"{what}: expected a non-empty text, got {values.shown(value)}")
    from runnerq_cli.texts import one_line_text

    return one_line_text(value, what, max_chars=KEY_MAX_CHARS)


@dataclass(frozen=True)
class ActivitySpec:
    """What a producer asks for; validated on construction."""

    activity_type: str
    payload: Mapping[str, Any] = field(default_factory=dict)
    priority: Priority | int | str = Priority.NORMAL
    delay_seconds: float | None = None
    scheduled_at: datetime | None = None
    max_retries: int = DEFAULT_MAX_RETRIES
    timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS
    retry_delay_seconds: int = DEFAULT_RETRY_DELAY_SECONDS
    metadata: Mapping[str, str] = field(default_factory=dict)
    idempotency_key: str | None = None
    on_duplicate: OnDuplicate | str = OnDuplicate.RETURN_EXISTING
    # W3C trace context (tracecontext.py, traceparent.py): None takes the caller's current
    # one, if any; a malformed one is dropped, never refused (docs/design.md, "Trace context").
    trace_context: Mapping[str, str] | None = None
    # The id to give the activity (None: a new random one); the conformance driver's
    # runner chooses ids.
    activity_id: uuid.UUID | None = None
    # A child's lineage (docs/design.md, "Durable activities"): None for a root.
    parent_id: uuid.UUID | None = None
    root_id: uuid.UUID | None = None
    depth: int = 0
    # Set by a fenced spawn only: the parent claim's lease, held until the spawn confirms.
    spawn_fence: str | None = None
    # Flow control (docs/design.md, "Flow control"): the key that groups the type's work
    # for per-key limits and fairness; a debounce replaces a still-scheduled activity of
    # the same type and key (the newest payload wins) and delays it again.
    key: str | None = None
    debounce_seconds: float | None = None

    def __post_init__(self) -> None:
        if self.trace_context is None:
            object.__setattr__(self, "trace_context", tracecontext.current())
        else:
            from runnerq_cli.backend.domain.traceparent import clean

            object.__setattr__(self, "trace_context", clean(self.trace_context))
        object.__setattr__(self, "priority", Priority.parse(self.priority))
        object.__setattr__(self, "on_duplicate", OnDuplicate.parse(self.on_duplicate))
        if not isinstance(self.activity_type, str) or not self.activity_type.strip():
            raise InvalidArgument("activity type must be a non-empty string")
        if not isinstance(self.payload, Mapping):
            raise InvalidArgument("payload must be a JSON object")
        for name, low in (("max_retries", 0), ("timeout_seconds", 1), ("retry_delay_seconds", 0)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise InvalidArgument(f"{name} must be a whole number of at least {low}")
        if self.delay_seconds is not None and (
            not math.isfinite(self.delay_seconds) or self.delay_seconds < 0
        ):
            raise InvalidArgument("delay must not be negative")
        if self.delay_seconds is not None and self.scheduled_at is not None:
            raise InvalidArgument("give a delay or a time to run at, not both")
        if self.scheduled_at is not None and self.scheduled_at.tzinfo is None:
            raise InvalidArgument("scheduled_at must be timezone-aware")
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in self.metadata.items()):
            raise InvalidArgument("metadata must map strings to strings")
        for key in self.metadata:
            check_metadata_key(key)
        if self.idempotency_key is not None and (
            not isinstance(self.idempotency_key, str) or not self.idempotency_key
        ):
            raise InvalidArgument("idempotency key must be a non-empty string")
        if not isinstance(self.depth, int) or isinstance(self.depth, bool) or self.depth < 0:
            raise InvalidArgument("depth must be a whole number of at least 0")
        self._check_flow()
        activity_limits(self)  # storable payload, bounded numbers and times

    def _check_flow(self) -> None:
        """A key is text of 1-200 characters; a debounce needs one, and is the delay."""
        if self.key is not None:
            flow_key(self.key)
        if self.debounce_seconds is None:
            return
        if self.key is None:
            raise InvalidArgument("debounce needs a key: activities are debounced per key",
                                  "debounce_seconds")
        from runnerq_cli.times import duration

        seconds = duration(self.debounce_seconds, "debounce_seconds", maximum=86400)
        if seconds <= 0:
            raise InvalidArgument("debounce_seconds: must be longer than 0 seconds")
        if self.delay_seconds is not None or self.scheduled_at is not None:
            raise InvalidArgument("give a debounce or a delay, not both")
        object.__setattr__(self, "debounce_seconds", seconds)
        object.__setattr__(self, "delay_seconds", seconds)

    def due_at(self, now: datetime | Callable[[], datetime],
               at: When | None = None) -> When | None:
        """When a delayed activity becomes due, or None to run as soon as possible.

        A time to run at is compared with `now` (or a clock, asked only then); a delay
        counts from `at` (the time the write sets: the server's `$$NOW`), else `now`."""
        if self.scheduled_at is not None:
            current = now if isinstance(now, datetime) else now()
            return self.scheduled_at if self.scheduled_at > current else None
        if self.delay_seconds:
            start = at if at is not None else now if isinstance(now, datetime) else now()
            return start + timedelta(seconds=self.delay_seconds)
        return None


def spec_options(*, priority: Any = None, delay: Any = None, at: Any = None,
                 max_retries: Any = None, timeout: Any = None, retry_delay: Any = None,
                 metadata: dict[str, str] | None = None, idempotency_key: Any = None,
                 on_duplicate: Any = None,
                 name: Callable[[str], str] = str) -> dict[str, Any]:
    """ActivitySpec keyword arguments for the options given (None: the spec's default).

    Errors name a value by its line field ("delay"), or by what `name` makes of
    that (the CLI passes its flag names).
    """

    options: dict[str, Any] = {}
    if priority is not None:
        options["priority"] = Priority.parse(priority)
    if delay is not None and at is not None:
        raise InvalidArgument(f"give {name('delay')} or {name('at')}, not both")
    if any(v is not None for v in (delay, at, timeout, retry_delay)):
        from runnerq_cli.times import duration, time  # (a plain enqueue gives none of them)
    if delay is not None:
        options["delay_seconds"] = duration(delay, name("delay"))
    if at is not None:
        options["scheduled_at"] = time(at, name("at"), relative=False)
    if max_retries is not None:
        options["max_retries"] = values.integer(max_retries, name("max_retries"), minimum=0)
    if timeout is not None:
        options["timeout_seconds"] = duration(timeout, name("timeout"), minimum=1, whole=True)
    if retry_delay is not None:
        options["retry_delay_seconds"] = duration(retry_delay, name("retry_delay"), whole=True)
    if metadata:
        options["metadata"] = metadata
    if idempotency_key is not None:
        if not isinstance(idempotency_key, str) or not idempotency_key:
            raise InvalidArgument(f"{name('idempotency_key')}: expected a non-empty string")
        options["idempotency_key"] = idempotency_key
    if on_duplicate is not None:
        options["on_duplicate"] = OnDuplicate.parse(on_duplicate)
    return options


def activity_limits(spec: ActivitySpec) -> None:
    """The bounds of an ActivitySpec that its type checks do not cover: text that can be
    stored within its bound (sizes.py), a storable payload, and numbers and times
    MongoDB and datetime arithmetic can hold. Errors name the parameter
    (activity_type, metadata, idempotency_key, payload)."""
    values.stored_text(spec.activity_type, "activity_type", max_chars=ACTIVITY_TYPE_MAX)
    if spec.idempotency_key is not None:
        values.stored_text(spec.idempotency_key, "idempotency_key",
                           max_bytes=IDEMPOTENCY_KEY_MAX_BYTES)
    values.metadata(spec.metadata)
    values.payload(spec.payload)
    for name in ("max_retries", "timeout_seconds", "retry_delay_seconds"):
        value = getattr(spec, name)
        if isinstance(value, int) and not isinstance(value, bool):
            values.integer(value, name, maximum=values.INT64_MAX if name == "max_retries"
                           else int(values.MAX_DURATION))
    if isinstance(spec.delay_seconds, int | float) and not isinstance(spec.delay_seconds, bool):
        from runnerq_cli.times import duration

        duration(spec.delay_seconds, "delay")
    if isinstance(spec.scheduled_at, datetime) and spec.scheduled_at.tzinfo is not None:
        from runnerq_cli.times import time

        time(spec.scheduled_at, "scheduled_at", relative=False)
