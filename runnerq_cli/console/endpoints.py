"""What each GET route answers: RunnerQ's observability API and our own (docs/console.md).

Each answer is the JSON its command-line twin prints, read through the
backend's parts at the twin's cost. Reads every open page repeats (the counts,
the stats snapshot, the queues, the doctor) go through `Shared`: computed once
per short interval whatever the number of pages asking.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from runnerq_cli.backend.domain.models import (
    MalformedDocument,
    Status,
    parse_activity_id,
    to_jsonable,
)
from runnerq_cli.console import observability as obs
from runnerq_cli.errors import InvalidArgument, NotFound

if TYPE_CHECKING:
    from runnerq_cli.backend.api import RunnerQ

LIMIT_CAP = 1000  # RunnerQ's `limit` and ours
OFFSET_CAP = 10_000  # RunnerQ's `offset`: the server walks what it skips
SHARED_SECONDS = 2.0  # how long a shared read (counts, stats, queues) is reused
DOCTOR_SECONDS = 10.0
RUNNING_SHOWN = 50  # activities listed per worker
WINDOW_MAX_MINUTES = 24 * 60
TREE_SHOWN = 200  # members of a durable tree on an activity's page (`tree ID` has them all)


class Shared:
    """Values reused for `seconds` and computed once when many ask at the same time."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._values: dict[tuple[Any, ...], tuple[float, Any]] = {}
        self._locks: dict[tuple[Any, ...], threading.Lock] = {}

    def get(self, key: tuple[Any, ...], seconds: float, compute: Callable[[], Any]) -> Any:
        with self._lock:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:  # one computation per key at a time; the others wait for its value
            hit = self._values.get(key)
            if hit is not None and self._clock() - hit[0] < seconds:
                return hit[1]
            value = compute()
            self._values[key] = (self._clock(), value)
            return value


def integer(params: dict[str, str], name: str, default: int, low: int, high: int) -> int:
    """A whole-number query parameter within [low, high] (InvalidArgument names it)."""
    text = params.get(name)
    if text is None or text == "":
        return default
    if not text.isascii() or not text.isdigit() or len(text) > 9:
        raise InvalidArgument(f"{name} must be a whole number between {low} and {high}")
    value = int(text)
    if not low <= value <= high:
        raise InvalidArgument(f"{name} must be between {low} and {high}")
    return value


def activity_id(text: str) -> uuid.UUID:
    return parse_activity_id(text)


