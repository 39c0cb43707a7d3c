"""The vocabulary of docs/design.md: its enums (priorities, statuses, outcomes), what an
enqueue returns, metadata keys, and the JSON form of stored values.

The event types are event_types.py and the typed views of whole documents (`Activity`,
`Claim`, `Event`, ...) documents.py: an enqueue builds none of them, and a command that
only enqueues need not compile or build them (benchmarks/bench_cli_startup.py part 2)."""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from enum import Enum, IntEnum, StrEnum
from typing import Any

from runnerq_cli.backend.domain.sizes import METADATA_KEY_MAX
from runnerq_cli.errors import InvalidArgument, RunnerQError


class MalformedDocument(RunnerQError, ValueError):
    """A stored document lacks a field its reader needs, or has it with the wrong type
    (another program's, or a hand edit). Lists skip such documents (shapes.py); a read
    of that one document fails with this."""

    @property
    def problem(self) -> str:
        """What is wrong, without the document's name: `priority is missing`."""
        return str(self).split(": ", 1)[-1]


class Priority(IntEnum):
    LOW = 1
    NORMAL = 2
    HIGH = 3
    CRITICAL = 4

    @classmethod
    def parse(cls, value: str | int) -> Priority:
        """`low|normal|high|critical` (any case) or 1-4."""
        text = str(value).strip()
        if text in ("1", "2", "3", "4"):  # not isdigit(): '²' is a digit int() refuses
            return cls(int(text))
        try:
            return cls[text.upper()]
        except KeyError:
            raise InvalidArgument(
                f"unknown priority {value!r}: use low, normal, high, critical or 1-4"
            ) from None

    @classmethod
    def label(cls, value: Any) -> str:
        """The name users see (`high`), or an integer of no name as text (`7`). A stored
        value that is no integer (another program's text "high", a missing one) is
        `malformed`: counted under the name it imitates, it would pass for real work."""
        if not isinstance(value, int) or isinstance(value, bool):
            return "malformed"
        try:
            return cls(value).name.lower()
        except ValueError:
            return str(value)


class Status(StrEnum):
    PENDING = "pending"
    SCHEDULED = "scheduled"
    PROCESSING = "processing"
    WAITING = "waiting"  # a parked durable activity (docs/design.md, "Parking")
    COMPLETED = "completed"
    FAILED = "failed"
    DEAD_LETTER = "dead_letter"
    CANCELLED = "cancelled"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL_STATUSES

    @classmethod
    def parse(cls, value: str) -> Status:
        """Accepts the stored names, `dead-letter`, and `running` for processing."""
        text = value.strip().lower().replace("-", "_")
        if text == "running":
            return cls.PROCESSING
        try:
            return cls(text)
        except ValueError:
            names = ", ".join(s.value.replace("_", "-") for s in cls)
            raise InvalidArgument(f"unknown status {value!r}: use one of {names}") from None


# The statuses by what they mean, each set defined once, in the order of `Status` (typed:
# mypy reads them from modules in an import cycle with this one).
Statuses = tuple[Status, ...]
# Not started: operators may move them.
WAITING_STATUSES: Statuses = (Status.PENDING, Status.SCHEDULED)
# Work to do; never ages out (a parked durable activity too)
LIVE_STATUSES: Statuses = (*WAITING_STATUSES, Status.PROCESSING, Status.WAITING)
# Ended without success: retention's "failed" kind, what `retry` restarts.
UNSUCCESSFUL_STATUSES: Statuses = (Status.FAILED, Status.DEAD_LETTER, Status.CANCELLED)
TERMINAL_STATUSES: Statuses = (Status.COMPLETED, *UNSUCCESSFUL_STATUSES)


class OnDuplicate(StrEnum):
    """What `enqueue` does when the idempotency key is already held (docs/design.md,
    "Idempotency keys")."""

    ALLOW_REUSE = "allow-reuse"
    RETURN_EXISTING = "return-existing"
    ALLOW_REUSE_ON_FAILURE = "allow-reuse-on-failure"
    NO_REUSE = "no-reuse"

    @classmethod
    def parse(cls, value: str | OnDuplicate) -> OnDuplicate:
        if isinstance(value, OnDuplicate):
            return value
        if not isinstance(value, str):
            raise InvalidArgument(f"unknown on_duplicate {str(value)[:40]!r}: expected text",
                                  "on_duplicate")
        text = value.strip().lower().replace("_", "-")
        aliases = {"allowreuse": "allow-reuse", "returnexisting": "return-existing",
                   "allowreuseonfailure": "allow-reuse-on-failure", "noreuse": "no-reuse"}
        text = aliases.get(text.replace("-", ""), text)
        try:
            return cls(text)
        except ValueError:
            names = ", ".join(m.value for m in cls)
            raise InvalidArgument(f"unknown on_duplicate {value!r}: use one of {names}",
                                  "on_duplicate") from None


