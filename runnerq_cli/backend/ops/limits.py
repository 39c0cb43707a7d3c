"""The operator's flow limits (docs/design.md, "Flow control"): `limit set`, `list`,
`show`, `remove` and `apply` (limits as code), each audited like every change.

A write changes only a limit document's limit fields, never its holders or its starts,
so a limit changed while work runs counts that work still.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from runnerq_cli.backend.domain import flow
from runnerq_cli.backend.domain.as_code import ApplyReport
from runnerq_cli.backend.domain.flow import Limits
from runnerq_cli.backend.domain.flow import limits_from_data as limits_from_data  # re-exported
from runnerq_cli.backend.domain.flow import make_limits as make_limits  # re-exported
from runnerq_cli.backend.domain.models import to_jsonable
from runnerq_cli.backend.domain.operator_text import check_text
from runnerq_cli.backend.ops.audit import AuditLog, AuditRun
from runnerq_cli.backend.store.context import QueueContext
from runnerq_cli.errors import InvalidArgument, NotFound

AUDIT_ACTION = "limit"  # the audit records' action prefix: "limit set", ...


@dataclass(frozen=True)
class LimitInfo:
    """A limit as people read it: its values, the slots in use now, the busiest keys."""

    limits: Limits
    holders: tuple[Mapping[str, Any], ...]
    starts_in_window: int
    updated_at: datetime | None
    full: str | None = None  # why nothing of the type may start now (flow.verdict), or None
    held_back: int = 0  # pending activities waiting on this limit (`summary` counts them)

    def busiest_keys(self, most: int = 5) -> list[tuple[str, int]]:
        counts: dict[str, int] = {}
        for holder in self.holders:
            key = str(holder.get("k") or "")
            counts[key] = counts.get(key, 0) + 1
        return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:most]

    def brief(self) -> dict[str, Any]:
        """`to_json` without the holders (`stats -o json`, `queues -o json`)."""
        return {k: v for k, v in self.to_json().items() if k != "holders"}

    def to_json(self) -> dict[str, Any]:
        return {**self.limits.to_json(), "in_use": len(self.holders),
                "holders": [to_jsonable({"worker_id": h.get("w"), "key": h.get("k") or None})
                            for h in self.holders],
                "busiest_keys": dict(self.busiest_keys()),
                "starts_in_rate_window": self.starts_in_window,
                "full": self.full, "held_back": self.held_back,
                "updated_at": to_jsonable(self.updated_at)}  # ISO-8601 with Z, like all


@dataclass(frozen=True)
class LimitChange:
    """One type's part of an apply: `create`, `update`, `unchanged` or `remove`."""

    activity_type: str
    action: str
    fields: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"activity_type": self.activity_type, "action": self.action,
                "fields": list(self.fields)}


