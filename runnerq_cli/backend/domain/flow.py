"""Flow control as data (docs/design.md, "Flow control"): the limit document, the rate
values, the one update that takes a slot, and why a slot is not free (an activity's key
is specs.py's: every enqueue checks it).

Pure: no server. The slot is taken by one update pipeline on the type's limit document,
which holds both the limits and the live holders, so the check and the take are one
atomic write whatever the number of claimers (queue/flow_claims.py sends it).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from runnerq_cli import times, values
from runnerq_cli.errors import InvalidArgument

FULL_BACKOFF = 0.5  # seconds a claimer leaves a full type alone (unless a slot of its frees)
# Seconds a claimer told of every slot freed (a change stream on the limit documents)
# leaves a type full by its concurrency alone: a safety net, the stream wakes it before.
TOLD_BACKOFF = 60.0
MOST_LIMIT = 100_000  # the highest concurrency or rate count (beyond it: not a limit)
SHORTEST_PERIOD_MS = 1000
LONGEST_PERIOD_MS = 86_400_000
NO_KEY = ""  # the group of a limited type's activities enqueued without a key
LIMIT_FIELDS = ("concurrency", "key_concurrency", "rate", "key_rate")
_BIG = 2**62  # "no limit" inside the pipeline ($ifNull of an absent limit)
_RATE = re.compile(r"^\s*([0-9]+)\s*/\s*([0-9]*\s*[a-z]+|[0-9.]+[a-z]*)\s*$")


def entries(doc: Mapping[str, Any], field: str) -> list[Mapping[str, Any]]:
    """A limit document's `holders` or `starts`: the entries that are mappings. Another
    program's document may hold anything there (`starts: 5`); every reader takes them
    through here, so such a document limits as far as it can and never fails a view."""
    value = doc.get(field)
    return [e for e in value if isinstance(e, Mapping)] if isinstance(value, list) else []


@dataclass(frozen=True)
class Rate:
    """At most `count` starts in any `period_ms` milliseconds."""

    count: int
    period_ms: int

    def to_doc(self) -> dict[str, int]:
        return {"count": self.count, "period_ms": self.period_ms}

    def __str__(self) -> str:
        return f"{self.count}/{times.format_duration(self.period_ms / 1000)}"


def parse_rate(value: Any, what: str = "rate") -> Rate:
    """`100/1m` (also `5/s`, `20/10s`): a whole count of 1 to 100,000 over a period of
    1 s to 1 day; anything else is refused with one line."""
    expected = f"{what}: expected COUNT/PERIOD like 100/1m, got {values.shown(value)}"
    match = _RATE.match(value.lower()) if isinstance(value, str) else None
    if match is None:
        raise InvalidArgument(expected)
    count = limit_number(match.group(1), what)
    period_text = match.group(2).replace(" ", "")
    if period_text.isalpha():  # "100/m" is 100 per 1 m
        period_text = "1" + period_text
    seconds = times.duration(period_text, f"{what} period")
    period_ms = round(seconds * 1000)
    if period_ms < SHORTEST_PERIOD_MS or period_ms > LONGEST_PERIOD_MS:
        raise InvalidArgument(f"{what}: the period must be 1s to 1d, got {values.shown(value)}")
    return Rate(count, period_ms)


def limit_number(value: Any, what: str) -> int:
    """A concurrency or a rate count: a whole number from 1 to 100,000."""
    number = values.integer(value, what, minimum=1, maximum=MOST_LIMIT)
    return number


@dataclass(frozen=True)
class Limits:
    """The limits of one activity type (None: not limited that way)."""

    activity_type: str
    concurrency: int | None = None
    key_concurrency: int | None = None
    rate: Rate | None = None
    key_rate: Rate | None = None

    def __post_init__(self) -> None:
        if not any((self.concurrency, self.key_concurrency, self.rate, self.key_rate)):
            raise InvalidArgument(f"{self.activity_type}: give at least one limit "
                                  "(concurrency, key_limit, rate or key_rate)")

    def fields(self) -> dict[str, Any]:
        """The document's limit fields; a limit not set is None (unset on write)."""
        return {"concurrency": self.concurrency, "key_concurrency": self.key_concurrency,
                "rate": self.rate.to_doc() if self.rate else None,
                "key_rate": self.key_rate.to_doc() if self.key_rate else None}

    def describe(self) -> str:
        parts = []
        if self.concurrency:
            parts.append(f"concurrency {self.concurrency}")
        if self.key_concurrency:
            parts.append(f"per key {self.key_concurrency}")
        if self.rate:
            parts.append(f"rate {self.rate}")
        if self.key_rate:
            parts.append(f"per key rate {self.key_rate}")
        return ", ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {"activity_type": self.activity_type, "concurrency": self.concurrency,
                "key_limit": self.key_concurrency,
                "rate": str(self.rate) if self.rate else None,
                "key_rate": str(self.key_rate) if self.key_rate else None}

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> Limits:
        def rate(value: Any) -> Rate | None:
            if isinstance(value, Mapping) and isinstance(value.get("count"), int) \
                    and isinstance(value.get("period_ms"), int):
                return Rate(value["count"], value["period_ms"])
            return None

        def whole(value: Any) -> int | None:
            return value if isinstance(value, int) and not isinstance(value, bool) \
                and value >= 1 else None
        try:
            return cls(str(doc["_id"]), whole(doc.get("concurrency")),
                       whole(doc.get("key_concurrency")), rate(doc.get("rate")),
                       rate(doc.get("key_rate")))
        except InvalidArgument:  # a document with no usable limit: limits nothing
            return cls(str(doc["_id"]), concurrency=MOST_LIMIT)