class AckOutcome(StrEnum):
    """What acknowledging an attempt did to the activity."""

    COMPLETED = "completed"
    RETRYING = "retrying"
    FAILED = "failed"
    DEAD_LETTERED = "dead_lettered"


# Fields of a `dlq export` line that say where it came from; `enqueue --from` ignores them
# (they are not typos) and `dlq import` reads only `original_id` of them.
EXPORT_INFO_FIELDS = ("original_id", "queue", "status", "error", "attempts", "retry_count",
                      "created_at", "dead_lettered_at", "last_error_at",
                      "original_idempotency_key")


# Fields an enqueue writes for durable activities (docs/design.md, "Durable activities";
# waits.py holds the statements that read them). AWAITED marks an activity some other
# activity waits on: its publication must wake (a success's acknowledgement then sends a
# wake; a plain one does not). SPAWN_FENCE marks a child inserted under a spawn's fence,
# not yet confirmed ("Spawning").
AWAITED = "awaited"
SPAWN_FENCE = "spawn_fence"


# Metadata a fired activity carries (design.md, "What a fired activity carries"), and the
# names its enqueue step shows them under (derived.derive: `events`, `show`, the tail).
META_SCHEDULE, META_FIRE_AT, META_FIRE = "runnerq_schedule", "runnerq_fire_at", "runnerq_fire"
FIRE_DETAIL = {META_SCHEDULE: "schedule", META_FIRE: "fire", META_FIRE_AT: "fire_at"}


def fired_by(metadata: Any) -> dict[str, str]:
    """The schedule fire an activity's metadata names, as its enqueue step's detail
    (`schedule`, `fire`, `fire_at`): {} for an activity no schedule fired. Only text is
    taken (another program's metadata may hold anything under these keys)."""
    if not isinstance(metadata, dict) or not isinstance(metadata.get(META_SCHEDULE), str):
        return {}
    return {shown: metadata[key] for key, shown in FIRE_DETAIL.items()
            if isinstance(metadata.get(key), str)}


def check_metadata_key(key: str) -> str:
    """A metadata key that can be stored and filtered on as `metadata.KEY`.

    No leading `$` and no `.`: either would turn a tag into a query operator
    or a nested path when an operator filters on it.
    """
    from runnerq_cli.values import shown

    if not isinstance(key, str) or not key or len(key) > METADATA_KEY_MAX \
            or key.startswith("$") or "." in key or "\x00" in key or not _utf8(key):
        raise InvalidArgument(f"invalid metadata key {shown(key)}: 1-{METADATA_KEY_MAX} "
                              "characters of UTF-8, no '.', not starting with '$'")
    return key


def _utf8(text: str) -> bool:
    """False for text with an unpaired surrogate (from a JSON escape): BSON cannot store it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def parse_metadata_pairs(items: Iterable[str], option: str = "metadata") -> dict[str, str]:
    """`KEY=VALUE` strings (a repeatable option) into a dict; a later key wins."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise InvalidArgument(f"{option}: expected KEY=VALUE, got {item!r}")
        out[check_metadata_key(key.strip())] = value
    return out


def parse_activity_id(value: str | uuid.UUID) -> uuid.UUID:
    """A UUID from its text form; InvalidArgument otherwise."""
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value).strip())
    except ValueError:
        raise InvalidArgument(f"invalid activity id {value!r}: expected a UUID") from None


def display_status(status: str, retry_count: int = 0) -> str:
    """Canonical reporting name: processing is *running*; a scheduled retry is *retrying*."""
    if status == Status.PROCESSING.value:
        return "running"
    if status == Status.SCHEDULED.value and retry_count > 0:
        return "retrying"
    return status


@dataclass(frozen=True)
class EnqueueResult:
    """The activity an enqueue refers to, and whether this call created it."""

    activity_id: uuid.UUID
    created: bool
    status: str


def display_time(value: datetime | None) -> str:
    """A time in sentences for people: the CLI's one text format (UTC to the millisecond,
    docs/cli.md "Output conventions"), "?" when unknown."""
    if value is None:
        return "?"
    return value.strftime("%Y-%m-%d %H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"


def to_jsonable(value: Any) -> Any:
    """Dates to ISO-8601 (UTC), UUIDs and ObjectIds to strings, recursively; NaN and
    the infinities (stored by another program: JSON has no such numbers) to the
    strings "NaN", "Infinity" and "-Infinity", so the output stays valid JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, datetime):
        return value.isoformat().replace("+00:00", "Z")
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    if isinstance(value, Enum):
        return value.value
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)
