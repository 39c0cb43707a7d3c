"""The pure rules of docs/design.md ("The rules") at their boundaries."""

from __future__ import annotations

import pytest

from runnerq_cli.backend.domain.rules import attempts_remain, retry_delay


@pytest.mark.parametrize(
    ("retry_count", "max_retries", "expected"),
    [
        (0, 0, True),  # unlimited
        (1000, 0, True),
        (0, 1, False),  # one attempt in total: none left after the first failure
        (0, 2, True),
        (1, 2, False),
        (1, 3, True),
        (2, 3, False),
    ],
)
def test_attempts_remain(retry_count: int, max_retries: int, expected: bool) -> None:
    assert attempts_remain(retry_count, max_retries) is expected


@pytest.mark.parametrize(
    ("base", "count", "cap", "expected"),
    [
        (1, 0, 3600, 2),
        (1, 1, 3600, 4),
        (1, 10, 3600, 2048),
        (1, 11, 3600, 3600),  # 4096 capped
        (1, 11, 0, 3600),  # a cap of 0 means the default
        (5, 2, 3600, 40),
        (1, 3, 10, 10),
        (0, 5, 3600, 0),  # a base of 0 retries at once
        (1, 500, 3600, 3600),  # no overflow
    ],
)
def test_retry_delay(base: int, count: int, cap: float, expected: float) -> None:
    assert retry_delay(base, count, cap) == expected
