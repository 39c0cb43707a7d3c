"""Recurring schedules, pure: the definition and its checks, the fire instants, a fire's plan.

docs/design.md, "Schedules", is the contract. A definition (`ScheduleDef`) is what a
user writes (`schedule add`'s options, an entry of `schedule apply`'s file); it is
checked whole on construction, so a bad one is refused once with one message
(InvalidArgument) and nothing is written. A stored document reads back as a `Schedule`
(`Schedule.from_doc`), or as the problem that makes it malformed.

The instants of a cron are cronsim's (Debian cron's rules on the nights the clocks
change, the zone's rules from zoneinfo); an interval's are elapsed time from its
anchor. `plan_fire` decides a due fire from the document and the server's now alone,
so every firer that reads the same document decides the same.
"""

from __future__ import annotations

import hashlib
import math
import re
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from runnerq_cli import inputs, times, values
from runnerq_cli.backend.domain.models import (
    META_FIRE,
    META_FIRE_AT,
    META_SCHEDULE,
    Priority,
    check_metadata_key,
)
from runnerq_cli.backend.domain.specs import (
    DEFAULT_MAX_RETRIES,
    DEFAULT_TIMEOUT_SECONDS,
    ActivitySpec,
)
from runnerq_cli.errors import InvalidArgument

NAME_MAX = 200
_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,200}")
MISSED_POLICIES = ("skip", "latest", "all")
OVERLAP_POLICIES = ("allow", "skip", "buffer_one")
DEFAULT_MAX_CATCHUP = 10
MAX_CATCHUP_BOUND = 1000
DEFAULT_GRACE = 60.0
# The usual names, as Debian cron reads them (@reboot has no instant: refused).
CRON_NAMES = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
              "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
              "@hourly": "0 * * * *"}
# Statuses of a previous fire's activity that `overlap: skip` and `buffer_one` wait for.
UNFINISHED = ("pending", "scheduled", "processing")
_MS = timedelta(milliseconds=1)
# How far ahead a cron is looked at for its first instant (one that matches only on
# 29 February of a year divisible by 400 still has one within this).
_HORIZON_YEARS = 401


def check_name(value: Any) -> str:
    """A schedule's name: 1-200 letters, digits, `_`, `-`, `.`, `:` (its `_id`)."""
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise InvalidArgument(f"invalid schedule name {values.shown(value)}: 1-{NAME_MAX} "
                              "letters, digits, '_', '-', '.' or ':'", "name")
    return value


def check_zone(value: Any) -> ZoneInfo:
    """An IANA time zone (`Europe/Berlin`, `UTC`)."""
    if not isinstance(value, str) or not value or len(value) > 100 or value.startswith("/"):
        raise InvalidArgument(f"unknown time zone {values.shown(value)}: give an IANA name "
                              "such as Europe/Berlin or UTC", "timezone")
    try:
        return ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise InvalidArgument(f"unknown time zone {values.shown(value)}: give an IANA name "
                              "such as Europe/Berlin or UTC", "timezone") from None


def cron_fields(expression: Any) -> str:
    """The 5 fields of a cron expression (an @name expanded); InvalidArgument otherwise."""
    if not isinstance(expression, str) or not expression.strip() or len(expression) > 200:
        raise InvalidArgument(f"invalid cron expression {values.shown(expression)}: "
                              "expected 5 fields or @daily-style names", "cron")
    text = " ".join(expression.split())
    if text.startswith("@"):
        fields = CRON_NAMES.get(text.lower())
        if fields is None:
            raise InvalidArgument(f"invalid cron expression {values.shown(expression)}: known "
                                  f"names are {', '.join(CRON_NAMES)}", "cron")
        return fields
    if len(text.split()) != 5:
        raise InvalidArgument(f"invalid cron expression {values.shown(expression)}: expected "
                              "5 fields (minute hour day-of-month month day-of-week)", "cron")
    try:
        CronSim(text, datetime(2000, 1, 1, tzinfo=UTC))
    except CronSimError as exc:
        detail = str(exc).lower()
        if "day-of-month" in detail:
            detail += " (it never matches a date: no month has that day)"
        raise InvalidArgument(f"invalid cron expression {values.shown(expression)}: "
                              f"{detail}", "cron") from None
    except Exception:  # cronsim's own parsing errors beyond its CronSimError
        raise InvalidArgument(f"invalid cron expression {values.shown(expression)}",
                              "cron") from None
    return text


