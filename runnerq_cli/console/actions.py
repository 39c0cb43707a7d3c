"""Operator actions from the console: a preview of the exact set, then a confirmation.

As on the command line (`--dry-run`, then `--yes`): the preview reads only and
returns the set the action would change with a `confirm` token; the action acts
on exactly that set (bulk.Selection: an activity changed since is skipped, not
acted on), bounded like `--max`, audited with the operator's actor and
`command: console` so the audit trail tells the console's actions apart.
Previews live in memory for PREVIEW_SECONDS; a restart forgets them (409: preview again).
"""

from __future__ import annotations

import secrets
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from runnerq_cli.backend.domain.models import to_jsonable
from runnerq_cli.errors import InvalidArgument
from runnerq_cli.plural import counted

if TYPE_CHECKING:
    from runnerq_cli.backend.api import RunnerQ

ACTIONS = ("retry", "cancel", "run-now", "redrive", "pause", "resume",
           "schedule-pause", "schedule-resume", "schedule-trigger", "signal", "limit-set")
SCHEDULE_ACTIONS = ("schedule-pause", "schedule-resume", "schedule-trigger")
BY_FILTER = ("retry", "cancel", "run-now")
PREVIEW_SECONDS = 600.0
PREVIEWS_KEPT = 64
DEFAULT_MAX = 1000
COMMAND = "console"


class PreviewExpired(Exception):
    """The confirm token names no preview (expired, used, or made before a restart)."""


@dataclass
class Preview:
    action: str
    queue: str
    target: Any  # a Selection, a list of ids, or the types of pause/resume
    expires: float


