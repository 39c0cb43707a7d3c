"""Group commit: callers on many threads share one write, each gets its own answer."""

from __future__ import annotations

import threading
import time

import pytest

from runnerq_cli.backend.store.group_commit import GroupCommit


class Recorder:
    def __init__(self, delay: float = 0.05) -> None:
        self.batches: list[list[int]] = []
        self.delay = delay

    def __call__(self, items: list[int]) -> list[object]:
        self.batches.append(list(items))
        time.sleep(self.delay)  # a round trip: callers arriving meanwhile queue up
        return [ValueError(f"odd {i}") if i % 2 else i * 10 for i in items]


def run_threads(group: GroupCommit, n: int) -> dict[int, object]:
    answers: dict[int, object] = {}
    start = threading.Barrier(n)

    def call(i: int) -> None:
        start.wait()
        try:
            answers[i] = group.submit(i)
        except ValueError as exc:
            answers[i] = exc

    threads = [threading.Thread(target=call, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not any(t.is_alive() for t in threads)
    return answers


def test_concurrent_callers_share_batches_and_get_their_own_answers() -> None:
    recorder = Recorder()
    answers = run_threads(GroupCommit(recorder), 16)
    assert sorted(i for batch in recorder.batches for i in batch) == list(range(16))
    assert len(recorder.batches) < 16  # shared round trips
    for i, answer in answers.items():
        if i % 2:
            assert isinstance(answer, ValueError) and str(answer) == f"odd {i}"
        else:
            assert answer == i * 10


def test_a_lone_caller_writes_at_once() -> None:
    recorder = Recorder(delay=0)
    group = GroupCommit(recorder)
    assert [group.submit(0), group.submit(2)] == [0, 20]
    assert recorder.batches == [[0], [2]]


def test_batches_are_bounded() -> None:
    recorder = Recorder()
    run_threads(GroupCommit(recorder, max_batch=3), 12)
    assert max(len(b) for b in recorder.batches) <= 3


def test_a_failed_write_reaches_every_caller_of_its_batch_and_the_next_batch_runs() -> None:
    calls = []
    writing, release = threading.Event(), threading.Event()

    def write(items: list[int]) -> list[int]:
        calls.append(items)
        if len(calls) == 1:
            writing.set()
            release.wait(10)
            raise ConnectionError("server gone")
        return items

    group: GroupCommit[int, int] = GroupCommit(write)
    results: dict[int, object] = {}

    def call(i: int) -> None:
        try:
            results[i] = group.submit(i)
        except ConnectionError as exc:
            results[i] = exc

    first = threading.Thread(target=call, args=(0,))
    first.start()
    assert writing.wait(10)  # the first batch is taken: the others go in a later one
    others = [threading.Thread(target=call, args=(i,)) for i in (1, 2)]
    for thread in others:
        thread.start()
    release.set()
    for thread in (first, *others):
        thread.join(timeout=30)
    assert isinstance(results[0], ConnectionError)
    assert results[1] == 1 and results[2] == 2
    with pytest.raises(RuntimeError):
        GroupCommit(lambda items: []).submit(1)  # one answer per item, or an error