def longest_period_ms(doc: Mapping[str, Any]) -> int:
    return int(max([r["period_ms"] for r in (doc.get("rate"), doc.get("key_rate"))
                if isinstance(r, Mapping) and isinstance(r.get("period_ms"), int)] or [0]))


def _count(array: str, cond: dict[str, Any]) -> dict[str, Any]:
    return {"$size": {"$filter": {"input": {"$ifNull": [array, []]}, "cond": cond}}}


def _in_window(rate_field: str) -> dict[str, Any]:
    return {"$gt": ["$$this.t", {"$subtract": ["$$NOW", f"${rate_field}.period_ms"]}]}


def take_pipeline(key: str, lease_id: str, worker_id: str, lease_ms: int) -> list[Any]:
    """The update that takes one slot for `key` under `lease_id` iff every limit allows
    it, by the server's clock (docs/design.md, "A limited claim", step 2); the caller
    knows it took the slot when `lease_id` is among the returned `holders`."""
    mine = {"$eq": ["$$this.k", {"$literal": key}]}
    ok = {"$and": [
        {"$lt": [{"$size": {"$ifNull": ["$holders", []]}}, {"$ifNull": ["$concurrency", _BIG]}]},
        {"$lt": [_count("$holders", mine), {"$ifNull": ["$key_concurrency", _BIG]}]},
        {"$lt": [_count("$starts", _in_window("rate")), {"$ifNull": ["$rate.count", _BIG]}]},
        {"$lt": [_count("$starts", {"$and": [mine, _in_window("key_rate")]}),
                 {"$ifNull": ["$key_rate.count", _BIG]}]},
    ]}
    longest = {"$max": [{"$ifNull": ["$rate.period_ms", 0]},
                        {"$ifNull": ["$key_rate.period_ms", 0]}]}
    kept = {"$filter": {"input": {"$ifNull": ["$starts", []]},
                        "cond": {"$gt": ["$$this.t", {"$subtract": ["$$NOW", "$$longest"]}]}}}
    holder = {"l": lease_id, "k": {"$literal": key}, "w": {"$literal": worker_id},
              "until": {"$add": ["$$NOW", lease_ms]}}
    start = {"t": "$$NOW", "k": {"$literal": key}, "l": lease_id}
    rated = {"$or": [{"$gt": [{"$ifNull": ["$rate.count", 0]}, 0]},
                     {"$gt": [{"$ifNull": ["$key_rate.count", 0]}, 0]}]}
    return [
        # Arrays whatever another program stored (`starts: 5`): else $size and $filter
        # fail the claim, and the type could never run again.
        {"$set": {field: {"$cond": [{"$isArray": f"${field}"}, f"${field}", []]}
                  for field in ("holders", "starts")}},
        {"$set": {"starts": {"$let": {"vars": {"longest": longest}, "in": kept}}}},
        {"$set": {"_ok": ok}},
        {"$set": {
            "holders": {"$cond": ["$_ok", {"$concatArrays": [{"$ifNull": ["$holders", []]},
                                                              [holder]]}, "$holders"]},
            "starts": {"$cond": [{"$and": ["$_ok", rated]},
                                 {"$concatArrays": ["$starts", [start]]}, "$starts"]},
            "turn": {"$cond": ["$_ok", {"$literal": key}, "$turn"]},
            # A take says so: a waiting claimer's change stream leaves out the updates
            # that set it, and is woken by every other write (a slot freed, a limit set).
            "taken_at": {"$cond": ["$_ok", "$$NOW", "$taken_at"]}}},
        {"$unset": "_ok"},
    ]