def parse_every(value: Any) -> float:
    """An interval: `every 10m`, `10m`, `90s`, or a number of seconds; more than 0."""
    text = value.strip() if isinstance(value, str) else value
    if isinstance(text, str) and text.lower().startswith("every"):
        text = text[5:].strip()
    seconds = times.duration(text, "interval")
    if seconds < 0.001:
        raise InvalidArgument(f"interval must be more than 0, got {values.shown(value)}",
                              "every")
    return seconds


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _ms(moment: datetime) -> datetime:
    """A UTC time at millisecond precision (what MongoDB stores)."""
    moment = _aware(moment).astimezone(UTC)
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)


def iso(moment: datetime) -> str:
    """An instant as keys and metadata spell it: UTC, milliseconds, `Z`."""
    return _ms(moment).strftime("%Y-%m-%dT%H:%M:%S.") + f"{_ms(moment).microsecond // 1000:03d}Z"


@dataclass(frozen=True)
class Template:
    """The activity each fire enqueues (the document's `activity`)."""

    activity_type: str
    payload: Mapping[str, Any] = field(default_factory=dict)
    priority: int = int(Priority.NORMAL)
    metadata: Mapping[str, str] = field(default_factory=dict)
    max_retries: int = DEFAULT_MAX_RETRIES
    timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS
    delay_seconds: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "priority", int(Priority.parse(self.priority)))
        if not isinstance(self.activity_type, str) or not self.activity_type.strip() \
                or len(self.activity_type) > 200:
            raise InvalidArgument("activity type must be 1-200 characters", "activity_type")
        for key in self.metadata:
            check_metadata_key(key)
        # The whole spec's checks (payload size and shape, numbers, metadata bounds).
        self.spec(datetime(2000, 1, 1, tzinfo=UTC), "schedule", "on_time", 0.0, "k")

    def spec(self, instant: datetime, name: str, kind: str, jitter: float,
             key: str) -> ActivitySpec:
        """The activity of one fire."""
        delay = self.delay_seconds + jitter
        return ActivitySpec(
            self.activity_type, dict(self.payload), priority=self.priority,
            delay_seconds=delay or None, max_retries=self.max_retries,
            timeout_seconds=self.timeout_seconds,
            metadata={**self.metadata, META_SCHEDULE: name, META_FIRE_AT: iso(instant),
                      META_FIRE: kind},
            idempotency_key=key, on_duplicate="return-existing")

    def to_doc(self) -> dict[str, Any]:
        return {"activity_type": self.activity_type, "payload": dict(self.payload),
                "priority": self.priority, "metadata": dict(self.metadata),
                "max_retries": self.max_retries, "timeout_seconds": self.timeout_seconds,
                "delay_seconds": self.delay_seconds}


