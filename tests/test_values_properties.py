"""Property tests of runnerq_cli/values.py: any input is either a value within the documented
limits or an InvalidArgument, never another exception, and good values round-trip."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta, timezone

from hypothesis import given, settings
from hypothesis import strategies as st

from runnerq_cli import times, values
from runnerq_cli.errors import InvalidArgument

settings.register_profile("runnerq", max_examples=150, deadline=None)
settings.load_profile("runnerq")

NUMBER_TEXT = st.one_of(
    st.text(max_size=40),
    st.floats().map(repr),
    st.integers().map(str),
    st.sampled_from(["nan", "inf", "-inf", "1e400", "Infinity", "", " ", "1_0", "0x10"]),
)
ANY_VALUE = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=40),
                      st.lists(st.integers(), max_size=3))


@given(st.one_of(NUMBER_TEXT, ANY_VALUE), st.booleans())
def test_number_is_finite_bounded_or_refused(raw, whole: bool) -> None:
    try:
        value = values.number(raw, "--n", minimum=-1000, maximum=10**12, integer=whole)
    except InvalidArgument as exc:
        assert str(exc).startswith("--n")
        return
    assert math.isfinite(value) and -1000 <= value <= 10**12
    assert isinstance(value, int) if whole else True


@given(st.integers())
def test_integers_beyond_64_bits_are_refused(n: int) -> None:
    try:
        assert values.integer(n, "n") == n
        assert -(2**63) <= n < 2**63
    except InvalidArgument:
        assert not -(2**63) <= n < 2**63


DURATION_TEXT = st.one_of(
    st.text(alphabet="0123456789.smhdw-e ", max_size=30),
    st.builds(lambda n, u: f"{n}{u}", st.integers(0, 10**12), st.sampled_from(
        ["ms", "s", "m", "h", "d", "w", ""])),
)


@given(st.one_of(DURATION_TEXT, ANY_VALUE))
def test_duration_is_bounded_or_refused(raw) -> None:
    try:
        seconds = times.duration(raw, "--d")
    except InvalidArgument as exc:
        assert str(exc).startswith("--d")
        return
    assert math.isfinite(seconds) and 0 <= seconds <= values.MAX_DURATION
    timedelta(seconds=seconds)  # always usable in datetime arithmetic


@given(st.integers(0, int(values.MAX_DURATION)))
def test_whole_durations_round_trip(n: int) -> None:
    assert times.duration(f"{n}s", "d", whole=True) == n
    assert times.duration(str(n), "d") == n


@given(st.one_of(st.text(max_size=40), DURATION_TEXT,
                 st.datetimes().map(lambda d: d.isoformat()),
                 st.sampled_from(["9999-12-31T23:59:59-14:00", "0001-01-01", "99999999999999999999",
                                  "2030-01-31T09:00:00Z", "10m"])))
def test_time_is_in_range_or_refused(raw: str) -> None:
    try:
        when = times.time(raw, "--since")
    except InvalidArgument as exc:
        assert str(exc).startswith("--since")
        return
    assert when.tzinfo is not None and when.utcoffset() == timedelta(0)
    assert times.TIME_MIN <= when <= times.TIME_MAX


@given(st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(9998, 12, 31)),
       st.integers(-14 * 60, 14 * 60))
def test_iso_times_round_trip(naive: datetime, offset_minutes: int) -> None:
    aware = naive.replace(tzinfo=timezone(timedelta(minutes=offset_minutes)))
    assert times.time(aware.isoformat(), "t", relative=False) == aware
    assert times.time(naive.isoformat(), "t") == naive.replace(tzinfo=UTC)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=10),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=30,
)


@given(st.dictionaries(st.text(max_size=8), JSON, max_size=5))
def test_json_objects_round_trip_and_store(obj: dict) -> None:
    assert values.json_object(json.dumps(obj), "-p") == obj
    assert values.json_object(json.dumps(obj).encode(), "-p") == obj
    try:
        values.payload(obj)
    except InvalidArgument as exc:  # only a NUL in a key is refused here
        assert "cannot be stored" in str(exc)
        assert any("\x00" in key for key in _keys(obj))


def _keys(value) -> list[str]:
    if isinstance(value, dict):
        return [*value, *(k for v in value.values() for k in _keys(v))]
    if isinstance(value, list):
        return [k for v in value for k in _keys(v)]
    return []


@given(st.one_of(st.text(max_size=60), st.binary(max_size=60),
                 st.integers(1, 200).map(lambda n: "[" * n + "]" * n),
                 st.integers(1, 200).map(lambda n: '{"a":' * n + "1" + "}" * n)))
def test_json_text_is_parsed_or_refused(raw) -> None:
    try:
        values.json_value(raw, "-p")
    except InvalidArgument as exc:
        assert str(exc).startswith("-p")


LINE_FIELD = st.sampled_from(["type", "activity_type", "payload", "priority", "delay", "at",
                              "max_retries", "timeout", "retry_delay", "metadata",
                              "idempotency_key", "on_duplicate", "other"])


@given(st.one_of(
    st.dictionaries(LINE_FIELD, JSON, max_size=6).map(json.dumps),
    st.dictionaries(LINE_FIELD, JSON, max_size=6).map(
        lambda d: json.dumps({"type": "t", **d})),
    st.text(max_size=80),
    st.binary(max_size=80),
))
def test_ndjson_lines_become_specs_or_are_refused(line) -> None:
    from runnerq_cli.backend.domain.spec_lines import spec_from_line
    from runnerq_cli.backend.queue.queue import ActivitySpec

    try:
        spec = spec_from_line(line, {})
    except InvalidArgument:
        return
    assert isinstance(spec, ActivitySpec)
    values.payload(spec.payload)
