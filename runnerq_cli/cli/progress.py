"""A progress line for bulk work, on standard error, only where a person watches it.

Shown when standard error is a terminal, `-q` was not given, and the work
has taken more than `DELAY` seconds (quick work never flickers a bar);
never on a pipe or a file. Transient: it disappears when the work ends,
leaving the command's own output.

It says what a person waiting wants to know: how many of how many, how fast,
and how long is left (`8,700 / 20,000 lines  19/s  9m55s left`), redrawn
`REFRESH_PER_SECOND` times a second whether or not a batch has just ended, so
the rate and the time left move between batches. Where the count of what is to
come is not known but how far into its input the work is (`enqueue --from` a
file: the bytes read of its size), the share done gives the bar, the percentage
and the time left (`8,700 lines  43%  19/s  42s left`), read afresh at each
redraw. With neither (a stream on a pipe) it shows the count and the rate, and
says there is no total.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

DELAY = 1.0
REFRESH_PER_SECOND = 2  # at least once a second, the floor


NO_TOTAL = "no total: a stream"  # what a share-less stream's line says instead


def progress_text(done: int, total: int | None, elapsed: float, unit: str,
                  share: float | None = None, *, no_total: bool = False) -> str:
    """`8,700 / 20,000 lines  19/s  9m55s left`; with the `share` of the input done
    instead of a total `8,700 lines  43%  19/s  42s left`; with neither `8,700 lines
    19/s` (`no_total`: followed by NO_TOTAL in brackets)."""
    from runnerq_cli.times import format_duration

    rate = done / elapsed if elapsed > 0 else 0.0
    count = f"{done:,} / {total:,} {unit}" if total is not None else f"{done:,} {unit}"
    speed = f"{rate:,.0f}/s" if rate >= 10 else f"{rate:.1f}/s"
    left = ""
    if total is not None and rate > 0 and done < total:
        left = f"  {format_duration((total - done) / rate)} left"
    elif total is None and share is not None:
        count += f"  {int(share * 100)}%"
        if 0 < share < 1 and elapsed > 0:
            left = f"  {format_duration(elapsed * (1 - share) / share)} left"
    elif total is None and no_total:
        left = f"  ({NO_TOTAL})"
    return f"{count}  {speed}{left}"


class BulkProgress:
    """`update(done)` after each batch; `close()` at the end (also on errors).

    `share`, for work with no known total: asked at each redraw how much of its input
    is done (0 to 1), or None when that cannot be known (then the line says so).
    """

    def __init__(self, label: str, total: int | None, *, quiet: bool = False,
                 delay: float = DELAY, unit: str = "activities",
                 share: Callable[[], float | None] | None = None) -> None:
        self._label = label
        self._total = total
        self._unit = unit
        self._share = share
        self._enabled = not quiet and hasattr(sys.stderr, "isatty") and sys.stderr.isatty()
        self._started = time.monotonic()
        self._delay = delay
        self._done = 0
        self._bar: Any = None
        self._task: Any = None

    def _columns(self) -> list[Any]:
        """The bar (when a total or a share is known) and the counts, redrawn from the
        current state at each refresh."""
        from rich.progress import BarColumn, ProgressColumn
        from rich.progress_bar import ProgressBar
        from rich.text import Text

        owner = self

        class Counts(ProgressColumn):
            max_refresh = 1.0 / REFRESH_PER_SECOND

            def render(self, task: Any) -> Text:
                share = owner._share() if owner._share is not None else None
                return Text(progress_text(owner._done, owner._total,
                                          time.monotonic() - owner._started, owner._unit,
                                          share, no_total=owner._share is not None))

        class Share(ProgressColumn):
            def render(self, task: Any) -> ProgressBar:
                share = owner._share() if owner._share is not None else None
                return ProgressBar(total=1.0, completed=share or 0.0, width=20)

        if self._total is not None:
            return [BarColumn(bar_width=20), Counts()]
        if self._share is not None and self._share() is not None:
            return [Share(), Counts()]
        return [Counts()]

    def update(self, done: int) -> None:
        self._done = done
        if not self._enabled:
            return
        if self._bar is None:
            if time.monotonic() - self._started < self._delay:
                return
            from rich.progress import Progress, TextColumn

            from runnerq_cli.cli.output import console

            columns = [TextColumn("{task.description}"), *self._columns()]
            self._bar = Progress(*columns, console=console(stderr=True), transient=True,
                                 auto_refresh=True, refresh_per_second=REFRESH_PER_SECOND)
            self._bar.start()
            self._task = self._bar.add_task(self._label, total=self._total)
        self._bar.update(self._task, completed=done)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def __enter__(self) -> BulkProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