@dataclass(frozen=True)
class ScheduleDef:
    """A schedule as its user defines it; checked whole on construction."""

    name: str
    activity: Template
    cron: str | None = None
    every_seconds: float | None = None
    timezone: str = "UTC"
    start_at: datetime | None = None
    end_at: datetime | None = None
    jitter_seconds: float = 0.0
    missed: str = "skip"
    max_catchup: int = DEFAULT_MAX_CATCHUP
    grace_seconds: float = DEFAULT_GRACE
    overlap: str = "allow"

    def __post_init__(self) -> None:
        check_name(self.name)
        if (self.cron is None) == (self.every_seconds is None):
            raise InvalidArgument("give a cron expression or an interval, one of them",
                                  "cron", "every")
        if self.cron is not None:
            cron_fields(self.cron)
        if self.every_seconds is not None and (
                isinstance(self.every_seconds, bool)
                or not isinstance(self.every_seconds, int | float)
                or not math.isfinite(self.every_seconds) or self.every_seconds < 0.001):
            raise InvalidArgument(f"interval must be more than 0, got "
                                      f"{values.shown(self.every_seconds)}", "every")
        check_zone(self.timezone)
        for what in ("start_at", "end_at"):
            moment = getattr(self, what)
            if moment is not None:
                if not isinstance(moment, datetime):
                    raise InvalidArgument(f"{what} must be a time", what)
                object.__setattr__(self, what, _ms(moment))
        if self.start_at is not None and self.end_at is not None \
                and self.start_at >= self.end_at:
            raise InvalidArgument(f"start {iso(self.start_at)} is not before end "
                                  f"{iso(self.end_at)}", "start_at", "end_at")
        for what, low in (("jitter_seconds", 0.0), ("grace_seconds", 1.0)):
            number = getattr(self, what)
            if isinstance(number, bool) or not isinstance(number, int | float) \
                    or not math.isfinite(number) or number < low or number > 366 * 86400:
                raise InvalidArgument(f"{what} must be between {low:g} and a year",
                                      what.removesuffix("_seconds"))
        if self.missed not in MISSED_POLICIES:
            raise InvalidArgument(f"unknown missed-fire policy {values.shown(self.missed)}: "
                                  f"use {', '.join(MISSED_POLICIES)}", "missed")
        if self.overlap not in OVERLAP_POLICIES:
            raise InvalidArgument(f"unknown overlap policy {values.shown(self.overlap)}: "
                                  f"use {', '.join(OVERLAP_POLICIES)}", "overlap")
        if isinstance(self.max_catchup, bool) or not isinstance(self.max_catchup, int) \
                or not 1 <= self.max_catchup <= MAX_CATCHUP_BOUND:
            raise InvalidArgument(f"max_catchup must be a whole number from 1 to "
                                  f"{MAX_CATCHUP_BOUND}", "max_catchup")

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    def definition(self) -> dict[str, Any]:
        """The stored definition fields (what `apply` compares and rewrites)."""
        return {"activity": self.activity.to_doc(), "cron": self.cron,
                "every_seconds": self.every_seconds, "timezone": self.timezone,
                "start_at": self.start_at, "end_at": self.end_at,
                "jitter_seconds": self.jitter_seconds, "missed": self.missed,
                "max_catchup": self.max_catchup, "grace_seconds": self.grace_seconds,
                "overlap": self.overlap}

    def timeline(self, created_at: datetime) -> Timeline:
        return Timeline(self, _ms(created_at))

    def when_text(self) -> str:
        """The expression in words."""
        if self.every_seconds is not None:
            return f"every {times.format_duration(self.every_seconds)}"
        fields = cron_fields(self.cron)
        try:
            words = CronSim(fields, datetime(2000, 1, 1, tzinfo=UTC)).explain()
        except Exception:  # an expression cronsim cannot put in words still fires
            words = fields
        return f"{words} ({self.timezone})"


def definition_from_data(data: Any, *, where: str = "") -> ScheduleDef:
    """One schedule of `apply`'s file (or JSON) into a definition; InvalidArgument with the
    reason, prefixed by `where` (the file's entry)."""
    prefix = f"{where}: " if where else ""
    try:
        return _definition(data)
    except InvalidArgument as exc:
        raise InvalidArgument(f"{prefix}{exc}", *exc.parameters) from None


FILE_FIELDS = ("name", "type", "activity_type", "payload", "priority", "metadata",
               "max_retries", "timeout", "delay", "cron", "every", "timezone", "start",
               "end", "jitter", "missed", "max_catchup", "grace", "overlap")