class FlowLimits:
    """`rq.limits`: the flow limits of one queue."""

    def __init__(self, ctx: QueueContext, audit: AuditLog) -> None:
        self._ctx = ctx
        self._audit = audit

    def _audited(self, action: str, *, reason: str | None, actor: str | None,
                 command: str | None, **intent: Any) -> contextlib.AbstractContextManager[AuditRun]:
        """One change as an audit run (AuditLog.one_change)."""
        return self._audit.one_change(f"{AUDIT_ACTION} {action}", reason=reason, actor=actor,
                                      command=command, **intent)

    def list_limits(self) -> list[LimitInfo]:
        """Every limit, by type, with its slots in use and the work it holds back
        (`limit list`: the same `full` and `held_back` as `stats`)."""
        return self.summary()

    def summary(self) -> list[LimitInfo]:
        """Every limit with its slots in use and the work it holds back: the pending
        activities of a type at its limit (concurrency or rate), else those of its keys
        at theirs. One read of the limit documents, one count per limited type that
        holds anything back (`stats`, `queues`, the console, Prometheus)."""
        now = self._ctx.clock()
        return [self._held(doc, now) for doc in self._ctx.limits.find({}).sort([("_id", 1)])]

    def get(self, activity_type: str) -> LimitInfo:
        """One limit as `summary` gives it (`limit show`); NotFound when TYPE has none."""
        doc = self._ctx.limits.find_one({"_id": activity_type})
        if doc is None:
            raise NotFound(f"no limit on activity type {activity_type!r}")
        return self._held(doc, self._ctx.clock())

    def _held(self, doc: Mapping[str, Any], now: datetime) -> LimitInfo:
        """`_info` with why the type is full and the pending work it holds back: one
        count when it holds any back, none otherwise."""
        info = self._info(doc, now)
        verdict = flow.verdict(doc, None, now)
        match: dict[str, Any] = {"status": "pending", "activity_type": str(doc["_id"])}
        if not verdict.type_full:
            keys = flow.full_keys(doc, now)
            if not keys:
                return info
            match["flow_key"] = {"$in": [k or None for k in keys]}
        held = self._ctx.activities.count_documents(match)
        return dataclasses.replace(info, full=verdict.reason, held_back=held)

    def _info(self, doc: Mapping[str, Any], now: datetime) -> LimitInfo:
        limits = Limits.from_doc(doc)
        period = max(limits.rate.period_ms if limits.rate else 0,
                     limits.key_rate.period_ms if limits.key_rate else 0)
        starts = [s for s in flow.entries(doc, "starts") if isinstance(s.get("t"), datetime)
                  and (now - s["t"]).total_seconds() * 1000 < period]
        updated = doc.get("updated_at")
        return LimitInfo(limits, tuple(flow.entries(doc, "holders")),
                         len(starts), updated if isinstance(updated, datetime) else None)

    def set(self, limits: Limits, *, reason: str | None = None, actor: str | None = None,
            command: str | None = None) -> str:
        """Create or change one type's limits: `created`, `updated` or `unchanged` (then
        nothing is written, no audit record either)."""
        doc = self._ctx.limits.find_one({"_id": limits.activity_type})
        action = _action(doc, limits)
        if action == "unchanged":
            return action
        with self._audited("set", reason=reason, actor=actor, command=command,
                           limits=limits.to_json()):
            self._write(limits)
        self._ctx.flow.expire()
        return "created" if action == "create" else "updated"

    def _write(self, limits: Limits) -> None:
        fields = limits.fields()
        now = self._ctx.clock()
        update: dict[str, Any] = {"$set": {**{k: v for k, v in fields.items() if v is not None},
                                           "updated_at": now},
                                  "$setOnInsert": {"holders": [], "starts": []}}
        unset = {k: "" for k, v in fields.items() if v is None}
        if unset:
            update["$unset"] = unset
        self._ctx.limits.update_one({"_id": limits.activity_type}, update, upsert=True)

    def remove(self, activity_type: str, *, reason: str | None = None,
               actor: str | None = None, command: str | None = None) -> None:
        """Delete a type's limit (NotFound if none): the type is plain again."""
        self.get(activity_type)
        with self._audited("remove", reason=reason, actor=actor, command=command,
                           activity_type=activity_type):
            self._ctx.limits.delete_one({"_id": activity_type})
        self._ctx.flow.expire()

    def apply(self, wanted: Sequence[Limits], *, prune: bool = False, dry_run: bool = False,
              reason: str | None = None, actor: str | None = None,
              command: str | None = None) -> ApplyReport:
        """Make the stored limits those of `wanted` (limits as code): idempotent, a second
        apply says nothing changed; `prune` removes the limits not listed. Everything is
        checked before the first write."""
        check_text(reason, "reason")
        check_text(actor, "actor")
        names = [w.activity_type for w in wanted]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise InvalidArgument(f"activity type {twice[0]!r} is limited twice")
        stored = {str(doc["_id"]): doc for doc in self._ctx.limits.find({}, {"holders": 0,
                                                                            "starts": 0})}
        changes = [LimitChange(w.activity_type, _action(stored.get(w.activity_type), w),
                               _changed_fields(stored.get(w.activity_type), w))
                   for w in wanted]
        if prune:
            if not wanted and stored and not dry_run:
                raise InvalidArgument(
                    f"the file defines no limits: with prune it would remove all "
                    f"{len(stored)} of the queue's; remove them by type instead "
                    "(limit remove TYPE)")
            changes += [LimitChange(n, "remove") for n in sorted(stored) if n not in names]
        report = ApplyReport(tuple(changes), dry_run)
        if dry_run or not report.changed:
            return report
        by_type = {w.activity_type: w for w in wanted}
        with self._audit.begin(f"{AUDIT_ACTION} apply", reason=reason, actor=actor,
                               command=command, prune=prune,
                               plan=[c.to_json() for c in changes if c.action != "unchanged"],
                               ) as run:
            done = 0
            for change in changes:
                if change.action in ("create", "update"):
                    self._write(by_type[change.activity_type])
                elif change.action == "remove":
                    self._ctx.limits.delete_one({"_id": change.activity_type})
                else:
                    continue
                done += 1
            run.finish("done", count=done)
        self._ctx.flow.expire()
        return report


def _changed_fields(doc: Mapping[str, Any] | None, limits: Limits) -> tuple[str, ...]:
    if doc is None:
        return ()
    return tuple(k for k, v in limits.fields().items() if doc.get(k) != v)


def _action(doc: Mapping[str, Any] | None, limits: Limits) -> str:
    if doc is None:
        return "create"
    return "update" if _changed_fields(doc, limits) else "unchanged"
