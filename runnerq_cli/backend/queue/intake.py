"""Streams of NDJSON lines into the queue: the loop of `enqueue --from`
(`Intake.enqueue_lines`) and the batching it shares with `dlq import` (`Batcher`).

A stream is read a batch at a time: a batch ends at `batch_size` lines or at
INPUT_BATCH_BYTES of them (sizes.py), so memory is a few times that whatever the
input (ten lines of 6.7 MB are ten batches, not one of 67 MB). Each batch is one
`Enqueuer.enqueue_batch`: the rules of idempotency keys are there, not here.

Each line ends once, in order, in the report: written (a new activity, or the
holder of its key), or rejected alone with its kind, its number and a reason that
quotes at most a cut of the value (values.shown). Every bound of sizes.py is
checked as a line is parsed, so a line that cannot be encoded or stored never stops
the others, and a report of many rejected lines stays small. `should_stop` is asked
after each line read: the batch in progress is written, then the stream ends
(`interrupted`; `last_line` is the last line whose fate is known). The caller's
reader must itself return when asked to stop (a pipe with no producer blocks).
"""

from __future__ import annotations

import functools
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from runnerq_cli import values
from runnerq_cli.backend.domain.outcomes import Outcome
from runnerq_cli.backend.domain.sizes import INPUT_BATCH_BYTES, PAYLOAD_TEXT_MAX
from runnerq_cli.backend.domain.specs import ActivitySpec
from runnerq_cli.backend.queue.enqueueing import Enqueuer
from runnerq_cli.errors import InvalidArgument, RunnerQError

# One line of input: its number (from 1) and its bytes without the line break, or None
# for a line longer than PAYLOAD_TEXT_MAX (skipped unread by the reader, refused here).
Line = tuple[int, bytes | None]
T = TypeVar("T")

# Rejected lines kept for the text and JSON reports (the rest are counted: a file of
# millions of bad lines must not grow memory; `on_reject` sees every one).
REJECTED_LISTED = 1000
REASON_MAX = 300  # characters of a rejection's reason (its quotes are cut already)

class Batcher(Generic[T]):
    """`size` items at a time, fewer when their bytes reach `max_bytes`; asks
    `should_stop` after each item and then yields what it holds and ends (`stopped`)."""

    def __init__(self, items: Iterable[T], *, size: int, size_of: Callable[[T], int],
                 should_stop: Callable[[], bool] | None = None,
                 max_bytes: int = INPUT_BATCH_BYTES) -> None:
        if not 1 <= size <= 10_000:
            raise InvalidArgument("batch_size must be between 1 and 10000")
        self._items = items
        self._size = size
        self._size_of = size_of
        self._stop = should_stop or (lambda: False)
        self._max_bytes = max_bytes
        self.stopped = False

    def __iter__(self) -> Iterator[list[T]]:
        batch: list[T] = []
        held = 0
        for item in self._items:
            batch.append(item)
            held += self._size_of(item)
            if self._stop():
                self.stopped = True
                break
            if len(batch) >= self._size or held >= self._max_bytes:
                yield batch
                batch, held = [], 0
        else:  # the input ended (a reader asked to stop ends it too)
            self.stopped = self._stop()
        if batch:
            yield batch


@dataclass
class EnqueueReport:
    """What a stream of lines did: exact counts, the first REJECTED_LISTED rejected lines,
    where it stopped. Activities written are not kept (`on_activity` sees each)."""

    lines: int = 0  # lines read after the skipped ones, blank lines not counted
    enqueued: int = 0
    existing: int = 0
    rejected: list[dict[str, Any]] = field(default_factory=list)
    rejected_counts: dict[str, int] = field(default_factory=dict)
    skipped_lines: int = 0
    last_line: int = 0  # every line up to this one is written or rejected
    interrupted: bool = False
    written: bool = True  # False: strict, and a line was invalid (nothing written)
    aborted: RunnerQError | None = None  # the server went away: lines after last_line not done
    on_activity: Callable[[dict[str, Any]], None] | None = None
    on_reject: Callable[[dict[str, Any]], None] | None = None

    def add(self, activity: dict[str, Any]) -> None:
        if activity["created"]:
            self.enqueued += 1
        else:
            self.existing += 1
        if self.on_activity is not None:
            self.on_activity(activity)

    def reject(self, line: int, kind: str, reason: str) -> None:
        """Line `line` refused as `kind` (invalid, duplicate); the reason is cut."""
        if len(reason) > REASON_MAX:
            reason = reason[:REASON_MAX - 3] + "..."
        record = {"line": line, "kind": kind, "reason": reason}
        self.rejected_counts[kind] = self.rejected_counts.get(kind, 0) + 1
        if len(self.rejected) < REJECTED_LISTED:
            self.rejected.append(record)
        if self.on_reject is not None:
            self.on_reject(record)

    def count(self, kind: str | None = None) -> int:
        """Lines rejected as `kind` (invalid, duplicate), or in all."""
        if kind is None:
            return sum(self.rejected_counts.values())
        return self.rejected_counts.get(kind, 0)

    @property
    def rejected_not_listed(self) -> int:
        """Rejected lines counted but not kept in `rejected`."""
        return self.count() - len(self.rejected)


def parse_line(text: bytes | None, defaults: dict[str, Any]) -> ActivitySpec:
    """One line into an ActivitySpec; InvalidArgument saying why otherwise."""
    from runnerq_cli.backend.domain.spec_lines import spec_from_line

    if text is None:
        raise InvalidArgument(f"line longer than {PAYLOAD_TEXT_MAX} bytes; a payload may take "
                              f"at most {values.PAYLOAD_MAX_BYTES} bytes as BSON")
    return spec_from_line(text, defaults)