def _definition(data: Any) -> ScheduleDef:
    if not isinstance(data, Mapping):
        raise InvalidArgument("expected a mapping of a schedule's fields")
    if "paused" in data:  # once accepted and ignored: the schedule fired all the same
        raise InvalidArgument("paused is not a field of the file: pause a schedule with "
                              "`schedule pause NAME` (a pause outlives every apply)", "paused")
    unknown = sorted(str(k) for k in data if k not in FILE_FIELDS)
    if unknown:
        raise InvalidArgument(f"unknown field {values.shown(unknown[0])} (known: "
                              f"{', '.join(FILE_FIELDS)})")
    name = check_name(data.get("name"))
    activity_type = data.get("type", data.get("activity_type"))
    payload = data.get("payload", {})
    if payload is None:
        payload = {}
    if not isinstance(payload, Mapping):
        raise InvalidArgument("payload must be a mapping (a JSON object)")
    # The file's YAML has more than JSON (.nan, !!binary, timestamps): refused here, at
    # the input, never on reading a stored schedule (an activity's bounds, design.md).
    inputs.json_data(payload)
    metadata = data.get("metadata") or {}
    if not isinstance(metadata, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise InvalidArgument("metadata must map strings to strings")
    template = Template(
        activity_type if isinstance(activity_type, str) else "",
        payload, priority=data.get("priority", int(Priority.NORMAL)), metadata=metadata,
        max_retries=values.integer(data.get("max_retries", DEFAULT_MAX_RETRIES),
                                   "max_retries", minimum=0),
        timeout_seconds=int(times.duration(data.get("timeout", DEFAULT_TIMEOUT_SECONDS),
                                            "timeout", minimum=1, whole=True)),
        delay_seconds=times.duration(data.get("delay", 0), "delay"))
    every = data.get("every")
    return ScheduleDef(
        name, template, cron=data.get("cron"),
        every_seconds=None if every is None else parse_every(every),
        timezone=data.get("timezone", "UTC"),
        start_at=_time(data.get("start"), "start"), end_at=_time(data.get("end"), "end"),
        jitter_seconds=times.duration(data.get("jitter", 0), "jitter"),
        missed=data.get("missed", "skip"),
        max_catchup=values.integer(data.get("max_catchup", DEFAULT_MAX_CATCHUP),
                                   "max_catchup", minimum=1, maximum=MAX_CATCHUP_BOUND),
        grace_seconds=times.duration(data.get("grace", DEFAULT_GRACE), "grace", minimum=1),
        overlap=data.get("overlap", "allow"))


def _time(value: Any, what: str) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime):  # YAML reads an unquoted timestamp as one (no offset: UTC)
        return _aware(value)
    if isinstance(value, date):  # YAML's unquoted 2030-01-02: midnight where?
        raise InvalidArgument(f"{what}: a date alone does not say in which zone it starts; "
                              f"give a time, such as {value.isoformat()}T00:00:00Z", what)
    return times.time(value, what, relative=False)


# ------------------------------------------------------------------ instants


@dataclass(frozen=True)
class Timeline:
    """The fire instants of one definition (UTC datetimes at millisecond precision)."""

    definition: ScheduleDef
    created_at: datetime

    @property
    def anchor(self) -> datetime:
        return self.definition.start_at or self.created_at

    def _inside(self, moment: datetime | None) -> datetime | None:
        end = self.definition.end_at
        if moment is None or (end is not None and moment > end):
            return None
        return moment

    def after(self, moment: datetime) -> datetime | None:
        """The first instant strictly after `moment` (None: no instant is left)."""
        d = self.definition
        start = d.start_at
        if start is not None and moment < start:
            moment = start - _MS
        moment = _ms(moment)
        if d.every_seconds is not None:
            step = max(1, round(d.every_seconds * 1000))
            elapsed = (moment - self.anchor) // _MS
            k = 0 if elapsed < 0 else elapsed // step + 1
            return self._inside(self.anchor + k * step * _MS)
        zone = d.zone
        it = CronSim(cron_fields(d.cron), moment.astimezone(zone))
        try:
            found = next(it)
        except StopIteration:
            return None
        if found.year - moment.year > _HORIZON_YEARS:
            return None
        return self._inside(_ms(found))

    def at_or_before(self, moment: datetime, *, not_before: datetime) -> Iterator[datetime]:
        """Instants from `moment` back to `not_before` (both included), newest first."""
        d = self.definition
        moment = _ms(moment)
        if d.end_at is not None and moment > d.end_at:
            moment = d.end_at
        low = max(not_before, d.start_at) if d.start_at is not None else not_before
        if moment < low:
            return
        if d.every_seconds is not None:
            step = max(1, round(d.every_seconds * 1000))
            elapsed = (moment - self.anchor) // _MS
            if elapsed < 0:
                return
            k = elapsed // step
            while k >= 0:
                instant = self.anchor + k * step * _MS
                if instant < low:
                    return
                yield instant
                k -= 1
            return
        # cronsim in reverse gives the instants strictly before its start, in whole
        # seconds: start a second later, and drop what is after `moment`.
        start = (moment + timedelta(seconds=1)).astimezone(d.zone)
        for found in CronSim(cron_fields(d.cron), start, reverse=True):
            instant = _ms(found)
            if instant > moment:
                continue
            if instant < low:
                return
            yield instant

    def upcoming(self, after: datetime, count: int) -> list[datetime]:
        """The next `count` instants after `after`."""
        out: list[datetime] = []
        moment = after
        while len(out) < count:
            found = self.after(moment)
            if found is None:
                break
            out.append(found)
            moment = found
        return out


