"""Group commit: what many threads hand over is written in batches, one writer at a time.

The one batching of the project (issue 32): the worker's outcome writer
(worker/outcomes.py) and `ActivityQueue.ack_success` for applications that acknowledge
from many threads (backend/queue/queue.py) both sit on `GroupCommit`.

- `hand_over(item)` queues an item and returns at once (the worker's lease keeper
  settles a timed-out attempt this way without waiting for the server).
- `write()` writes what is queued unless another thread is writing it: one thread
  writes at a time, batch after batch, until nothing is left; the others return at once.
  The writer checks the queue again after letting go of the writer's lock, so an item
  handed over meanwhile is always written by somebody, and nobody waits for it.
- `submit(item)` is the blocking form for callers that need their answer: it hands the
  item over, writes or waits for the writer, and returns the answer to its own item
  (`Answers`).

Nobody sleeps to gather a batch: a lone item is written at once and under load batches
grow by themselves. A writer that cannot write now (the server is away) puts what it
could not write back at the front (`put_back`) and holds writing until a time
(`hold`); `flush` writes at once whatever the hold (a worker stopping).
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

Item = TypeVar("Item")
Answer = TypeVar("Answer")


class GroupCommit(Generic[Item]):
    """Items handed over by any thread, written by `write(batch)` on one thread at a time.

    `write` gets the items in the order they were handed over (up to `max_batch` at a
    time) and settles each one itself: it answers them, or puts some back for later.
    An exception it raises is its caller's (the thread that happened to write).
    """

    def __init__(self, write: Callable[[list[Item]], None], *,
                 max_batch: int | None = None) -> None:
        self._write = write
        self._max_batch = max_batch
        self._queue: collections.deque[Item] = collections.deque()
        self._writer = threading.Lock()  # held by the thread writing a batch
        self._held_until = 0.0  # time.monotonic(): no write before it
        self._released = threading.Condition()  # notified each time a batch is written

    def __len__(self) -> int:
        """Items handed over and not yet taken by a writer."""
        return len(self._queue)

    @property
    def writing(self) -> bool:
        """A thread is writing a batch now."""
        return self._writer.locked()

    def hand_over(self, item: Item) -> None:
        self._queue.append(item)

    def put_back(self, items: Sequence[Item]) -> None:
        """Items a writer took and could not write: first in the next batch, in order."""
        self._queue.extendleft(reversed(items))

    def hold(self, until: float) -> None:
        """No write before `until` (time.monotonic()); `flush` overrides it."""
        self._held_until = until

    def held(self) -> bool:
        return self._held_until > time.monotonic()

    def held_for(self) -> float:
        """Seconds left of the hold (0 or less: none)."""
        return self._held_until - time.monotonic()

    def write(self, for_at_most: float | None = None,
              stop: Callable[[], bool] | None = None) -> None:
        """Write what is queued, batch after batch, unless another thread is writing it
        or writing is held. `for_at_most`: stop starting batches after that many
        seconds (the caller has other work and comes back); `stop`: stop starting
        batches once it answers True."""
        until = None if for_at_most is None else time.monotonic() + for_at_most
        while self._queue and not self.held():
            if until is not None and time.monotonic() >= until:
                return
            if stop is not None and stop():
                return
            if not self._writer.acquire(blocking=False):
                return  # the writer looks again once it lets go: it takes ours too
            try:
                # Looked at again with the lock: the writer that let go of it since the
                # look above may have put its batch back and held writing (the server is
                # away), or answered ours; writing now would skip the back-off.
                if self.held() or (stop is not None and stop()):
                    return
                self._write_one_batch()
            finally:
                self._writer.release()
                with self._released:
                    self._released.notify_all()

    def wait_for_writer(self, done: Callable[[], bool], timeout: float) -> None:
        """Wait until `done()` or no batch is being written (then the caller writes)."""
        with self._released:
            self._released.wait_for(lambda: done() or not self.writing, timeout=timeout)

    def flush(self) -> None:
        """Wait for a batch being written, drop the hold, write everything now."""
        with self._writer:
            self._held_until = 0.0
        self.write()

    def _write_one_batch(self) -> None:
        take = len(self._queue) if self._max_batch is None else min(
            len(self._queue), self._max_batch)
        batch = [self._queue.popleft() for _ in range(take)]
        if batch:
            self._write(batch)


class _Ticket(Generic[Item]):
    __slots__ = ("answer", "done", "error", "item")

    def __init__(self, item: Item) -> None:
        self.item = item
        self.answer: object = None
        self.error: BaseException | None = None
        self.done = threading.Event()


class Answers(Generic[Item, Answer]):
    """`submit(item)` returns `write_many([...])[i]` for its item, batching concurrent calls.

    `write_many` returns one answer per item, in order; an answer that is an exception
    is raised to its caller alone, an exception raised by `write_many` to every caller
    of that batch. A caller whose answer has come back stops writing: the next batch is
    written by the first caller still waiting, so nobody writes for others for ever.
    """

    def __init__(self, write_many: Callable[[list[Item]], Sequence[Answer | BaseException]],
                 max_batch: int = 256) -> None:
        self._write_many = write_many
        self._group: GroupCommit[_Ticket[Item]] = GroupCommit(self._answer,
                                                              max_batch=max_batch)

    def submit(self, item: Item) -> Answer:
        ticket = _Ticket(item)
        self._group.hand_over(ticket)
        # Let threads about to submit join this batch: a yield of the interpreter lock,
        # not a wait. (Not in GroupCommit itself: the worker's writer never slept, and
        # under libfaketime a sleep may fail with EINVAL.)
        time.sleep(0)
        answered = ticket.done.is_set
        while not answered():
            self._group.write(stop=answered)  # writes, or another thread is writing
            if not answered():
                self._group.wait_for_writer(answered, timeout=1.0)
        if ticket.error is not None:
            raise ticket.error
        return ticket.answer  # type: ignore[return-value]

    def _answer(self, batch: list[_Ticket[Item]]) -> None:
        try:
            answers = list(self._write_many([t.item for t in batch]))
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
                ticket.done.set()