def give_back(lease_id: str) -> dict[str, Any]:
    """A slot taken for a claim that found nothing: holder and start both withdrawn."""
    return {"$pull": {"holders": {"l": lease_id}, "starts": {"l": lease_id}}}


def release(lease_ids: list[str]) -> dict[str, Any]:
    """The end of claims: their slots free (their starts stay: a rate counts starts)."""
    return {"$pull": {"holders": {"l": {"$in": lease_ids}}}}


def repair(dead: list[str], now: datetime) -> dict[str, Any]:
    """The stale holders whose leases no longer run, freed ("Stale holders")."""
    return {"$pull": {"holders": {"l": {"$in": dead}, "until": {"$lt": now}}}}


def next_holder_until(doc: Mapping[str, Any], now: datetime) -> datetime | None:
    """The first holder's `until` still to come: from then its slot may be repaired, and
    no write says so (a crash between a take and its claim)."""
    ahead = [h["until"] for h in entries(doc, "holders")
             if isinstance(h.get("until"), datetime) and h["until"] > now]
    return min(ahead) if ahead else None


def took(doc: Mapping[str, Any] | None, lease_id: str) -> bool:
    return doc is not None and any(h.get("l") == lease_id for h in entries(doc, "holders"))


@dataclass(frozen=True)
class Verdict:
    """Why a key of a limited type may not start now (None fields: that limit allows it)."""

    reason: str | None  # one line for people, None when a start is allowed
    type_full: bool = False  # nothing of the type may start: stop looking at its keys
    retry_at: datetime | None = None  # when a rate allows the next start (None: a slot)


def verdict(doc: Mapping[str, Any], key: str | None, now: datetime) -> Verdict:
    """Whether `key` (None: any key) could start now under `doc`, and if not, why: the
    words `explain` prints and the claimer's back-off (the server decides in the take)."""
    limits = Limits.from_doc(doc)
    holders = entries(doc, "holders")
    starts = [s for s in entries(doc, "starts") if isinstance(s.get("t"), datetime)]
    name = limits.activity_type
    if limits.concurrency and len(holders) >= limits.concurrency:
        workers = ", ".join(sorted({str(h.get("w")) for h in holders}))
        return Verdict(f"{name}: {len(holders)} of {limits.concurrency} running ({workers}); "
                       "the next slot frees when one of them ends", type_full=True)
    if limits.rate:
        full, at = _rate_full(starts, limits.rate, now)
        if full:
            return Verdict(f"{name}: rate {limits.rate} reached; next start in "
                           f"{_seconds(at, now)}", type_full=True, retry_at=at)
    if key is None:
        return Verdict(None)
    shown_key = key or "(no key)"
    if limits.key_concurrency:
        running = [h for h in holders if h.get("k") == key]
        if len(running) >= limits.key_concurrency:
            return Verdict(f"key {shown_key}: {len(running)} of {limits.key_concurrency} "
                           "running")
    if limits.key_rate:
        full, at = _rate_full([s for s in starts if s.get("k") == key], limits.key_rate, now)
        if full:
            return Verdict(f"key {shown_key}: rate {limits.key_rate} reached; next start in "
                           f"{_seconds(at, now)}", retry_at=at)
    return Verdict(None)


