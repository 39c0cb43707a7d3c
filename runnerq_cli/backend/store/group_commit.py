"""Group commit: calls from many threads share one round trip, with no added wait.

A worker acknowledges from several handler threads at once. Each caller
puts its item in a queue; if no batch is being written, it writes the queue
(its own item and whatever else is waiting) in one batch; otherwise it waits,
and the batch's writer hands the next batch to the first waiting caller.
Nobody sleeps to gather a batch: a lone caller writes at once, and under load
batches grow by themselves. Every caller gets its own answer (or exception).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

Item = TypeVar("Item")
Answer = TypeVar("Answer")


class _Ticket(Generic[Item]):
    __slots__ = ("answer", "done", "error", "item", "lead", "wake")

    def __init__(self, item: Item) -> None:
        self.item = item
        self.answer: object = None
        self.error: BaseException | None = None
        self.done = False
        self.lead = False
        self.wake = threading.Event()


class GroupCommit(Generic[Item, Answer]):
    """`submit(item)` returns `write([...])[i]` for its item, batching concurrent calls.

    `write` gets the items in arrival order and returns one answer per item;
    an answer that is an exception is raised to its caller alone. An exception
    raised by `write` itself goes to every caller of that batch.
    """

    def __init__(self, write: Callable[[list[Item]], Sequence[Answer | BaseException]],
                 max_batch: int = 256) -> None:
        self._write = write
        self._max_batch = max_batch
        self._lock = threading.Lock()
        self._queue: list[_Ticket[Item]] = []
        self._writing = False

    def submit(self, item: Item) -> Answer:
        ticket = _Ticket(item)
        with self._lock:
            self._queue.append(ticket)
            if not self._writing:
                self._writing = True
                ticket.lead = True
        while not ticket.done:
            if ticket.lead:
                ticket.lead = False
                self._write_one_batch()
            else:
                ticket.wake.wait()
                ticket.wake.clear()
        if ticket.error is not None:
            raise ticket.error
        return ticket.answer  # type: ignore[return-value]

    def _write_one_batch(self) -> None:
        # Let threads that are about to submit (their handler has just returned) join
        # this batch: a yield of the interpreter lock, not a wait.
        time.sleep(0)
        with self._lock:
            batch = self._queue[:self._max_batch]
            del self._queue[:self._max_batch]
        try:
            answers = list(self._write([t.item for t in batch]))
            if len(answers) != len(batch):
                raise RuntimeError("group commit: one answer per item expected")
            for ticket, answer in zip(batch, answers, strict=True):
                if isinstance(answer, BaseException):
                    ticket.error = answer
                else:
                    ticket.answer = answer
        except BaseException as exc:  # every caller of the batch learns it
            for ticket in batch:
                ticket.error = exc
        finally:
            for ticket in batch:
                ticket.done = True
                ticket.wake.set()
            with self._lock:
                if self._queue:  # hand the next batch to the first waiting caller
                    self._queue[0].lead = True
                    self._queue[0].wake.set()
                else:
                    self._writing = False
