"""The queue side of docs/design.md ("Operations", "The rules"): `ActivityQueue`, one
queue's producer and worker operations, put together from a part per concern:

- enqueueing.py  `Enqueuer`: new activities, keyed or not, a batch at a time;
- claims.py      `Claims`: `dequeue` in claim order, the idle claimer's wake-ups;
- acknowledgements.py  `Acknowledgements`: a success (result first) or a failure;
- leases.py      `Leases`: a held claim's lease extended, or the claim released;
- results.py     `Results`: results stored and read with the visibility rule;
- attempt_writes.py  what their writes share (the claim's fence, the dead-letter update).

Every state change is one atomic update of the activity document, fenced
where a claim is involved; what it must also write elsewhere travels in the
document's outbox (see `writes.py`), which this module buffers.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from runnerq_cli.backend.domain.keys import ORPHAN_KEY_GRACE as ORPHAN_KEY_GRACE  # re-exported
from runnerq_cli.backend.domain.specs import ActivitySpec as ActivitySpec  # re-exported
from runnerq_cli.backend.queue.acknowledgements import Acknowledgements
from runnerq_cli.backend.queue.claims import Claims
from runnerq_cli.backend.queue.enqueueing import Enqueuer
from runnerq_cli.backend.queue.leases import Leases
from runnerq_cli.backend.queue.results import Results


class ActivityQueue(Enqueuer, Claims, Acknowledgements, Leases, Results):
    """Producer and worker operations on one queue: enqueue (enqueueing.Enqueuer), claim
    (claims.Claims), acknowledge (acknowledgements.Acknowledgements), leases
    (leases.Leases), results (results.Results), and the outbox buffer their writes go
    through."""

    @contextmanager
    def buffered_outbox(self, size: int = 64, *, drain: bool = True) -> Iterator[None]:
        """Batch outbox copies (events, results) for throughput inside the block.

        On exit the buffer is drained, unless `drain` is False (a worker stopped
        at once leaves it to the repair: the copies are safe in the documents).
        """
        previous = self._ctx.outbox.buffer_size
        self._ctx.outbox.buffer_size = size
        try:
            yield
        finally:
            self._ctx.outbox.buffer_size = previous
            if drain:
                self._ctx.outbox.drain()

    def flush_outbox(self) -> int:
        """Copy out the buffered outboxes now; returns how many."""
        return self._ctx.outbox.drain()
