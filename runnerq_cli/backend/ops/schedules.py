"""Recurring schedules of one queue: the store, the firing chore and the views' reads.

docs/design.md, "Schedules". Every worker fires the due schedules (`fire_due`, a shared
chore like the scheduler) and `runnerq-mongo scheduler` may run it alone: one indexed
query per call, no write when nothing is due. A fire enqueues its activities with the
fire's idempotency key first and then moves `next_fire_at` by a compare-and-set on the
value (and the `revision`) it read, so racing firers enqueue one activity per fire and a
firer killed between the two leaves the fire to the next one, which is answered the
same activity. Every change by an operator (add, apply, pause, resume, trigger, remove)
is written to the audit trail (audit.py) before it is made.

The views (stats, console, doctor, explain, metrics, queues) read `list_schedules()`:
one `ScheduleInfo` per schedule, with its next fire, last fire and that fire's
activity's status, in two reads whatever the number of schedules (`to_json()` is the
shape every front end prints; `ended`, `late_by(now)`, `problem` are doctor's). An
activity from a schedule carries `domain.models.META_SCHEDULE`, `META_FIRE_AT` and
`META_FIRE` in its metadata (explain).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from runnerq_cli.backend import LOGGER_NAME
from runnerq_cli.backend.domain import queries
from runnerq_cli.backend.domain.as_code import ApplyReport
from runnerq_cli.backend.domain.models import EnqueueResult, to_jsonable
from runnerq_cli.backend.domain.operator_text import check_text
from runnerq_cli.backend.domain.schedules import (
    UNFINISHED,
    LastFire,
    Schedule,
    ScheduleDef,
    check_name,
    decide_overlap,
    fire_key,
    iso,
    jitter_for,
    new_document,
    plan_fire,
    trigger_key,
)
from runnerq_cli.backend.ops.audit import AuditLog, AuditRun
from runnerq_cli.backend.store.context import QueueContext
from runnerq_cli.errors import AlreadyExists, InvalidArgument, NotFound

if TYPE_CHECKING:
    from runnerq_cli.backend.domain.specs import ActivitySpec
    from runnerq_cli.backend.queue.queue import ActivityQueue

log = logging.getLogger(LOGGER_NAME)
FIRE_BATCH = 100  # due schedules one query of the chore returns at most
FIRE_PAGES = 10  # queries one chore call runs at most, while each comes back full
AUDIT_ACTION = "schedule"  # the audit records' action prefix: "schedule add", ...


@dataclass(frozen=True)
class ScheduleInfo:
    """One schedule as the views show it. `schedule` is None when the document is
    malformed (`problem` says why); `last_status` is the status of the last fire's
    activity (None: no fire yet, skipped, or the activity is gone)."""

    name: str
    schedule: Schedule | None
    problem: str | None = None
    last_status: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def paused(self) -> bool:
        return bool(self.schedule.paused) if self.schedule else bool(self.raw.get("paused"))

    @property
    def next_fire_at(self) -> datetime | None:
        return self.schedule.next_fire_at if self.schedule else None

    @property
    def last_fire(self) -> LastFire | None:
        return self.schedule.last_fire if self.schedule else None

    @property
    def ended(self) -> bool:
        """Well formed, and no instant is left (past its end): it never fires again."""
        return self.schedule is not None and self.problem is None \
            and self.schedule.next_fire_at is None

    def late_by(self, now: datetime) -> float | None:
        """Seconds its next fire is overdue past its grace (no firer is running: every
        worker down, or none on this queue), or None when it is not (paused, ended,
        malformed, on time)."""
        s = self.schedule
        if s is None or s.paused or s.next_fire_at is None:
            return None
        late = (now - s.next_fire_at).total_seconds() - s.definition.grace_seconds
        return late if late > 0 else None

    @property
    def activity_type(self) -> str | None:
        if self.schedule is not None:
            return self.schedule.definition.activity.activity_type
        activity = self.raw.get("activity")
        value = activity.get("activity_type") if isinstance(activity, dict) else None
        return value if isinstance(value, str) else None

    @property
    def when(self) -> str | None:
        """The expression as written: the cron, or `every 10m`."""
        if self.schedule is None:
            return None
        d = self.schedule.definition
        return d.cron if d.cron is not None else d.when_text()

    def to_json(self) -> dict[str, Any]:
        """The JSON shape every front end prints (`schedule list -o json`)."""
        out: dict[str, Any] = {"name": self.name, "problem": self.problem,
                               "paused": self.paused, "ended": self.ended,
                               "activity_type": self.activity_type}
        s = self.schedule
        if s is None:
            return out
        d = s.definition
        last = s.last_fire
        out.update({
            "cron": d.cron, "every_seconds": d.every_seconds, "timezone": d.timezone,
            "words": d.when_text(), "start_at": _json_time(d.start_at),
            "end_at": _json_time(d.end_at), "jitter_seconds": d.jitter_seconds,
            "missed": d.missed, "max_catchup": d.max_catchup,
            "grace_seconds": d.grace_seconds, "overlap": d.overlap,
            "pause_reason": s.pause_reason, "revision": s.revision,
            "created_at": _json_time(s.created_at), "updated_at": _json_time(s.updated_at),
            "next_fire_at": _json_time(s.next_fire_at),
            "last_fire": None if last is None else {
                "at": _json_time(last.at), "fired_at": _json_time(last.fired_at),
                "kind": last.kind, "count": last.count,
                "activity_id": None if last.activity_id is None else str(last.activity_id),
                "activity_type": last.activity_type, "status": self.last_status},
            "fires": s.fires, "missed_fires": s.missed_fires,
            "skipped_fires": s.skipped_fires,
            "buffered": None if s.buffered is None else {
                "at": _json_time(s.buffered.at), "kind": s.buffered.kind},
            "activity": to_jsonable(d.activity.to_doc())})
        return out


def _json_time(moment: datetime | None) -> str | None:
    return None if moment is None else iso(moment)


@dataclass(frozen=True)
class ApplyChange:
    """One schedule's part of an apply: `create`, `update`, `unchanged` or `remove`."""

    name: str
    action: str
    fields: tuple[str, ...] = ()  # the definition fields an update changes

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "action": self.action, "fields": list(self.fields)}


