"""Settings: defaults < YAML file < environment < flags, each value with its source.

The schema below is the single list of keys: `config.example.yaml`, the
environment variable names, validation and `config show` all follow from it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runnerq_cli.backend.naming import validate_queue_name
from runnerq_cli.durations import parse_duration
from runnerq_cli.errors import ConfigError, InvalidArgument
from runnerq_cli.redaction import redact_uri

CONFIG_FILE_NAME = "runnerq.yaml"
APP_NAME = "runnerq"


def _duration(value: Any) -> float:
    return parse_duration(value)


def _string(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidArgument("expected a non-empty string")
    return value


def _optional_string(value: Any) -> str | None:
    if value is None:
        return None
    return _string(value)


def _positive_int(value: Any) -> int:
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidArgument("expected a whole number of at least 1")
    return value


def _string_list(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [part.strip() for part in value.split(",") if part.strip()]
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise InvalidArgument("expected a list of strings (or a comma-separated string)")
    return tuple(value)


def _string_map(value: Any) -> dict[str, str]:
    if isinstance(value, str):  # environment form: "a=x,b=y"
        pairs = [part.split("=", 1) for part in value.split(",") if part.strip()]
        if any(len(pair) != 2 for pair in pairs):
            raise InvalidArgument("expected TYPE=VALUE pairs separated by commas")
        value = {k.strip(): v.strip() for k, v in pairs}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise InvalidArgument("expected a mapping of strings to strings")
    return dict(value)


def _choice(*choices: str) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if value not in choices:
            raise InvalidArgument(f"expected one of {', '.join(choices)}")
        return value

    return check


def _queue(value: Any) -> str:
    return validate_queue_name(_string(value))


@dataclass(frozen=True)
class Key:
    """One setting: its dotted path in YAML, its parser, default and help."""

    path: str
    parse: Callable[[Any], Any]
    default: Any
    help: str
    expects: str
    env: str = ""

    @property
    def env_var(self) -> str:
        return self.env or "RUNNERQ_" + self.path.upper().replace(".", "_")

    @property
    def attr(self) -> str:
        return self.path.replace(".", "_")


KEYS: tuple[Key, ...] = (
    Key("uri", _string, "mongodb://localhost:27017", "MongoDB connection string",
        "a mongodb:// URI", env="RUNNERQ_MONGO_URI"),
    Key("database", _string, "runnerq", "database holding the queue collections", "a name"),
    Key("queue", _queue, "default", "queue name (letters, digits, _ and -)", "a queue name"),
    Key("server_selection_timeout", _duration, 5.0,
        "how long to wait for a reachable server before failing", "a duration"),
    Key("connect_timeout", _duration, 5.0, "TCP connect timeout", "a duration"),
    Key("socket_timeout", _duration, 30.0, "timeout of one server round trip", "a duration"),
    Key("lease", _duration, 60.0, "lease length of a claim; workers renew it", "a duration"),
    Key("max_retry_delay", _duration, 3600.0,
        "cap of the exponential retry back-off (0 means the default, 1h)", "a duration"),
    Key("results_ttl", _duration, 86400.0, "how long results are kept", "a duration"),
    Key("idempotency_ttl", _duration, 86400.0, "how long idempotency keys hold", "a duration"),
    Key("events_ttl", _duration, 604800.0, "how long lifecycle events are kept", "a duration"),
    Key("retention.completed", _duration, 604800.0,
        "completed activities are purged this long after completion (0 keeps them)",
        "a duration"),
    Key("retention.failed", _duration, 2592000.0,
        "failed and dead-lettered activities are purged this long after (0 keeps them)",
        "a duration"),
    Key("worker.concurrency", _positive_int, 4, "activities run at once per worker process",
        "a whole number"),
    Key("worker.types", _string_list, (), "activity types this worker claims (empty: all)",
        "a list of types"),
    Key("worker.app", _optional_string, None, "module that registers handlers", "a module path"),
    Key("worker.handlers", _string_map, {}, "TYPE: package.module:function",
        "a mapping of type to import path"),
    Key("worker.exec", _string_map, {}, "TYPE: shell command (payload on stdin)",
        "a mapping of type to command"),
    Key("worker.shutdown_timeout", _duration, 30.0,
        "how long running handlers may finish after SIGTERM", "a duration"),
    Key("worker.poll_interval", _duration, 1.0, "longest idle wait between claims",
        "a duration"),
    Key("worker.log_format", _choice("auto", "rich", "plain", "json"), "auto",
        "log line format", "auto, rich, plain or json"),
    Key("worker.log_level", _choice("debug", "info", "warning", "error"), "info",
        "log level", "debug, info, warning or error"),
)
KEYS_BY_PATH = {key.path: key for key in KEYS}


@dataclass(frozen=True)
class WorkerSettings:
    concurrency: int = 4
    types: tuple[str, ...] = ()
    app: str | None = None
    handlers: dict[str, str] = field(default_factory=dict)
    exec: dict[str, str] = field(default_factory=dict)
    shutdown_timeout: float = 30.0
    poll_interval: float = 1.0
    log_format: str = "auto"
    log_level: str = "info"


@dataclass(frozen=True)
class Settings:
    """Effective settings. Durations are in seconds."""

    uri: str = "mongodb://localhost:27017"
    database: str = "runnerq"
    queue: str = "default"
    server_selection_timeout: float = 5.0
    connect_timeout: float = 5.0
    socket_timeout: float = 30.0
    lease: float = 60.0
    max_retry_delay: float = 3600.0
    results_ttl: float = 86400.0
    idempotency_ttl: float = 86400.0
    events_ttl: float = 604800.0
    retention_completed: float = 604800.0
    retention_failed: float = 2592000.0
    worker: WorkerSettings = field(default_factory=WorkerSettings)
    sources: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    @property
    def redacted_uri(self) -> str:
        return redact_uri(self.uri)

    def value(self, path: str) -> Any:
        if path.startswith("worker."):
            return getattr(self.worker, path.split(".", 1)[1])
        return getattr(self, KEYS_BY_PATH[path].attr)

    def effective(self) -> list[tuple[str, Any, str]]:
        """(key, value, source) for every key; the URI with its password redacted."""
        rows = []
        for key in KEYS:
            value = self.value(key.path)
            if key.path == "uri":
                value = self.redacted_uri
            rows.append((key.path, value, self.sources.get(key.path, "default")))
        return rows


def user_config_path(environ: Mapping[str, str] | None = None) -> Path:
    """The user's config file: $XDG_CONFIG_HOME/runnerq/config.yaml (~/.config by default)."""
    environ = os.environ if environ is None else environ
    base = environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / APP_NAME / "config.yaml"