def _strings(value: Any, name: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InvalidArgument(f"{name} must be a list of strings")
    return value


def _ids(body: dict[str, Any], limit: int) -> list[uuid.UUID] | None:
    from runnerq_cli.backend.domain.models import parse_activity_id

    if "ids" not in body:
        return None
    ids = [parse_activity_id(t) for t in _strings(body["ids"], "ids")]
    if not ids:
        raise InvalidArgument("ids must not be empty")
    if len(ids) > limit:
        raise InvalidArgument(f"at most {counted(limit, 'id')} at once (the console's max)")
    return list(dict.fromkeys(ids))


class Desk:
    """The console's actions: previews kept until confirmed or expired."""

    def __init__(self, max_count: int = DEFAULT_MAX,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not 1 <= max_count <= 10_000:
            raise InvalidArgument("max-action must be between 1 and 10000")
        self.max_count = max_count
        self._clock = clock
        self._lock = threading.Lock()
        self._previews: dict[str, Preview] = {}

    def _max(self, body: dict[str, Any]) -> int:
        value = body.get("max")
        if value is None:
            raise InvalidArgument("max is required with a filter (as --max is)")
        if isinstance(value, bool) or not isinstance(value, int) \
                or not 1 <= value <= self.max_count:
            raise InvalidArgument(f"max must be a whole number between 1 and {self.max_count}")
        return value

    def preview(self, rq: RunnerQ, action: str, body: dict[str, Any]) -> dict[str, Any]:
        """What `action` would change now, with the token that confirms exactly that."""
        shown: dict[str, Any]
        target: Any
        if action in BY_FILTER:
            target, shown = self._preview_activities(rq, action, body)
        elif action in SCHEDULE_ACTIONS:
            target, shown = _preview_schedule(rq, action, body)
        elif action == "signal":
            target, shown = _preview_signal(rq, body)
        elif action == "limit-set":
            target, shown = _preview_limit(rq, body)
        elif action == "redrive":
            ids = _ids(body, self.max_count)
            types = _strings(body.get("types"), "types")
            limit = self.max_count if ids is not None else self._max(body)
            report = rq.operator.redrive(types or None, dry_run=True, ids=ids, limit=limit)
            target = [a["id"] for a in report.activities]
            shown = {"selected": len(target), "matched": len(target),
                     "ids": [str(i) for i in target],
                     "sample": to_jsonable(report.activities[:10])}
        else:
            types = _strings(body.get("types"), "types")
            before = rq.control.paused()
            target = types
            shown = {"before": before.to_json(), "types": types,
                     "what": ("the whole queue" if not types else ", ".join(types))}
        token = secrets.token_urlsafe(18)
        with self._lock:
            now = self._clock()
            for key in [k for k, p in self._previews.items() if p.expires <= now]:
                del self._previews[key]
            while len(self._previews) >= PREVIEWS_KEPT:
                self._previews.pop(next(iter(self._previews)))
            self._previews[token] = Preview(action, rq.queue, target, now + PREVIEW_SECONDS)
        return {"action": action, "queue": rq.queue, **shown, "confirm": token,
                "expires_in_seconds": PREVIEW_SECONDS}

    def _preview_activities(self, rq: RunnerQ, action: str,
                            body: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        ids = _ids(body, self.max_count)
        if ids is not None:
            rows = rq.bulk.preview_ids(action, ids)
            eligible = [r["id"] for r in rows if r.get("eligible")]
            # matched: the ids that exist (as a filter's matched counts what it finds);
            # selected: those the action applies to.
            found = sum(1 for r in rows if r.get("reason") != "not found")
            return eligible, {"selected": len(eligible), "matched": found,
                              "ids": [str(i) for i in eligible], "sample": to_jsonable(rows)}
        selection = rq.bulk.select(action, _activity_filter(body.get("filter")), self._max(body))
        return selection, {**selection.to_json(), "ids": [str(i) for i in selection.ids]}

    def confirm(self, rq: RunnerQ, action: str, body: dict[str, Any]) -> dict[str, Any]:
        """Act on the previewed set; PreviewExpired when the token names none."""
        from runnerq_cli.backend.domain.operator_text import check_text

        actor = body.get("actor")
        if not isinstance(actor, str) or not actor.strip() or len(actor) > 200:
            raise InvalidArgument("actor is required: who acts (1 to 200 characters)")
        reason = body.get("reason")
        if reason is not None and not isinstance(reason, str):
            raise InvalidArgument("reason must be text")
        check_text(actor, "actor")
        check_text(reason, "reason")
        token = body.get("confirm")
        with self._lock:
            preview = self._previews.get(token) if isinstance(token, str) else None
            if preview is None or preview.expires <= self._clock() \
                    or preview.action != action or preview.queue != rq.queue:
                raise PreviewExpired()
            del self._previews[str(token)]  # a confirmation acts once
        if action in BY_FILTER:
            report = rq.bulk.apply(action, preview.target, reason=reason, actor=actor,
                                   command=COMMAND)
            out: dict[str, Any] = report.to_json()
            return out
        if action in SCHEDULE_ACTIONS:
            return _act_on_schedule(rq, action, str(preview.target), reason, actor)
        if action == "signal":
            aid, name, payload = preview.target
            sent: dict[str, Any] = rq.signals.send(aid, name, payload, reason=reason,
                                                   actor=actor, command=COMMAND).to_json()
            return sent
        if action == "limit-set":
            done = rq.limits.set(preview.target, reason=reason, actor=actor, command=COMMAND)
            return {"action": action, "result": done,
                    "state": rq.limits.get(preview.target.activity_type).to_json()}
        if action == "redrive":
            redriven = rq.operator.redrive(ids=preview.target, reason=reason, actor=actor,
                                           command=COMMAND)
            moved: dict[str, Any] = redriven.to_json()
            return moved
        change = rq.control.pause if action == "pause" else rq.control.resume
        state = change(preview.target or None, reason=reason, actor=actor, command=COMMAND)
        return {"action": action, "state": state.to_json()}


def _preview_schedule(rq: RunnerQ, action: str,
                      body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The schedule a schedule action names (`{"name"}`), as it is now: NotFound (404)
    when there is none; a malformed one cannot be triggered (the CLI refuses it too)."""
    name = body.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidArgument("name is required: the schedule to act on")
    info = rq.schedules.get_schedule(name)
    if action == "schedule-trigger" and info.schedule is None:
        raise InvalidArgument(f"schedule {name!r} is malformed: {info.problem}")
    verb = action.removeprefix("schedule-")
    unchanged = (verb == "pause" and info.paused) or (verb == "resume" and not info.paused)
    return name, {"what": name, "schedule": info.to_json(), "selected": 0 if unchanged else 1,
                  "unchanged": unchanged}


def _preview_signal(rq: RunnerQ, body: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The signal `{"id", "name", "payload"}` would send, checked as `signal` checks it
    (400 a bad name or payload, 404 no such activity, 409 a finished one), nothing
    written; the confirmation sends exactly that (the target checked again then)."""
    unknown = set(body) - {"id", "name", "payload"}
    if unknown:
        raise InvalidArgument(f"unknown field {sorted(unknown)[0]!r}: give id, name, payload")
    aid, name = body.get("id"), body.get("name")
    if not isinstance(aid, str):
        raise InvalidArgument("id is required: the activity to signal")
    if not isinstance(name, str):
        raise InvalidArgument("name is required: the signal's name (text)")
    target = rq.signals.check(aid, name, body.get("payload"))
    return ((target.activity_id, target.name, body.get("payload")),
            {**target.to_json(), "selected": 1, "matched": 1,
             "ids": [str(target.activity_id)],
             "sample": [{"id": str(target.activity_id), "activity_type": target.activity_type,
                         "status": target.status}]})


def _preview_limit(rq: RunnerQ, body: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The limits `limit set` would store (`{"type", "concurrency", "key_limit", "rate",
    "key_rate"}`, each checked as the CLI checks them) beside those stored now."""
    from runnerq_cli.backend.domain.flow import make_limits
    from runnerq_cli.errors import NotFound

    unknown = set(body) - {"type", "concurrency", "key_limit", "rate", "key_rate"}
    if unknown:
        raise InvalidArgument(f"unknown field {sorted(unknown)[0]!r}: use type, concurrency, "
                              "key_limit, rate, key_rate")
    limits = make_limits(body.get("type"), body.get("concurrency"), body.get("key_limit"),
                         body.get("rate"), body.get("key_rate"))
    try:
        before: dict[str, Any] | None = rq.limits.get(limits.activity_type).limits.to_json()
    except NotFound:
        before = None
    after = limits.to_json()
    unchanged = before == after
    return limits, {"what": f"{limits.activity_type}: {limits.describe()}", "before": before,
                    "after": after, "selected": 0 if unchanged else 1, "unchanged": unchanged}


def _act_on_schedule(rq: RunnerQ, action: str, name: str, reason: str | None,
                     actor: str) -> dict[str, Any]:
    """Pause, resume or trigger the previewed schedule, audited as the CLI's are (with
    `command: console`)."""
    verb = action.removeprefix("schedule-")
    out: dict[str, Any] = {"action": action, "schedule": name}
    if verb == "trigger":
        result = rq.schedules.trigger(name, reason=reason, actor=actor, command=COMMAND)
        out["activity_id"] = str(result.activity_id)
    else:
        change = rq.schedules.pause if verb == "pause" else rq.schedules.resume
        out["changed"] = change(name, reason=reason, actor=actor, command=COMMAND)
    out["state"] = rq.schedules.get_schedule(name).to_json()
    return out


def _activity_filter(raw: Any) -> Any:
    """An ActivityFilter from the preview's `filter` object (status, type, error_contains)."""
    from runnerq_cli.backend.domain.filters import ActivityFilter

    if not isinstance(raw, dict):
        raise InvalidArgument("give ids or a filter object")
    unknown = set(raw) - {"status", "type", "error_contains"}
    if unknown:
        raise InvalidArgument(f"unknown filter field {sorted(unknown)[0]!r}: use status, "
                              "type, error_contains")
    error = raw.get("error_contains")
    if error is not None and not isinstance(error, str):
        raise InvalidArgument("error_contains must be text")
    from runnerq_cli.backend.domain.models import Status

    flt = ActivityFilter(statuses=tuple(Status.parse(s) for s in _strings(raw.get("status"),
                                                                          "status")),
                         types=tuple(_strings(raw.get("type"), "type")),
                         error_contains=error)
    if flt.is_empty:
        raise InvalidArgument("the filter is empty: give a status, a type or error_contains")
    return flt

