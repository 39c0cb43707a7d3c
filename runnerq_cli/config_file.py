"""The settings file (docs/cli.md, "Configuration"): read, its nested keys flattened to dotted
paths, an unknown key named with the closest known one.

Apart from config.py since most runs have no file: a plain `enqueue` with none need not
compile this where byte-code is not cached (benchmarks/bench_cli_startup.py). The keys
are config.py's, passed in, so this module does not import it back.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from runnerq_cli import values
from runnerq_cli.errors import ConfigError

CONFIG_FILE_MAX = 1024 * 1024  # bytes; a settings file is a few hundred


def _unknown_key(path: str, keys: Collection[str]) -> ConfigError:
    close = values.closest(path, sorted(keys))
    hint = f" (did you mean {close!r}?)" if close else " (see `runnerq-mongo config show`)"
    return ConfigError(f"unknown key {values.shown(path)}{hint}")


def _flatten(data: Mapping[Any, Any], keys: Collection[str],
             prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for name, value in data.items():
        path = f"{prefix}{name}"
        if not isinstance(name, str):
            raise ConfigError(f"key {values.shown(name)}: keys must be text")
        if path in keys:
            flat[path] = value
        elif isinstance(value, Mapping) and any(k.startswith(path + ".") for k in keys):
            flat.update(_flatten(value, keys, prefix=path + "."))
        else:
            raise _unknown_key(path, keys)
    return flat


def read_config_file(path: Path, keys: Collection[str]) -> dict[str, Any]:
    """Flat {dotted key: raw value} from a YAML file; a one-line ConfigError if invalid,
    naming a key not among `keys` (config.KEYS_BY_PATH: the dotted paths)."""
    from runnerq_cli.inputs import Unreadable, YAMLRefused, load_yaml, read_input

    try:
        raw = read_input(str(path), "config", CONFIG_FILE_MAX)
    except Unreadable as exc:
        raise ConfigError(f"config {path}: cannot read it ({exc.reason})") from None
    if len(raw) > CONFIG_FILE_MAX:
        raise ConfigError(f"config {path}: larger than {CONFIG_FILE_MAX} bytes; "
                          "is it the right file?")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config {path}: not UTF-8 text (invalid byte at offset "
                          f"{exc.start})") from None
    try:
        data = load_yaml(text, "the config file")
    except YAMLRefused as exc:
        raise ConfigError(f"config {path}: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config {path}: expected a mapping of keys at the top level")
    try:
        return _flatten(data, keys)
    except ConfigError as exc:
        raise ConfigError(f"config {path}: {exc}") from None