class Schedules:
    """`rq.schedules`: the schedules of one queue."""

    def __init__(self, ctx: QueueContext, queue: ActivityQueue, audit: AuditLog) -> None:
        self._ctx = ctx
        self._queue = queue
        self._audit = audit

    @property
    def _coll(self) -> Any:
        return self._ctx.collection("schedules")

    def _audited(self, action: str, *, reason: str | None, actor: str | None,
                 command: str | None, **intent: Any) -> contextlib.AbstractContextManager[AuditRun]:
        """One change as an audit run (AuditLog.one_change)."""
        return self._audit.one_change(f"{AUDIT_ACTION} {action}", reason=reason, actor=actor,
                                      command=command, **intent)

    # ------------------------------------------------------------------ reads

    def list_schedules(self) -> list[ScheduleInfo]:
        """Every schedule, by name, with its last fire's activity status: two reads."""
        docs = list(self._coll.find({}).sort([("_id", 1)]))
        return self._infos(docs)

    def get_schedule(self, name: str) -> ScheduleInfo:
        """One schedule (NotFound if there is none of that name)."""
        check_name(name)
        doc = self._coll.find_one({"_id": name})
        if doc is None:
            raise NotFound(f"no schedule named {name!r} in queue {self._ctx.settings.queue!r}")
        return self._infos([doc])[0]

    def upcoming(self, name: str, count: int = 5) -> list[datetime]:
        """The next `count` fire instants after the server's now (UTC)."""
        info = self.get_schedule(name)
        if info.schedule is None or info.paused or info.schedule.next_fire_at is None:
            return []  # malformed, paused, or no instant left
        now = self._ctx.clock()
        first = info.schedule.next_fire_at
        out = [first] if first > now else []  # else due now: fired at the next tick
        after = out[-1] if out else now
        return (out + info.schedule.timeline.upcoming(after, count))[:count]

    def _infos(self, docs: list[dict[str, Any]]) -> list[ScheduleInfo]:
        read = [(doc, *Schedule.from_doc(doc)) for doc in docs]
        ids = [s.last_fire.activity_id for _, s, _ in read
               if s is not None and s.last_fire is not None and s.last_fire.activity_id]
        statuses: dict[Any, str] = {}
        if ids:
            for act in self._ctx.activities.find({"_id": {"$in": ids}}, {"status": 1}):
                if isinstance(act.get("status"), str):
                    statuses[act["_id"]] = act["status"]
        out = []
        for doc, schedule, problem in read:
            stored_problem = doc.get("problem")
            if schedule is not None and isinstance(stored_problem, str):
                problem = stored_problem
            last = schedule.last_fire if schedule is not None else None
            status = statuses.get(last.activity_id) if last and last.activity_id else None
            out.append(ScheduleInfo(str(doc.get("_id")), schedule, problem, status, doc))
        return out

    # ------------------------------------------------------------------ changes

    def add(self, definition: ScheduleDef, *, replace: bool = False, paused: bool = False,
            reason: str | None = None, actor: str | None = None,
            command: str | None = None) -> ScheduleInfo:
        """Store a new schedule (AlreadyExists if the name is taken, unless `replace`).

        InvalidArgument, nothing written, when the definition has no instant left."""
        check_text(reason, "reason")
        check_text(actor, "actor")
        now = self._ctx.clock()
        first = definition.timeline(now).after(now)
        if first is None:
            raise InvalidArgument(f"schedule {definition.name!r} never fires: no instant is "
                                  "left before its end", "end_at")
        existing = self._coll.find_one({"_id": definition.name}, {"_id": 1})
        if existing is not None and not replace:
            raise AlreadyExists(f"schedule {definition.name!r} already exists in queue "
                                f"{self._ctx.settings.queue!r} (replace it with --replace, "
                                "or use schedule apply)")
        doc = new_document(definition, created_at=now, next_fire_at=first, paused=paused,
                           pause_reason=reason if paused else None)
        with self._audited("replace" if existing else "add", reason=reason, actor=actor,
                           command=command, schedule=definition.name,
                           definition=definition.definition()) as run:
            if existing is None:
                from runnerq_cli.errors import DuplicateKey

                try:
                    self._coll.insert_one(doc)
                except DuplicateKey:
                    run.finish("failed", error="the name was taken meanwhile")
                    raise AlreadyExists(f"schedule {definition.name!r} already exists in "
                                        f"queue {self._ctx.settings.queue!r}") from None
            else:
                self._rewrite(definition, now)
        return self.get_schedule(definition.name)

    def _rewrite(self, definition: ScheduleDef, now: datetime) -> None:
        """A new definition for an existing schedule: its counters and last fire kept, its
        next fire computed afresh, `problem` dropped, the revision moved on."""
        current = self._coll.find_one({"_id": definition.name}) or {}
        created = current.get("created_at")
        created_at = created if isinstance(created, datetime) else now
        first = definition.timeline(created_at).after(now)
        self._coll.update_one(
            {"_id": definition.name},
            {"$set": {**definition.definition(), "updated_at": now, "next_fire_at": first,
                      "created_at": created_at},
             # a fire held back under the old definition is not the new one's
             "$unset": {"problem": "", "buffered": ""}, "$inc": {"revision": 1}})

    def apply(self, definitions: Sequence[ScheduleDef], *, prune: bool = False,
              dry_run: bool = False, reason: str | None = None,
              actor: str | None = None, command: str | None = None) -> ApplyReport:
        """Make the stored schedules those of `definitions` (schedules as code).

        Idempotent: a schedule whose stored definition equals its entry is `unchanged`
        and not written (its pause, counters and next fire kept), so a second apply
        changes nothing and says so. `prune` removes the schedules not in the list.
        Everything is checked before the first write (InvalidArgument: nothing written).
        """
        check_text(reason, "reason")
        check_text(actor, "actor")
        names = [d.name for d in definitions]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise InvalidArgument(f"schedule {twice[0]!r} is defined twice")
        now = self._ctx.clock()
        for d in definitions:
            if d.timeline(now).after(now) is None:
                raise InvalidArgument(f"schedule {d.name!r} never fires: no instant is "
                                      "left before its end", "end_at")
        stored = {doc["_id"]: doc for doc in self._coll.find({})}
        changes: list[ApplyChange] = []
        for d in definitions:
            doc = stored.get(d.name)
            if doc is None:
                changes.append(ApplyChange(d.name, "create"))
                continue
            fields = tuple(k for k, v in d.definition().items()
                           if _stored_value(doc.get(k)) != _stored_value(v))
            malformed = Schedule.from_doc(doc)[0] is None or "problem" in doc
            if fields or malformed:
                changes.append(ApplyChange(d.name, "update", fields or ("problem",)))
            else:
                changes.append(ApplyChange(d.name, "unchanged"))
        if prune:
            keep = set(names)
            changes += [ApplyChange(str(n), "remove") for n in sorted(stored, key=str)
                        if n not in keep]
            if not definitions and stored and not dry_run:
                # An empty file is more often a template that rendered nothing, or a
                # file truncated in a pipeline, than a wish to remove every schedule.
                raise InvalidArgument(
                    f"the file defines no schedules: with prune it would remove all "
                    f"{len(stored)} of the queue's; remove them by name instead "
                    f"(schedule remove NAME)")
        report = ApplyReport(tuple(changes), dry_run)
        if dry_run or not report.changed:
            return report
        by_name = {d.name: d for d in definitions}
        with self._audit.begin(f"{AUDIT_ACTION} apply", reason=reason, actor=actor,
                               command=command,
                               plan=[c.to_json() for c in changes if c.action != "unchanged"],
                               prune=prune) as run:
            done = 0
            for change in changes:
                if change.action == "create":
                    doc = new_document(by_name[change.name], created_at=now,
                                       next_fire_at=by_name[change.name].timeline(now).after(
                                           now) or now)
                    self._coll.update_one({"_id": change.name}, {"$setOnInsert": doc},
                                          upsert=True)
                elif change.action == "update":
                    self._rewrite(by_name[change.name], now)
                elif change.action == "remove":
                    self._coll.delete_one({"_id": change.name})
                else:
                    continue
                done += 1
            run.finish("done", count=done)
        return report

    def remove(self, name: str, *, reason: str | None = None, actor: str | None = None,
               command: str | None = None) -> None:
        """Delete a schedule (NotFound if none); its activities stay."""
        self.get_schedule(name)
        with self._audited("remove", reason=reason, actor=actor, command=command,
                           schedule=name):
            self._coll.delete_one({"_id": name})

    def pause(self, name: str, *, reason: str | None = None, actor: str | None = None,
              command: str | None = None) -> bool:
        """Stop a schedule's fires; False if it was already paused (nothing written)."""
        return self._set_paused(name, True, reason, actor, command)

    def resume(self, name: str, *, reason: str | None = None, actor: str | None = None,
               command: str | None = None) -> bool:
        """Fire again; the instants while paused are missed fires (the schedule's policy).
        False if it was not paused (nothing written)."""
        return self._set_paused(name, False, reason, actor, command)

    def _set_paused(self, name: str, paused: bool, reason: str | None,
                    actor: str | None, command: str | None) -> bool:
        check_text(reason, "reason")
        check_text(actor, "actor")
        info = self.get_schedule(name)
        if info.paused == paused:
            return False
        with self._audited("pause" if paused else "resume", reason=reason, actor=actor,
                           command=command, schedule=name):
            self._coll.update_one({"_id": name}, {
                "$set": {"paused": paused, "pause_reason": reason if paused else None,
                         "updated_at": self._ctx.clock()}, "$inc": {"revision": 1}})
        return True

    def trigger(self, name: str, *, reason: str | None = None, actor: str | None = None,
                command: str | None = None) -> EnqueueResult:
        """Fire now, once (paused or not): one activity, `next_fire_at` left alone."""
        check_text(reason, "reason")
        check_text(actor, "actor")
        info = self.get_schedule(name)
        if info.schedule is None:
            raise InvalidArgument(f"schedule {name!r} is malformed: {info.problem}")
        now = self._ctx.clock()
        template = info.schedule.definition.activity
        with self._audited("trigger", reason=reason, actor=actor, command=command,
                           schedule=name) as run:
            result = self._queue.enqueue(template.spec(now, name, "trigger", 0.0,
                                                       trigger_key(name)))
            run.progress([result.activity_id])  # the activity it enqueued, as actions list theirs
            last = LastFire(now, now, "trigger", result.activity_id, template.activity_type)
            # Fenced on buffered too: a release of a held fire meanwhile (it moves only
            # `buffered`) keeps its activity as the previous fire, not this trigger's.
            self._coll.update_one({"_id": name, "revision": info.schedule.revision,
                                   "next_fire_at": info.schedule.next_fire_at,
                                   "buffered": info.raw.get("buffered")},
                                  {"$set": {"last_fire": last.to_doc()}, "$inc": {"fires": 1}})
        return result

    # ------------------------------------------------------------------ the firing chore

    def fire_due(self, limit: int = FIRE_BATCH) -> dict[str, int]:
        """Fire every due schedule (`limit` per query); counts of what was done.

        One indexed query; nothing due, nothing written. A full page is followed by the
        next (those seen left out, up to FIRE_PAGES): a page of buffered fires that still
        wait (they stay found, and an ended schedule's null `next_fire_at` sorts first)
        never hides the due schedules behind it. Returns {"fired": activities
        enqueued, "missed": instants dropped by the missed-fire policy, "skipped": fires
        skipped by the overlap policy, "buffered": fires held back by `buffer_one`,
        "malformed": schedules set aside, "lost": fires another firer made first}.
        """
        now = self._ctx.clock()
        query = queries.due_schedules(now)
        counts = {"fired": 0, "missed": 0, "skipped": 0, "buffered": 0, "malformed": 0,
                  "lost": 0}
        seen: list[Any] = []
        for _ in range(FIRE_PAGES):
            found = query.filter if not seen else {
                "$and": [query.filter, {"_id": {"$nin": seen}}]}
            page = list(self._coll.find(found).sort(query.sort_list).limit(limit))
            for doc in page:
                self._fire_one(doc, now, counts)
                seen.append(doc["_id"])
            if len(page) < limit:
                break
        if any(counts.values()):
            log.info("schedules: fired the due schedules", extra={"fields": counts})
        return counts

    def _fire_one(self, doc: dict[str, Any], now: datetime, counts: dict[str, int]) -> None:
        schedule, problem = Schedule.from_doc(doc)
        buffered = doc.get("buffered")
        # `buffered` whole and as read (null matches it absent): a fence on `buffered.at`
        # never matched a malformed one such as a list, which the firing query's branch
        # finds through the array, so the schedule could not even be set aside.
        fence = {"_id": doc["_id"], "next_fire_at": doc.get("next_fire_at"),
                 "revision": doc.get("revision"), "buffered": buffered}
        decision = None
        if schedule is not None:
            try:
                plan = plan_fire(schedule, now)
                busy = schedule.definition.overlap != "allow" and bool(
                    plan.instants or schedule.buffered) and self._busy(schedule)
                decision = decide_overlap(schedule, plan, busy)
                specs = self._specs(schedule, decision.enqueue)
            except (InvalidArgument, ValueError, OverflowError, RecursionError) as exc:
                # cronsim or a template refusing what the checks let through: this
                # schedule is set aside, the others fire.
                schedule, problem = None, f"cannot fire: {exc}"
        if schedule is None or decision is None:
            counts["malformed"] += self._set_aside(fence, str(problem))
            return
        due = schedule.next_fire_at is not None and schedule.next_fire_at <= now
        if not due and not decision.enqueue:
            return  # found for a buffered fire whose previous activity still runs
        template = schedule.definition.activity
        last: LastFire | None = None
        fired = 0
        if specs:
            results = self._queue.enqueue_many(specs)
            errors = [r for r in results if isinstance(r, Exception)]
            if errors:  # the server refuses its activity: it would be refused at every tick
                counts["malformed"] += self._set_aside(
                    fence, f"its activity is refused: {errors[0]}")
                return
            done = [r for r in results if isinstance(r, EnqueueResult)]
            if not self._exist([r for r in done if not r.created]):
                return  # a key whose activity is still being inserted: the fire stays due
            fired = len(done)
            newest, kind = decision.enqueue[-1]
            last = LastFire(newest, now, kind, done[-1].activity_id, template.activity_type,
                            fired)
        elif decision.skipped:  # gave way to the previous fire's activity, kept as such
            previous = schedule.last_fire.activity_id if schedule.last_fire else None
            last = LastFire(plan.instants[-1][0], now, "skipped", previous,
                            template.activity_type, 0)
        update: dict[str, Any] = {
            "$set": {"next_fire_at": plan.next_fire_at,
                     **({"last_fire": last.to_doc()} if last else {}),
                     **({"buffered": decision.buffered.to_doc()} if decision.buffered
                        else {})},
            "$inc": {"fires": fired, "missed_fires": plan.missed,
                     "skipped_fires": decision.skipped}}
        if decision.buffered is None and buffered is not None:
            update["$unset"] = {"buffered": ""}
        if not self._coll.update_one(fence, update).matched_count:
            counts["lost"] += 1
            return
        counts["fired"] += fired
        counts["missed"] += plan.missed
        counts["skipped"] += decision.skipped
        if decision.buffered is not None and decision.buffered != schedule.buffered:
            counts["buffered"] += 1

    def _set_aside(self, fence: dict[str, Any], problem: str) -> int:
        """A schedule that cannot fire stops being due (fenced on what was read), its
        problem stored for the views; 1 if done. Read once, not at every tick: its
        buffered fire goes too, or the firing query's second branch would find it at
        every tick (the fix, `add --replace` or `apply`, drops it anyway)."""
        log.warning("schedules: a schedule that cannot fire is set aside",
                    extra={"fields": {"schedule": fence["_id"], "problem": problem}})
        moved = self._coll.update_one(fence, {"$set": {"problem": problem},
                                              "$unset": {"next_fire_at": "",
                                                         "buffered": ""}})
        return int(moved.modified_count)

    @staticmethod
    def _specs(schedule: Schedule,
               instants: Sequence[tuple[datetime, str]]) -> list[ActivitySpec]:
        """The activities of a fire's instants, each with its key and jitter."""
        name, d = schedule.name, schedule.definition
        return [d.activity.spec(instant, name, kind,
                                jitter_for(name, instant, d.jitter_seconds),
                                fire_key(name, instant))
                for instant, kind in instants]

    def _busy(self, schedule: Schedule) -> bool:
        """Whether the previous fire's activity is still pending, scheduled or running."""
        last = schedule.last_fire
        if last is None or last.activity_id is None:
            return False
        doc = self._ctx.activities.find_one(
            {"_id": last.activity_id, "status": {"$in": list(UNFINISHED)}}, {"_id": 1})
        return doc is not None

    def _exist(self, results: Iterable[EnqueueResult]) -> bool:
        """Whether the activities of the keys found held exist (a key is taken before its
        activity is inserted: a firer killed in between left a key without one, which
        the enqueue answers for a minute; the fire then waits for the key's takeover)."""
        ids = list({r.activity_id for r in results})
        if not ids:
            return True
        found = {d["_id"] for d in self._ctx.activities.find({"_id": {"$in": ids}}, {"_id": 1})}
        return all(i in found for i in ids)


def _stored_value(value: Any) -> Any:
    """A value as MongoDB stores and returns it (dates without tzinfo, to compare)."""
    if isinstance(value, datetime):
        return value.replace(tzinfo=None) if value.tzinfo is None else \
            value.astimezone(UTC).replace(tzinfo=None)
    if isinstance(value, dict):
        return {k: _stored_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_stored_value(v) for v in value]
    return value