def _size(item: tuple[int, Any, int]) -> int:
    return item[2]


class Intake:
    """Streams of lines into one queue (`RunnerQ.intake`)."""

    def __init__(self, enqueuer: Enqueuer) -> None:
        self._enqueuer = enqueuer

    def enqueue_lines(self, lines: Iterable[Line], defaults: dict[str, Any], *,
                      batch_size: int, skip_lines: int = 0, strict: bool = False,
                      should_stop: Callable[[], bool] | None = None,
                      on_activity: Callable[[dict[str, Any]], None] | None = None,
                      on_reject: Callable[[dict[str, Any]], None] | None = None,
                      on_batch: Callable[[EnqueueReport, list[dict[str, Any]]], None]
                      | None = None) -> EnqueueReport:
        """Enqueue each line after the first `skip_lines`, a batch at a time (module
        docstring).

        `defaults` are ActivitySpec options a line's own fields override. `strict`:
        a first pass validates every line, writing nothing, and copies them to an
        anonymous temporary file (gone with the process, however it ends); the
        second pass writes from it only if no line was invalid. `on_batch` gets the
        report and each batch's activities once written. A server that goes away
        ends the stream: `aborted` says why, and the lines up to `last_line` are done.
        """
        stop = should_stop or (lambda: False)
        report = EnqueueReport(skipped_lines=skip_lines, on_activity=on_activity,
                               on_reject=on_reject)
        write = functools.partial(_write, self._enqueuer, defaults=defaults, report=report,
                                  batch_size=batch_size, skip_lines=skip_lines, stop=stop,
                                  on_batch=on_batch)
        if not strict:
            write(lines)
            return report
        with tempfile.TemporaryFile(prefix="runnerq-enqueue-") as spool:
            _validate(lines, defaults, report, skip_lines, stop, spool)
            if report.interrupted or report.count():
                report.written = False
                if report.interrupted:  # nothing written: a rerun starts where this one did
                    report.last_line = skip_lines
                return report
            report.lines = 0
            spool.seek(0)
            write(_spooled(spool))
        return report


def _validate(lines: Iterable[Line], defaults: dict[str, Any], report: EnqueueReport,
              skip_lines: int, stop: Callable[[], bool], spool: Any) -> None:
    """--strict's first pass: every line checked, none written; each kept in `spool`."""
    for number, text in lines:
        report.last_line = number
        if number > skip_lines:
            spool.write(b"%d\n" % number if text is None else b"%d %s\n" % (number, text))
            if text is None or text.strip():
                report.lines += 1
                try:
                    parse_line(text, defaults)
                except InvalidArgument as exc:
                    report.reject(number, "invalid", str(exc))
        if stop():
            report.interrupted = True
            return


def _spooled(spool: Any) -> Iterator[Line]:
    """The lines `_validate` kept, with their numbers ("N" alone: a line too long)."""
    for record in spool:
        number, space, text = record.rstrip(b"\n").partition(b" ")
        yield int(number), (text if space else None)


def _write(enqueuer: Enqueuer, lines: Iterable[Line], *, defaults: dict[str, Any],
           report: EnqueueReport, batch_size: int, skip_lines: int,
           stop: Callable[[], bool],
           on_batch: Callable[[EnqueueReport, list[dict[str, Any]]], None] | None) -> None:
    """Parse, batch and write; blank and skipped lines only move `last_line`."""

    def items() -> Iterator[tuple[int, ActivitySpec | None, int]]:
        for number, text in lines:
            if number <= skip_lines or (text is not None and not text.strip()):
                yield number, None, 0  # nothing to do, but its line is reached
                continue
            report.lines += 1
            try:
                yield number, parse_line(text, defaults), len(text or b"")
            except InvalidArgument as exc:
                report.reject(number, "invalid", str(exc))
                yield number, None, 0

    batcher = Batcher(items(), size=batch_size, size_of=_size, should_stop=stop)
    for batch in batcher:
        parsed = [item for item in batch if item[1] is not None]
        if parsed:
            try:
                outcomes = enqueuer.enqueue_batch([spec for _, spec, _ in parsed if spec])
            except RunnerQError as exc:  # the server went away (Unavailable) or refused
                report.aborted = exc
                break
            done = _record(report, [number for number, _, _ in parsed], outcomes)
        else:
            done = []
        report.last_line = batch[-1][0]
        if on_batch is not None:
            on_batch(report, done)
    report.interrupted = batcher.stopped and report.aborted is None
    report.rejected.sort(key=lambda r: r["line"])


def _record(report: EnqueueReport, numbers: list[int],
            outcomes: list[Outcome]) -> list[dict[str, Any]]:
    """Each line's outcome into the report; the activities written, in order."""
    done: list[dict[str, Any]] = []
    for number, outcome in zip(numbers, outcomes, strict=True):
        if outcome.kind in ("duplicate", "not_failed"):
            report.reject(number, "duplicate", str(outcome.error))
        elif outcome.kind == "refused":
            report.reject(number, "invalid", str(outcome.error))
        else:
            activity = {"line": number, "id": str(outcome.activity_id),
                        "created": outcome.kind == "enqueued", "status": outcome.status}
            report.add(activity)
            done.append(activity)
    return done
