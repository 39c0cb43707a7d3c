"""The settings that are lists or mappings: `worker.types`, `worker.handlers` and
`worker.exec` (config.py's KEYS), from YAML or from their environment form.

Apart from config.py since only a worker's settings set them: a plain `enqueue` need
not compile these parsers where byte-code is not cached (benchmarks/bench_cli_startup.py).
"""

from __future__ import annotations

from typing import Any

from runnerq_cli import values
from runnerq_cli.errors import InvalidArgument


def string_list(value: Any, what: str) -> tuple[str, ...]:
    """A list of types (`worker.types`): a YAML list, or the environment's "a,b"."""
    if isinstance(value, str):
        value = [part.strip() for part in value.split(",") if part.strip()]
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise InvalidArgument(f"{what}: expected a list of strings (or a comma-separated "
                              f"string), got {values.shown(value)}")
    if not all(v.strip() for v in value):  # YAML `[a, ""]`: no type is named ""
        raise InvalidArgument(f"{what}: an empty type in {values.shown(value)}")
    return tuple(value)


def string_map(value: Any, what: str) -> dict[str, str]:
    """TYPE to text (`worker.handlers`, `worker.exec`): a YAML mapping, or the
    environment's "a=x,b=y"."""
    if isinstance(value, str):  # environment form: "a=x,b=y"
        pairs = [part.split("=", 1) for part in value.split(",") if part.strip()]
        if any(len(pair) != 2 for pair in pairs):
            raise InvalidArgument(f"{what}: expected TYPE=VALUE pairs separated by commas, "
                                  f"got {values.shown(value)}")
        value = {k.strip(): v.strip() for k, v in pairs}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise InvalidArgument(f"{what}: expected a mapping of strings to strings, "
                              f"got {values.shown(value)}")
    # As --handler/--exec TYPE=VALUE: a type and a value, each trimmed and not empty (an
    # empty type would fail the worker later, unnamed; a blank one be claimed as "  ").
    for key, item in value.items():
        if not key.strip():
            raise InvalidArgument(f"{what}: an empty type (for {values.shown(item)})")
        if not item.strip():
            raise InvalidArgument(f"{what}: type {values.shown(key)} has an empty value")
    return {k.strip(): v.strip() for k, v in value.items()}