def _rate_full(starts: list[Mapping[str, Any]], rate: Rate,
               now: datetime) -> tuple[bool, datetime]:
    window = now - timedelta(milliseconds=rate.period_ms)
    inside = sorted(s["t"] for s in starts if s["t"] > window)
    if len(inside) < rate.count:
        return False, now
    return True, inside[len(inside) - rate.count] + timedelta(milliseconds=rate.period_ms)


def _seconds(at: datetime, now: datetime) -> str:
    return times.format_duration(max(0.0, (at - now).total_seconds()))


def full_keys(doc: Mapping[str, Any], now: datetime) -> list[str]:
    """The keys whose own limits are full now (the key look steps over them)."""
    keys = {h.get("k") for h in entries(doc, "holders")}
    keys |= {s.get("k") for s in entries(doc, "starts")}
    return sorted(k for k in keys if isinstance(k, str) and verdict(doc, k, now).reason)


def limits_from_data(data: Any) -> list[Limits]:
    """A limits file's content (YAML or JSON already parsed): a list of entries, or
    `{limits: [...]}`, each `{type, concurrency?, key_limit?, rate?, key_rate?}`."""
    if isinstance(data, Mapping) and set(data) == {"limits"}:
        data = data["limits"]
    if data is None:
        data = []
    if not isinstance(data, list):
        raise InvalidArgument("expected a list of limits (or {limits: [...]})")
    known = {"type", "concurrency", "key_limit", "rate", "key_rate"}
    out: list[Limits] = []
    first: dict[str, int] = {}
    for i, entry in enumerate(data, 1):
        if not isinstance(entry, Mapping):
            raise InvalidArgument(f"limit {i}: expected a mapping")
        # Each refusal names its entry: in a file of many, "concurrency: ... got -5"
        # alone leaves the reader to find which one.
        label = entry.get("type")
        where = f"limit {i}" + (f" ({label})" if isinstance(label, str) else "")
        unknown = sorted(set(entry) - known)
        if unknown:
            raise InvalidArgument(f"{where}: unknown field {unknown[0]!r} "
                                  f"(known: {', '.join(sorted(known))})")
        try:
            limits = make_limits(entry.get("type"), entry.get("concurrency"),
                                 entry.get("key_limit"), entry.get("rate"),
                                 entry.get("key_rate"))
        except InvalidArgument as exc:
            raise InvalidArgument(f"{where}: {exc}") from None
        if limits.activity_type in first:
            raise InvalidArgument(f"{where}: activity type {limits.activity_type!r} is "
                                  f"limited twice (also limit {first[limits.activity_type]})")
        first[limits.activity_type] = i
        out.append(limits)
    return out


def make_limits(activity_type: Any, concurrency: Any = None, key_limit: Any = None,
                rate: Any = None, key_rate: Any = None) -> Limits:
    """Limits from their text or numbers, each checked (InvalidArgument: one line)."""
    if not isinstance(activity_type, str) or not activity_type.strip() \
            or len(activity_type) > 200:
        raise InvalidArgument("activity type: expected text of 1 to 200 characters")
    return Limits(
        activity_type,
        None if concurrency is None else limit_number(concurrency, "concurrency"),
        None if key_limit is None else limit_number(key_limit, "key_limit"),
        None if rate is None else parse_rate(rate, "rate"),
        None if key_rate is None else parse_rate(key_rate, "key_rate"))
