"""The doctor's checks of a queue's schedules (docs/diagnose.md, "Schedules").

Four checks over one `list_schedules()` (two reads) and the worker registry the other
checks read too: a schedule whose activity type no live worker runs (its fires would
wait), fires overdue past their grace (no firer running: every worker down), a schedule
that can never fire again (past its end), and a schedule set aside as malformed (it does
not fire until it is rewritten). A queue without schedules passes them all at once.
"""

from __future__ import annotations

from datetime import datetime

from runnerq_cli.backend.domain.checks import Check, CheckStatus
from runnerq_cli.backend.domain.pause import PauseState
from runnerq_cli.backend.ops.schedules import ScheduleInfo
from runnerq_cli.backend.queue.workers import WorkerInfo
from runnerq_cli.plural import agreeing, counted
from runnerq_cli.times import format_duration

NAMES_SHOWN = 20  # schedules named in a check's facts


def _names(infos: list[ScheduleInfo]) -> list[str]:
    return [i.name for i in infos[:NAMES_SHOWN]]


def _fix_command(queue: str, verb: str) -> str:
    return f"runnerq-mongo --queue {queue} schedule {verb}"


def check_schedule_coverage(queue: str, infos: list[ScheduleInfo],
                            workers: list[WorkerInfo],
                            pause: PauseState | None = None) -> Check:
    """Firing schedules (not paused, not ended, well formed) whose activity type no live
    worker runs: each fire's activity would wait pending. Without any live worker the
    `workers` and `schedule fires` checks say so; this one then passes. A type paused
    (`pause --type`, or the queue) waits on purpose, as `coverage` says: not counted."""
    pause = pause or PauseState()
    live = [w for w in workers if not w.stale]
    firing = [i for i in infos if i.problem is None and not i.paused and not i.ended
              and not (pause.all or i.activity_type in pause.types)]
    if not live:
        return Check("schedule coverage", CheckStatus.OK,
                     f"{counted(len(firing), 'firing schedule')}; no live workers (see workers)",
                     None, {"firing": len(firing)})
    orphans = [i for i in firing if i.activity_type is not None and not any(
        not w.types or i.activity_type in w.types for w in live)]
    facts = {"firing": len(firing), "uncovered": [
        {"schedule": i.name, "activity_type": i.activity_type} for i in orphans[:NAMES_SHOWN]]}
    if orphans:
        first = orphans[0]
        return Check("schedule coverage", CheckStatus.WARN,
                     f"{counted(len(orphans), 'schedule')} "
                     f"{agreeing(len(orphans), 'fires', 'fire')} a type no live worker runs, e.g. "
                     f"{first.name} ({first.activity_type})",
                     f"start a worker with a handler for it (runnerq-mongo worker --handler "
                     f"{first.activity_type}=MOD:FUNC or --exec {first.activity_type}=COMMAND)",
                     facts)
    return Check("schedule coverage", CheckStatus.OK,
                 f"every firing schedule's type has a live worker ({len(firing)} firing)",
                 None, facts)


def check_schedule_fires(queue: str, infos: list[ScheduleInfo], now: datetime) -> Check:
    """Schedules whose next fire is overdue past its grace: nothing is firing them (every
    worker down, or none on this queue, and no `scheduler`); their fires are being missed
    (the missed-fire policy decides what a firer does with them when it comes back)."""
    late = sorted(((i.late_by(now) or 0.0, i) for i in infos if i.late_by(now) is not None),
                  key=lambda pair: -pair[0])
    missed = sum(i.schedule.missed_fires for i in infos if i.schedule is not None)
    facts = {"late": [{"schedule": i.name, "late_seconds": round(s, 3)}
                      for s, i in late[:NAMES_SHOWN]], "missed_fires": missed}
    if late:
        seconds, first = late[0]
        return Check("schedule fires", CheckStatus.WARN,
                     f"{counted(len(late), 'schedule')} overdue past their grace, e.g. "
                     f"{first.name} "
                     f"by {format_duration(seconds)}: nothing is firing them",
                     "start a worker on this queue (every worker fires due schedules), or "
                     "runnerq-mongo scheduler", facts)
    return Check("schedule fires", CheckStatus.OK,
                 f"no schedule overdue; {counted(missed, 'fire')} missed so far", None, facts)


def check_schedules_ended(queue: str, infos: list[ScheduleInfo]) -> Check:
    """Schedules past their end: kept, never firing again."""
    ended = [i for i in infos if i.ended]
    facts = {"ended": _names(ended)}
    if ended:
        return Check("schedule ends", CheckStatus.WARN,
                     f"{counted(len(ended), 'schedule')} can never fire again (past their end), "
                     f"e.g. {ended[0].name}",
                     f"remove it (`{_fix_command(queue, 'remove')} {ended[0].name}`) or give "
                     "it a later end (schedule apply)", facts)
    return Check("schedule ends", CheckStatus.OK,
                 f"none of {counted(len(infos), 'schedule')} past its end", None, facts)


def check_schedule_documents(queue: str, infos: list[ScheduleInfo]) -> Check:
    """Schedules that are malformed or were set aside by a firer (`problem`): they do not
    fire until a good definition rewrites them."""
    bad = [i for i in infos if i.problem is not None]
    facts = {"set_aside": [{"schedule": i.name, "problem": i.problem}
                           for i in bad[:NAMES_SHOWN]]}
    if bad:
        return Check("schedule documents", CheckStatus.FAIL,
                     f"{counted(len(bad), 'schedule')} malformed or set aside, not firing, e.g. "
                     f"{bad[0].name}: {bad[0].problem}",
                     f"rewrite it: {_fix_command(queue, 'add')} --replace ..., or "
                     "schedule apply with its definition", facts)
    return Check("schedule documents", CheckStatus.OK,
                 f"{counted(len(infos), 'schedule')}, none malformed", None, facts)


def schedule_checks(queue: str, infos: list[ScheduleInfo], workers: list[WorkerInfo],
                    now: datetime, pause: PauseState | None = None) -> list[Check]:
    """The four checks, each labelled with its queue."""
    checks = [check_schedule_coverage(queue, infos, workers, pause),
              check_schedule_fires(queue, infos, now),
              check_schedules_ended(queue, infos),
              check_schedule_documents(queue, infos)]
    return [Check(c.name, c.status, c.message, c.fix, c.facts, queue) for c in checks]