def jitter_for(name: str, instant: datetime, jitter_seconds: float) -> float:
    """A fire's extra delay: the same for a fire however often it is retried."""
    if jitter_seconds <= 0:
        return 0.0
    digest = hashlib.sha256(f"{name}\x00{iso(instant)}".encode()).digest()
    fraction = int.from_bytes(digest[:6], "big") / float(1 << 48)
    return round(fraction * jitter_seconds, 3)


def fire_key(name: str, instant: datetime) -> str:
    """The idempotency key of a fire: one activity per schedule and instant."""
    return f"schedule:{name}:{iso(instant)}"


def trigger_key(name: str) -> str:
    """The key of a manual fire (each trigger its own)."""
    return f"schedule:{name}:trigger:{uuid.uuid4().hex}"


# ------------------------------------------------------------------ the stored document


@dataclass(frozen=True)
class LastFire:
    """What the last fire did."""

    at: datetime
    fired_at: datetime | None
    kind: str | None  # on_time, catchup, trigger, skipped (None: not a string as stored)
    activity_id: uuid.UUID | None
    activity_type: str | None
    count: int = 1

    def to_doc(self) -> dict[str, Any]:
        return {"at": self.at, "fired_at": self.fired_at, "kind": self.kind,
                "activity_id": self.activity_id, "activity_type": self.activity_type,
                "count": self.count}


@dataclass(frozen=True)
class Buffered:
    """The one fire `overlap: buffer_one` holds back while the previous fire's activity is
    unfinished (design.md, "The policies"): its instant and on_time or catchup."""

    at: datetime
    kind: str = "on_time"

    def to_doc(self) -> dict[str, Any]:
        return {"at": self.at, "kind": self.kind}


