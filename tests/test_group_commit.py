"""The one group commit (runnerq_cli/group_commit.py): items handed over by many threads
are written in shared batches, once each, one writer at a time; blocking callers
(`Answers`) get their own answer."""

from __future__ import annotations

import collections
import random
import threading
import time

import pytest

from runnerq_cli.group_commit import Answers, GroupCommit


class Recorder:
    def __init__(self, delay: float = 0.05) -> None:
        self.batches: list[list[int]] = []
        self.delay = delay

    def __call__(self, items: list[int]) -> list[object]:
        self.batches.append(list(items))
        time.sleep(self.delay)  # a round trip: callers arriving meanwhile queue up
        return [ValueError(f"odd {i}") if i % 2 else i * 10 for i in items]


def run_threads(group: Answers, n: int) -> dict[int, object]:
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
    answers = run_threads(Answers(recorder), 16)
    assert sorted(i for batch in recorder.batches for i in batch) == list(range(16))
    assert len(recorder.batches) < 16  # shared round trips
    for i, answer in answers.items():
        if i % 2:
            assert isinstance(answer, ValueError) and str(answer) == f"odd {i}"
        else:
            assert answer == i * 10


def test_a_lone_caller_writes_at_once() -> None:
    recorder = Recorder(delay=0)
    group = Answers(recorder)
    assert [group.submit(0), group.submit(2)] == [0, 20]
    assert recorder.batches == [[0], [2]]


def test_batches_are_bounded() -> None:
    recorder = Recorder()
    run_threads(Answers(recorder, max_batch=3), 12)
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

    group: Answers[int, int] = Answers(write)
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
        Answers(lambda items: []).submit(1)  # one answer per item, or an error


