"""The pure rules of docs/design.md ("The rules"): attempts, back-off. No I/O, easy to test
at the edges."""

from __future__ import annotations

DEFAULT_MAX_RETRY_DELAY = 3600.0


def attempts_remain(retry_count: int, max_retries: int) -> bool:
    """True when another attempt is allowed after a failure.

    `max_retries` is the total number of attempts (0 = unlimited) and
    `retry_count` the failed attempts so far, before this failure.
    """
    return max_retries == 0 or retry_count + 1 < max_retries


def retry_delay(retry_delay_seconds: float, retry_count: int,
                max_delay: float = DEFAULT_MAX_RETRY_DELAY) -> float:
    """Back-off before the next attempt: base × 2^(retry_count + 1), capped.

    `retry_count` is the count before this failure; a cap of 0 means the
    default cap; a base of 0 retries at once.
    """
    cap = max_delay if max_delay > 0 else DEFAULT_MAX_RETRY_DELAY
    if retry_delay_seconds <= 0:
        return 0.0
    exponent = retry_count + 1
    if exponent >= 64:  # 2**64 × any positive base is past every sensible cap
        return cap
    return float(min(retry_delay_seconds * 2**exponent, cap))
