"""cli/typer_compat.py: the pydantic-free coercion gives what typer's own gives.

typer 0.29 coerces parameters through pydantic adapters; our fast path must accept and
refuse the same values with the same messages (skipped on typers without that path).
"""

from __future__ import annotations

from typing import Any

import pytest

from runnerq_cli.cli.output import OutputFormat
from runnerq_cli.cli.typer_compat import _fast_coercer, _Invalid

adapters = pytest.importorskip("typer._adapters", reason="this typer coerces through click")
display = pytest.importorskip("typer._display")
models = pytest.importorskip("typer.models")


def typers(annotation: Any, info: Any, value: Any) -> tuple[str, Any]:
    from pydantic import ValidationError

    adapter = adapters.try_build_adapter(annotation, info)
    try:
        return "ok", adapter.validate_python(value)
    except ValidationError as exc:
        return "error", display.get_error_msg(exc)


def ours(annotation: Any, info: Any, value: Any) -> tuple[str, Any]:
    coerce = _fast_coercer(annotation, info)
    assert coerce is not None
    try:
        return "ok", coerce(value, None)
    except _Invalid as exc:
        return "error", str(exc)


CASES = [
    (str, {}, "abc"), (str, {}, ""),
    (int, {}, "5"), (int, {}, " 7 "), (int, {}, "x"), (int, {}, "1.5"), (int, {}, "-3"),
    (int, {"min": 1, "max": 10000}, "0"), (int, {"min": 1, "max": 10000}, "10001"),
    (int, {"min": 1, "max": 10000}, "10000"),
    (float, {}, "0.5"), (float, {}, "2"), (float, {}, "abc"),
    (bool, {}, True), (bool, {}, False),
    (OutputFormat, {}, "json"), (OutputFormat, {}, "xml"), (OutputFormat, {}, "jsonl"),
    (list[str], {}, ("a", "b")), (list[str], {}, ()),
]


@pytest.mark.parametrize("annotation,options,value", CASES, ids=repr)
def test_fast_coercion_agrees_with_typer(annotation, options, value) -> None:
    info = models.OptionInfo(**options)
    assert ours(annotation, info, value) == typers(annotation, info, value)


def test_other_types_keep_typers_coercion() -> None:
    from pathlib import Path

    assert _fast_coercer(Path, models.OptionInfo()) is None
    assert _fast_coercer(int, models.OptionInfo(clamp=True, min=1)) is None
    assert _fast_coercer(str, models.OptionInfo(parser=str.upper)) is None