def test_a_caller_answered_stops_writing_and_a_waiting_caller_writes_the_rest() -> None:
    # Under a steady stream of callers nobody writes for the others for ever: the
    # writer returns once its own answer is back, and a caller still waiting writes on.
    writers: dict[int, set[str]] = {}

    def write(items: list[int]) -> list[int]:
        writers.setdefault(threading.get_ident(), set()).update(str(i) for i in items)
        time.sleep(0.02)
        return items

    group: Answers[int, int] = Answers(write, max_batch=1)
    first_back = threading.Event()
    returned: dict[int, float] = {}

    def call(i: int) -> None:
        assert group.submit(i) == i
        returned[i] = time.monotonic()
        if i == 0:
            first_back.set()

    threads = [threading.Thread(target=call, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(returned) == list(range(8))
    assert len(writers) > 1  # the batches of one at a time were not all one thread's


def test_handed_over_items_are_written_once_each_whoever_writes() -> None:
    written: list[int] = []
    group: GroupCommit[int] = GroupCommit(lambda batch: written.extend(batch))
    start = threading.Barrier(8)

    def hand(base: int) -> None:
        start.wait()
        for i in range(base, base + 200):
            group.hand_over(i)
            group.write()  # returns at once while another thread writes

    threads = [threading.Thread(target=hand, args=(k * 1000,)) for k in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(written) == sorted(i for k in range(8) for i in range(k * 1000, k * 1000 + 200))
    assert len(group) == 0


def test_put_back_goes_first_and_a_hold_defers_writing_until_flush() -> None:
    batches: list[list[str]] = []
    group: GroupCommit[str] = GroupCommit(batches.append)
    group.hand_over("c")
    group.put_back(["a", "b"])  # a writer could not write these: they go first
    group.hold(time.monotonic() + 60)
    group.write()
    assert batches == [] and group.held() and len(group) == 3
    assert 59 < group.held_for() <= 60
    group.flush()  # a worker stopping: whatever the hold
    assert batches == [["a", "b", "c"]] and not group.held()


def test_write_for_at_most_stops_starting_batches() -> None:
    batches: list[list[int]] = []

    def slow(batch: list[int]) -> None:
        batches.append(batch)
        time.sleep(0.05)

    group: GroupCommit[int] = GroupCommit(slow, max_batch=1)
    for i in range(10):
        group.hand_over(i)
    group.write(for_at_most=0.01)
    assert 1 <= len(batches) < 10 and len(group) == 10 - len(batches)
    group.write()
    assert [b[0] for b in batches] == list(range(10))


def test_a_hold_set_while_a_writer_waited_for_the_lock_defers_its_write() -> None:
    # A writer looks at the hold, then takes the writer's lock. In between another writer
    # may fail, put its batch back and hold writing (the server is away): the first must
    # not write it again at once, or the back-off is skipped (and doubled for nothing).
    calls: list[list[int]] = []
    group: GroupCommit[int]

    def write(batch: list[int]) -> None:
        calls.append(list(batch))
        group.put_back(batch)
        group.hold(time.monotonic() + 60)

    group = GroupCommit(write)
    group.hand_over(1)

    def stop() -> bool:  # runs between the look at the hold and the lock: widens the gap
        if not calls:
            other = threading.Thread(target=group.write)
            other.start()
            other.join()
        return False

    group.write(stop=stop)
    assert calls == [[1]] and group.held() and len(group) == 1


@pytest.mark.parametrize("seed", range(5))
def test_stress_items_are_written_once_each_through_put_backs_and_holds(seed: int) -> None:
    # Eight threads hand over and write (some within a bound); a quarter of the batches
    # are partly put back with a short hold (the server away). After a flush every item
    # was written exactly once: none lost between writers, none written twice.
    rnd = random.Random(seed)
    written: collections.Counter[int] = collections.Counter()
    group: GroupCommit[int]

    def write(batch: list[int]) -> None:
        share = rnd.random()
        if share < 0.25:
            kept = int(len(batch) * share * 4)
            written.update(batch[:kept])
            group.put_back(batch[kept:])
            group.hold(time.monotonic() + 0.0005)
            return
        written.update(batch)

    group = GroupCommit(write, max_batch=rnd.choice([None, 1, 3, 50]))
    start = threading.Barrier(8)

    def hand(base: int) -> None:
        start.wait()
        mine = random.Random(base)
        for i in range(base, base + 300):
            group.hand_over(i)
            if mine.random() < 0.7:
                group.write(for_at_most=mine.choice([None, 0.0001]))

    threads = [threading.Thread(target=hand, args=(k * 10000,)) for k in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    deadline = time.monotonic() + 5
    while len(group) and time.monotonic() < deadline:
        group.flush()
    assert sorted(written) == [k * 10000 + i for k in range(8) for i in range(300)]
    assert set(written.values()) == {1}


@pytest.mark.parametrize("seed", range(3))
def test_stress_blocking_callers_all_get_their_own_answer_and_none_hangs(seed: int) -> None:
    # 24 threads submit 40 items each; writes take a random while, a tenth raise (every
    # caller of that batch gets the error), some answers are errors of one item.
    rnd = random.Random(seed)
    lock = threading.Lock()
    seen: collections.Counter[int] = collections.Counter()

    def write_many(items: list[int]) -> list[object]:
        with lock:
            share = rnd.random()
            seen.update(items)
        time.sleep(share * 0.0005)
        if share < 0.1:
            raise ConnectionError("away")
        return [ValueError(i) if i % 7 == 0 else i * 2 for i in items]

    group: Answers[int, object] = Answers(write_many, max_batch=rnd.choice([1, 4, 256]))
    results: dict[int, object] = {}
    start = threading.Barrier(24)

    def call(k: int) -> None:
        start.wait()
        for i in range(k * 1000, k * 1000 + 40):
            try:
                results[i] = group.submit(i)
            except Exception as exc:
                results[i] = exc

    threads = [threading.Thread(target=call, args=(k,), daemon=True) for k in range(24)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)
    assert not any(thread.is_alive() for thread in threads)
    assert sorted(seen) == sorted(results) and set(seen.values()) == {1}
    for i, answer in results.items():
        if isinstance(answer, ConnectionError):
            continue
        if i % 7 == 0:
            assert isinstance(answer, ValueError) and answer.args == (i,)
        else:
            assert answer == i * 2