class Views:
    """The answers, for one console (its default queue, its shared reads)."""

    def __init__(self, rq: RunnerQ, shared: Shared | None = None) -> None:
        self.rq = rq
        self.shared = shared or Shared()

    # ------------------------------------------------------------ queues

    def queue_names(self) -> list[str]:
        names: list[str] = self.shared.get(("queue names",), SHARED_SECONDS,
                                           self.rq.diagnosis.discover_queues)
        return names

    def backend(self, name: str | None) -> RunnerQ:
        """The console's queue, or another queue of the database (`?queue=`)."""
        if not name or name == self.rq.queue:
            return self.rq
        if name not in self.queue_names():
            raise InvalidArgument(f"unknown queue {name!r}: see /api/queues")
        return self.rq.for_queue(name)

    # ------------------------------------------------------------ RunnerQ's API

    def max_workers(self, rq: RunnerQ) -> int | None:
        live = [w for w in rq.registry.list_workers() if not w.stale]
        return sum(w.concurrency for w in live) if live else None

    def observability_stats(self) -> dict[str, Any]:
        def compute() -> dict[str, Any]:
            return obs.queue_stats(self.rq.inspector.stats(), self.max_workers(self.rq))

        stats: dict[str, Any] = self.shared.get(("obs stats",), SHARED_SECONDS, compute)
        return stats

    def observability_list(self, key: str,
                           params: dict[str, str]) -> tuple[list[dict[str, Any]], int]:
        """One of RunnerQ's lists, and how many records were left out of it: malformed
        ones (shapes.readable) and those whose id is not a UUID (obs.listable)."""
        offset = integer(params, "offset", 0, 0, OFFSET_CAP)
        limit = integer(params, "limit", 50, 1, LIMIT_CAP)
        inspector = self.rq.inspector
        if key == "dead_letter":
            records, malformed = inspector.list_dead_letter_counted(offset, limit)
            items, skipped = obs.snapshots(r.activity for r in records)
            return items, skipped + malformed
        statuses = {"pending": Status.PENDING, "processing": Status.PROCESSING,
                    "scheduled": Status.SCHEDULED, "completed": Status.COMPLETED}
        activities, malformed = inspector.list_counted(statuses[key], offset, limit)
        items, skipped = obs.snapshots(activities)
        return items, skipped + malformed

    def observability_activity(self, aid: uuid.UUID) -> dict[str, Any]:
        return obs.snapshot(self.rq.inspector.get_activity(aid))

    def observability_events(self, aid: uuid.UUID, params: dict[str, str]) -> list[dict[str, Any]]:
        limit = integer(params, "limit", 50, 1, LIMIT_CAP)
        return [obs.event(e) for e in self.rq.inspector.get_activity_events(aid, limit)
                if obs.sendable(e)]

    def observability_result(self, aid: uuid.UUID) -> Any:
        result = self.rq.get_result(aid)
        return to_jsonable(result.data) if result is not None else None

    def observability_dead_letters(self, params: dict[str, str]
                                   ) -> tuple[list[dict[str, Any]], int]:
        offset = integer(params, "offset", 0, 0, OFFSET_CAP)
        limit = integer(params, "limit", 50, 1, LIMIT_CAP)
        records = self.rq.inspector.list_dead_letter(offset, limit)
        kept = [obs.dead_letter(r) for r in records if obs.listable(r.activity)]
        return kept, len(records) - len(kept)

    # ------------------------------------------------------------ ours

    def queues(self) -> dict[str, Any]:
        def compute() -> dict[str, Any]:
            # Each row as `queues -o json` prints it, the schedules' summary included.
            return {"queues": [{**(q := self.rq.for_queue(name)).diagnosis.summary(),
                                "schedules": q.schedule_views.summary(),
                                "limits": [i.brief() for i in q.limits.summary()]}
                               for name in self.queue_names()]}

        value: dict[str, Any] = self.shared.get(("queues",), SHARED_SECONDS, compute)
        return value

    def stats(self, params: dict[str, str]) -> dict[str, Any]:
        rq = self.backend(params.get("queue"))
        minutes = integer(params, "window", 60, 1, WINDOW_MAX_MINUTES)

        def compute() -> dict[str, Any]:
            # throughput and latency over `stats`' own windows; history over the page's
            snap = dict(rq.inspector.stats_snapshot(by_type=True,
                                                    history_seconds=minutes * 60.0))
            snap["schedules"] = rq.schedule_views.summary()  # as `stats -o json` has it
            snap["limits"] = [i.brief() for i in rq.limits.summary()]
            return snap

        value: dict[str, Any] = self.shared.get(("stats", rq.queue, minutes), SHARED_SECONDS,
                                                compute)
        return value

    def failing(self, params: dict[str, str]) -> dict[str, Any]:
        """What is failing: the backend's grouping (`stats --by error`'s), over the stored
        failure events of the last `hours`, so an incident stays listed after a retry."""
        rq = self.backend(params.get("queue"))
        hours = integer(params, "hours", 24, 1, 24 * 30)
        limit = integer(params, "limit", 50, 1, LIMIT_CAP)

        def compute() -> dict[str, Any]:
            found = rq.inspector.failures_by_type_and_error(since=timedelta(hours=hours),
                                                             limit=limit)
            return {"window_hours": hours, **found.to_json()}

        value: dict[str, Any] = self.shared.get(("failing", rq.queue, hours, limit),
                                                SHARED_SECONDS, compute)
        return value

    def workers(self, params: dict[str, str]) -> dict[str, Any]:
        """Every registry entry: the readable ones, and the malformed ones as rows saying
        so (stale or not as `stats` counts them), so the counts here are the overview's."""
        rq = self.backend(params.get("queue"))
        running: dict[str, list[str]] = {}
        page = rq.inspector.list_page(Status.PROCESSING, limit=LIMIT_CAP)
        for activity in page.items:
            if activity.worker_id is not None:
                ids = running.setdefault(activity.worker_id, [])
                if len(ids) < RUNNING_SHOWN:
                    ids.append(str(activity.id))
        good, bad = rq.registry.worker_entries()
        out = []
        for worker in good:
            row = worker.to_json()
            row["running"] = running.get(worker.worker_id, [])
            out.append(row)
        out += [{**entry, "malformed": entry.pop("problem"), "running": []} for entry in bad]
        stale = sum(1 for row in out if row.get("stale"))
        return {"workers": out, "live": len(out) - stale, "stale": stale,
                "malformed": len(bad)}

    def pauses(self, params: dict[str, str]) -> dict[str, Any]:
        state: dict[str, Any] = self.backend(params.get("queue")).control.paused().to_json()
        return state

    def schedules(self, params: dict[str, str]) -> dict[str, Any]:
        """Every schedule as `schedule list -o json` prints it (a malformed one with its
        problem), and the summary `stats` shows: one read of the schedules."""
        rq = self.backend(params.get("queue"))
        infos = rq.schedule_views.infos()
        return {"schedules": [{**i.to_json(), "actionable": _actionable(i.name)}
                              for i in infos],
                "summary": rq.schedule_views.summary(infos)}

    def limits(self, params: dict[str, str]) -> dict[str, Any]:
        """Every flow limit as `limit list -o json` prints it (its holders' workers and
        keys, the busiest keys), with the work it holds back (`stats`' count)."""
        rq = self.backend(params.get("queue"))
        return {"limits": [i.to_json() for i in rq.limits.summary()]}

    def doctor(self, params: dict[str, str]) -> dict[str, Any]:
        rq = self.backend(params.get("queue"))

        def compute() -> dict[str, Any]:
            from runnerq_cli.backend.domain.checks import failed

            checks = rq.diagnosis.doctor()
            return {"ok": not failed(checks), "checks": [c.to_json() for c in checks]}

        value: dict[str, Any] = self.shared.get(("doctor", rq.queue), DOCTOR_SECONDS, compute)
        return value

    def audit(self, params: dict[str, str]) -> dict[str, Any]:
        rq = self.backend(params.get("queue"))
        limit = integer(params, "limit", 100, 1, LIMIT_CAP)
        entries = rq.audit_log.audit(limit=limit, actor=params.get("actor") or None,
                                     action=params.get("action") or None)
        return {"entries": [e.to_json() for e in entries]}

    def activity(self, aid: uuid.UUID, params: dict[str, str]) -> dict[str, Any]:
        """One activity's page: the activity, its timeline oldest first, its result and
        the `explain` sentence (show + events + result + explain)."""
        rq = self.backend(params.get("queue"))
        try:
            activity = rq.inspector.get_activity(aid)  # NotFound: 404
        except MalformedDocument:
            return self._malformed_activity(rq, aid)
        events = rq.inspector.get_activity_events(aid, LIMIT_CAP)
        try:
            result = rq.get_result(aid)
        except MalformedDocument:  # another program's result: the activity still shows
            result = None
        try:
            sentence: str | None = rq.diagnosis.explain(aid).sentence
        except NotFound:  # deleted between the reads
            sentence = None
        return {"activity": activity.to_json(), "snapshot": obs.snapshot(activity),
                "events": [e.to_json() for e in reversed(events)],
                "result": result.to_json() if result is not None else None,
                "explain": sentence, "progress": _progress(activity.extra.get("progress")),
                **self._durable(rq, aid)}

    @staticmethod
    def _durable(rq: RunnerQ, aid: uuid.UUID) -> dict[str, Any]:
        """The activity's tree (every member with its state, depth and wait, at most
        TREE_SHOWN), its own steps and what it waits for, in words (`tree`'s reads: the
        subtree, the members' steps, an awaited producer outside the tree)."""
        from runnerq_cli.backend.domain.models import display_time

        try:
            tree = rq.trees.tree(aid)
        except NotFound:  # deleted between the reads
            return {"tree": None, "steps": [], "waiting": None}
        members = []
        own: dict[str, Any] = {"steps": [], "waiting": None}
        for member in tree.members:
            shown = member.to_json()
            shown["waiting_text"] = member.wait.describe(display_time) if member.wait else None
            if member.id == aid:
                own = {"steps": shown["steps"], "waiting": shown["waiting"] and {
                    **shown["waiting"], "text": shown["waiting_text"]}}
            members.append(shown)
        return {"tree": {"root_id": str(tree.root_id), "members": members[:TREE_SHOWN],
                         "count": len(members), "truncated": tree.truncated
                         or len(members) > TREE_SHOWN}, **own}

    def _malformed_activity(self, rq: RunnerQ, aid: uuid.UUID) -> dict[str, Any]:
        """A stored document the readers refuse is not a server failure: the page answers
        as `explain` does (200), with what can be shown (id, status, last error), the
        problem as `malformed`, and the sentence saying what the queue does with it."""
        explained = rq.diagnosis.explain(aid)  # NotFound if deleted in between: 404
        facts = explained.facts
        return {"activity": {"id": str(aid), "status": explained.status,
                             "last_error": facts.get("last_error")},
                "malformed": facts.get("problem"), "snapshot": None,
                "events": [e.to_json() for e in reversed(
                    rq.inspector.get_activity_events(aid, LIMIT_CAP))],
                "result": None, "explain": explained.sentence}

    def search(self, params: dict[str, str]) -> dict[str, Any]:
        """Activities whose id starts with the hex digits given (idprefix.py's range read)."""
        from runnerq_cli.backend.domain.idprefix import PREFIX_MIN, prefix_of

        rq = self.backend(params.get("queue"))
        text = (params.get("q") or "").strip()
        try:
            aid = parse_activity_id(text)
        except InvalidArgument:
            digits = prefix_of(text)
            if digits is None:
                raise InvalidArgument(f"q must be an activity id or its first {PREFIX_MIN} or "
                                      "more hex digits") from None
            found = rq.inspector.ids_starting_with(digits, limit=10)
            return {"matches": [str(i) for i in found],
                    "exact": str(found[0]) if len(found) == 1 else None}
        try:
            rq.inspector.get_activity(aid)
        except NotFound:
            return {"matches": [], "exact": None}
        return {"matches": [str(aid)], "exact": str(aid)}

    def activities(self, params: dict[str, str]) -> dict[str, Any]:
        """A keyset page of one state, of one type if given (list STATE --type --after)."""
        from runnerq_cli.backend.domain.pagination import ListFilter

        rq = self.backend(params.get("queue"))
        state = Status.parse(params.get("state") or "pending")
        limit = integer(params, "limit", 50, 1, LIMIT_CAP)
        filters = ListFilter(activity_type=params.get("type") or None)
        malformed: list[tuple[str, str]] = []
        page = rq.inspector.list_page(state, filters=filters, limit=limit,
                                      after=params.get("after") or None, malformed=malformed)
        return {"items": [a.to_json() for a in page.items], "next_cursor": page.next_cursor,
                "skipped": page.skipped,
                "malformed": [{"id": i, "problem": p} for i, p in malformed]}


def _actionable(name: Any) -> bool:
    """Whether the schedule actions can name this schedule: another program may have
    stored one under a name our rule refuses (markup, spaces), which no action takes,
    so the page offers none for it rather than buttons that can only fail."""
    from runnerq_cli.backend.domain.schedules import check_name

    try:
        check_name(name)
    except InvalidArgument:
        return False
    return True


def _progress(progress: Any) -> dict[str, Any] | None:
    """A running handler's last report (docs/design.md, "Progress") with its line in
    words, as `show` prints it; None when there is none that reads right."""
    from runnerq_cli.backend.domain.models import to_jsonable
    from runnerq_cli.backend.domain.progress import progress_text

    text = progress_text(progress)
    return None if text is None else {**to_jsonable(progress), "text": text}