def default_config_paths(environ: Mapping[str, str] | None = None) -> list[Path]:
    """Where a config file is looked for when `--config` is not given, in order."""
    return [Path.cwd() / CONFIG_FILE_NAME, user_config_path(environ)]


def _flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for name, value in data.items():
        path = f"{prefix}{name}"
        if path in KEYS_BY_PATH:
            flat[path] = value
        elif isinstance(value, Mapping) and any(k.startswith(path + ".") for k in KEYS_BY_PATH):
            flat.update(_flatten(value, prefix=path + "."))
        else:
            known = ", ".join(sorted(KEYS_BY_PATH))
            raise ConfigError(f"unknown key {path!r} (known keys: {known})")
    return flat


def read_config_file(path: Path) -> dict[str, Any]:
    """Flat {dotted key: raw value} from a YAML file; a one-line ConfigError if invalid."""
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"config {path}: cannot read it ({exc.strerror or exc})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise ConfigError(f"config {path}: malformed YAML{where}: {problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config {path}: expected a mapping of keys at the top level")
    try:
        return _flatten(data)
    except ConfigError as exc:
        raise ConfigError(f"config {path}: {exc}") from None


def load_settings(
    config_path: str | Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """Resolve every key: flags (`overrides`) > environment > file > default."""
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}

    path: Path | None = None
    if config_path is not None:
        path = Path(config_path)
        if not path.exists():
            raise ConfigError(f"config {path}: no such file")
    elif environ.get("RUNNERQ_CONFIG"):
        path = Path(environ["RUNNERQ_CONFIG"])
        if not path.exists():
            raise ConfigError(f"config {path} (from RUNNERQ_CONFIG): no such file")
    else:
        path = next((p for p in default_config_paths(environ) if p.is_file()), None)

    layers: list[tuple[str, Mapping[str, Any]]] = []
    if path is not None:
        layers.append((f"file {path}", read_config_file(path)))
    env_layer = {k.path: environ[k.env_var] for k in KEYS if environ.get(k.env_var)}
    layers.append(("env", env_layer))
    layers.append(("flag", {k: v for k, v in (overrides or {}).items() if v is not None}))

    for source, layer in layers:
        for key_path, raw in layer.items():
            key = KEYS_BY_PATH[key_path]
            try:
                values[key_path] = key.parse(raw)
            except InvalidArgument as exc:
                if source == "flag":  # a bad command-line value is a usage error (exit 2)
                    raise InvalidArgument(
                        f"--{key_path.replace('.', '-').replace('_', '-')}: {exc}") from None
                where = {
                    "env": f"environment {key.env_var}",
                    "flag": f"option for {key_path}",
                }.get(source, f"config {path}: key {key_path!r}")
                raise ConfigError(
                    f"{where}: {exc} (expected {key.expects}, got {_show(raw, key_path)})"
                ) from None
            sources[key_path] = "env " + key.env_var if source == "env" else source

    core = {k.attr: values[k.path] for k in KEYS
            if k.path in values and not k.path.startswith("worker.")}
    worker = {k.path.split(".", 1)[1]: values[k.path] for k in KEYS
              if k.path.startswith("worker.") and k.path in values}
    return Settings(**core, worker=WorkerSettings(**worker), sources=sources)


def _show(raw: Any, key_path: str) -> str:
    text = repr(raw)
    if key_path == "uri":
        text = redact_uri(text)
    return text if len(text) <= 60 else text[:57] + "..."