@dataclass(frozen=True)
class Schedule:
    """A stored schedule: its definition and its firing state."""

    definition: ScheduleDef
    paused: bool
    revision: int
    created_at: datetime
    updated_at: datetime | None
    next_fire_at: datetime | None
    last_fire: LastFire | None = None
    fires: int = 0
    missed_fires: int = 0
    skipped_fires: int = 0
    pause_reason: str | None = None
    buffered: Buffered | None = None

    @property
    def name(self) -> str:
        return self.definition.name

    @property
    def timeline(self) -> Timeline:
        return self.definition.timeline(self.created_at)

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> tuple[Schedule | None, str | None]:
        """(the schedule, None), or (None, what makes the document malformed)."""
        try:
            return cls._read(doc), None
        except _Malformed as exc:
            return None, str(exc)
        except InvalidArgument as exc:
            return None, str(exc)

    @classmethod
    def _read(cls, doc: Mapping[str, Any]) -> Schedule:
        name = doc.get("_id")
        if not isinstance(name, str):
            raise _Malformed(f"_id is {values.shown(name)}, not a string")
        activity = _field(doc, "activity", Mapping)
        t = dict(activity)
        for key, kind in (("activity_type", str), ("payload", Mapping), ("metadata", Mapping),
                          ("priority", int), ("max_retries", int), ("timeout_seconds", int),
                          ("delay_seconds", int | float)):
            if key == "activity_type" or t.get(key) is not None:
                _field(t, key, kind, where="activity.")
        template = Template(
            t["activity_type"], t.get("payload") or {},
            priority=t.get("priority", int(Priority.NORMAL)), metadata=t.get("metadata") or {},
            max_retries=t.get("max_retries", DEFAULT_MAX_RETRIES),
            timeout_seconds=t.get("timeout_seconds", DEFAULT_TIMEOUT_SECONDS),
            delay_seconds=float(t.get("delay_seconds") or 0))
        optional = {"cron": str, "every_seconds": int | float, "timezone": str,
                    "start_at": datetime, "end_at": datetime, "jitter_seconds": int | float,
                    "missed": str, "max_catchup": int, "grace_seconds": int | float,
                    "overlap": str}
        given = {key: _field(doc, key, kind) for key, kind in optional.items()
                 if doc.get(key) is not None}
        definition = ScheduleDef(name, template, **given)
        paused = _field(doc, "paused", bool)
        revision = _field(doc, "revision", int)
        created_at = _field(doc, "created_at", datetime)
        optional_dates = {key: _aware(_field(doc, key, datetime)) if doc.get(key) is not None
                          else None for key in ("updated_at", "next_fire_at")}
        counters = {key: _field(doc, key, int) if doc.get(key) is not None else 0
                    for key in ("fires", "missed_fires", "skipped_fires")}
        last = doc.get("last_fire")
        last_fire = None
        if last is not None:
            if not isinstance(last, Mapping) or not isinstance(last.get("at"), datetime):
                raise _Malformed("last_fire is not a document with a date 'at'")
            last_fire = LastFire(
                _aware(last["at"]), _aware(last["fired_at"]) if isinstance(
                    last.get("fired_at"), datetime) else None,
                last.get("kind") if isinstance(last.get("kind"), str) else None,
                last.get("activity_id") if isinstance(
                    last.get("activity_id"), uuid.UUID) else None,
                last.get("activity_type") if isinstance(last.get("activity_type"), str)
                else None, int(last["count"]) if isinstance(last.get("count"), int) else 1)
        held = doc.get("buffered")
        buffered = None
        if held is not None:
            if not isinstance(held, Mapping) or not isinstance(held.get("at"), datetime):
                raise _Malformed("buffered is not a document with a date 'at'")
            buffered = Buffered(_aware(held["at"]),
                                "catchup" if held.get("kind") == "catchup" else "on_time")
        reason = doc.get("pause_reason")
        return cls(definition, paused, revision, _aware(created_at),
                   optional_dates["updated_at"], optional_dates["next_fire_at"], last_fire,
                   pause_reason=reason if isinstance(reason, str) else None,
                   buffered=buffered, **counters)


class _Malformed(Exception):
    pass


def _field(doc: Mapping[str, Any], key: str, kind: Any, where: str = "") -> Any:
    if key not in doc or doc[key] is None:
        raise _Malformed(f"{where}{key} is missing")
    value = doc[key]
    if isinstance(value, bool) and kind is not bool:
        raise _Malformed(f"{where}{key} is {values.shown(value)}, not {_kind_name(kind)}")
    if not isinstance(value, kind):
        raise _Malformed(f"{where}{key} is {values.shown(value)}, not {_kind_name(kind)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise _Malformed(f"{where}{key} is {value}, not a finite number")
    return value


def _kind_name(kind: Any) -> str:
    names = {str: "a string", int: "an int", bool: "a bool", datetime: "a date",
             Mapping: "a document"}
    return names.get(kind, "a number")


def new_document(definition: ScheduleDef, *, created_at: datetime, next_fire_at: datetime,
                 paused: bool = False, pause_reason: str | None = None) -> dict[str, Any]:
    """The document `add` inserts (created_at and updated_at: the server's clock, read)."""
    return {"_id": definition.name, **definition.definition(), "paused": paused,
            "pause_reason": pause_reason, "created_at": created_at, "updated_at": created_at,
            "revision": 1, "next_fire_at": next_fire_at, "fires": 0, "missed_fires": 0,
            "skipped_fires": 0}


# ------------------------------------------------------------------ a fire's plan


@dataclass(frozen=True)
class FirePlan:
    """What a firer does with a due schedule (the same for every firer of one document)."""

    instants: tuple[tuple[datetime, str], ...]  # (instant, kind), oldest first
    missed: int  # instants dropped by the missed-fire policy
    next_fire_at: datetime | None


def plan_fire(schedule: Schedule, now: datetime) -> FirePlan:
    """The instants to enqueue, of those from `next_fire_at` up to `now` (the server's),
    by the missed-fire policy, and the next instant after `now`."""
    d, timeline, due = schedule.definition, schedule.timeline, schedule.next_fire_at
    if due is None or due > now:
        return FirePlan((), 0, due)
    bound = d.max_catchup if d.missed == "all" else 1
    newest = list(_take(timeline.at_or_before(now, not_before=due), bound + 1))
    if not newest:  # the definition no longer has the stored instant (should not happen)
        newest = [due]
    counted = _count_between(timeline, due, newest[-1]) if len(newest) > bound else 0
    if len(newest) > bound:
        total = counted + bound  # every instant from `due` to `now`
        newest = newest[:bound]
    else:
        total = len(newest)
    grace = timedelta(seconds=d.grace_seconds)

    def kind(instant: datetime) -> str:
        return "on_time" if now - instant <= grace else "catchup"

    if d.missed == "skip":
        chosen = [i for i in newest[:1] if kind(i) == "on_time"]
    else:
        chosen = newest[:bound]
    # At most MISSED_COUNT_MAX for one fire (design.md), `skip` with a late newest
    # instant too (the count capped above, plus the newest).
    return FirePlan(tuple((i, kind(i)) for i in reversed(chosen)),
                    min(MISSED_COUNT_MAX, total - len(chosen)), timeline.after(now))


@dataclass(frozen=True)
class OverlapDecision:
    """What the overlap policy makes of a fire's plan (design.md, "The policies")."""

    enqueue: tuple[tuple[datetime, str], ...]  # (instant, kind) to enqueue, oldest first
    buffered: Buffered | None  # held back after this fire (buffer_one only)
    skipped: int  # instants not enqueued because a previous activity runs


def decide_overlap(schedule: Schedule, plan: FirePlan, busy: bool) -> OverlapDecision:
    """The plan's instants by the overlap policy, `busy` telling whether the previous
    fire's activity is unfinished (read only for `skip` and `buffer_one`).

    `buffer_one`, in this order: a buffered fire whose previous activity has finished is
    enqueued (it is the previous fire from then on); then, while a previous activity is
    unfinished, the oldest due instant is buffered if nothing is (the rest skipped); with
    none unfinished, the oldest is enqueued and the next one buffered."""
    policy, instants = schedule.definition.overlap, list(plan.instants)
    if policy == "skip":
        if instants and busy:
            return OverlapDecision((), None, len(instants))
        return OverlapDecision(tuple(instants), None, 0)
    if policy != "buffer_one":
        return OverlapDecision(tuple(instants), None, 0)
    enqueue: list[tuple[datetime, str]] = []
    held = schedule.buffered
    if held is not None and not busy:
        enqueue.append((held.at, held.kind))
        held, busy = None, True
    if instants and not busy:
        enqueue.append(instants.pop(0))
        busy = True
    if instants and held is None:
        held = Buffered(*instants.pop(0))
    return OverlapDecision(tuple(enqueue), held, len(instants))


def _take(items: Iterator[datetime], count: int) -> Iterator[datetime]:
    for n, item in enumerate(items):
        if n >= count:
            return
        yield item


MISSED_COUNT_MAX = 10_000  # instants one fire counts as missed at most (a long outage)


def _count_between(timeline: Timeline, low: datetime, high: datetime,
                   cap: int = MISSED_COUNT_MAX) -> int:
    """How many instants lie in [low, high] (for the missed count; at most `cap`)."""
    d = timeline.definition
    if d.every_seconds is not None:
        step = max(1, round(d.every_seconds * 1000))
        return min(cap, int(((high - low) // _MS) // step + 1))
    n = 0
    for found in CronSim(cron_fields(d.cron), (low - timedelta(seconds=1)).astimezone(d.zone)):
        instant = _ms(found)
        if instant < low:
            continue
        if instant > high or n >= cap:
            break
        n += 1
    return n
