"""Settings: defaults < YAML file < environment < flags, each value with its source.

The schema below is the single list of keys: `config.example.yaml`, the
environment variable names, validation and `config show` all follow from it. The
file itself is read by config_file.py, loaded only when there is one.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any, NamedTuple

from runnerq_cli import values
from runnerq_cli.errors import ConfigError, InvalidArgument
from runnerq_cli.redaction import redact_uri

CONFIG_FILE_NAME = "runnerq.yaml"
APP_NAME = "runnerq"


# Each parser takes the raw value and `what` (the flag, variable or file key it came
# from, for the message) and returns the parsed value or raises InvalidArgument.


def _seconds(value: Any, what: str, *, minimum: float = 0.0,
             maximum: float | None = None) -> float:
    """A duration setting (times.py: imported when such a key is set, which a plain
    `enqueue` with no config file needs not)."""
    from runnerq_cli.times import duration

    return duration(value, what, minimum=minimum,
                    maximum=values.MAX_DURATION if maximum is None else maximum)


def _duration(value: Any, what: str) -> float:
    return _seconds(value, what)


def _ttl(value: Any, what: str) -> float:
    """A TTL index's expireAfterSeconds is a 32-bit integer on the server (about 68 years)."""
    return _seconds(value, what, maximum=float(2**31 - 1))


def lease_seconds(value: Any, what: str) -> float:
    return _seconds(value, what, minimum=1.0)


def poll_interval_seconds(value: Any, what: str) -> float:
    return _seconds(value, what, minimum=0.01, maximum=3600.0)


def shutdown_timeout_seconds(value: Any, what: str) -> float:
    return _seconds(value, what, maximum=86400.0)


def kill_grace_seconds(value: Any, what: str) -> float:
    """How long a shell handler has between SIGTERM and SIGKILL: at most 10 minutes."""
    return _seconds(value, what, maximum=600.0)


def progress_interval_seconds(value: Any, what: str) -> float:
    """The least time between two progress writes of one attempt: 0.1 s to an hour."""
    return _seconds(value, what, minimum=0.1, maximum=3600.0)


def _timeout(value: Any, what: str) -> float:
    """A connection timeout: above zero (pymongo refuses 0) and at most a day."""
    return _seconds(value, what, minimum=0.001, maximum=86400.0)


def _string(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidArgument(f"{what}: expected a non-empty string, got {values.shown(value)}")
    return value


def _optional_string(value: Any, what: str) -> str | None:
    if value is None:
        return None
    return _string(value, what)


def _concurrency(value: Any, what: str) -> int:
    return values.integer(value, what, minimum=1, maximum=10_000)


def _string_list(value: Any, what: str) -> tuple[str, ...]:
    from runnerq_cli.setting_lists import string_list  # loaded only when the key is set

    return string_list(value, what)


def _string_map(value: Any, what: str) -> dict[str, str]:
    from runnerq_cli.setting_lists import string_map  # loaded only when the key is set

    return string_map(value, what)


def _choice(*choices: str) -> Callable[[Any, str], str]:
    def check(value: Any, what: str) -> str:
        if not isinstance(value, str) or value not in choices:
            raise InvalidArgument(f"{what}: expected one of {', '.join(choices)}, "
                                  f"got {values.shown(value)}")
        return value

    return check


def _named(check: Callable[[str], str]) -> Callable[[Any, str], str]:
    """A text setting checked by `values` (queue and database names, the URI), its key
    named in the error."""
    def parse(value: Any, what: str) -> str:
        text = _string(value, what)
        try:
            return check(text)
        except InvalidArgument as exc:
            raise InvalidArgument(f"{what}: {exc}") from None
    return parse


_queue = _named(values.queue_name)
_database = _named(values.database_name)
_uri = _named(values.mongo_uri)


class Key(NamedTuple):
    """One setting: its dotted path in YAML, its parser and help (its default is the
    dataclasses' below: `default`). A named tuple, not a dataclass: an immutable record
    all the same, built in a fifth of the time at every start (Settings and
    WorkerSettings, the public ones, stay dataclasses)."""

    path: str
    parse: Callable[[Any, str], Any]
    help: str
    expects: str
    env: str = ""

    @property
    def default(self) -> Any:
        """The value when nothing sets it: the field's default in Settings/WorkerSettings."""
        owner: type = Settings
        name = self.attr
        if self.path.startswith("worker."):
            owner, name = WorkerSettings, self.path.split(".", 1)[1]
        spec = {f.name: f for f in fields(owner)}[name]
        if spec.default is not MISSING:
            return spec.default
        factory: Callable[[], Any] = spec.default_factory  # type: ignore[assignment]
        return factory()

    @property
    def env_var(self) -> str:
        return self.env or "RUNNERQ_" + self.path.upper().replace(".", "_")

    @property
    def attr(self) -> str:
        return self.path.replace(".", "_")

    @property
    def flag(self) -> str:
        """The command-line option that sets this key (`worker.poll_interval`: --poll-interval)."""
        return "--" + self.path.rsplit(".", 1)[-1].replace("_", "-")


KEYS: tuple[Key, ...] = (
    Key("uri", _uri, "MongoDB connection string",
        "a mongodb:// URI", env="RUNNERQ_MONGO_URI"),
    Key("database", _database, "database holding the queue collections", "a name"),
    Key("queue", _queue, "queue name (letters, digits, _ and -)", "a queue name"),
    Key("server_selection_timeout", _timeout,
        "how long to wait for a reachable server before failing", "a duration"),
    Key("connect_timeout", _timeout, "TCP connect timeout", "a duration"),
    Key("socket_timeout", _timeout, "timeout of one server round trip", "a duration"),
    Key("lease", lease_seconds, "lease length of a claim; workers renew it", "a duration"),
    Key("max_retry_delay", _duration,
        "cap of the exponential retry back-off (0 means the default, 1h)", "a duration"),
    Key("results_ttl", _ttl, "how long results are kept", "a duration"),
    Key("idempotency_ttl", _ttl, "how long idempotency keys hold", "a duration"),
    Key("events_ttl", _ttl, "how long lifecycle events are kept", "a duration"),
    Key("retention.completed", _duration,
        "completed activities are purged this long after completion (0 keeps them)",
        "a duration"),
    Key("retention.failed", _duration,
        "failed and dead-lettered activities are purged this long after (0 keeps them)",
        "a duration"),
    Key("worker.concurrency", _concurrency, "activities run at once per worker process",
        "a whole number"),
    Key("worker.types", _string_list, "activity types this worker claims (empty: all)",
        "a list of types"),
    Key("worker.app", _optional_string, "module that registers handlers", "a module path"),
    Key("worker.handlers", _string_map, "TYPE: package.module:function",
        "a mapping of type to import path"),
    Key("worker.exec", _string_map, "TYPE: shell command (payload on stdin)",
        "a mapping of type to command"),
    Key("worker.shutdown_timeout", shutdown_timeout_seconds,
        "how long running handlers may finish after SIGTERM", "a duration"),
    Key("worker.poll_interval", poll_interval_seconds, "longest idle wait between claims",
        "a duration"),
    Key("worker.kill_grace", kill_grace_seconds,
        "how long a stopped shell handler has between SIGTERM and SIGKILL", "a duration"),
    Key("worker.progress_interval", progress_interval_seconds,
        "least time between two progress writes of one running activity", "a duration"),
    Key("worker.log_format", _choice("auto", "rich", "plain", "json"),
        "log line format", "auto, rich, plain or json"),
    Key("worker.log_level", _choice("debug", "info", "warning", "error"),
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
    kill_grace: float = 5.0
    progress_interval: float = 5.0
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
    # for the CLI to print on stderr (the backend prints nothing)
    warnings: tuple[str, ...] = field(default=(), compare=False, repr=False)

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


# RUNNERQ_* variables that are not settings but are known: no warning for them.
OTHER_ENV_VARS = frozenset({
    "RUNNERQ_CONFIG", "RUNNERQ_DEBUG",
    "RUNNERQ_CONSOLE_TOKEN",  # `console`'s token (cli/commands/console.py)
    # set by the worker for shell handlers (worker/shell.py)
    "RUNNERQ_ACTIVITY_ID", "RUNNERQ_ACTIVITY_TYPE", "RUNNERQ_ATTEMPT", "RUNNERQ_WORKER_ID",
})
OTHER_ENV_PREFIXES = ("RUNNERQ_TEST_", "RUNNERQ_BENCH_")  # the test suite and benchmarks


def unknown_env_warnings(environ: Mapping[str, str]) -> list[str]:
    """A warning for each RUNNERQ_* variable that is no setting (a typo is otherwise silent)."""
    known = sorted({k.env_var for k in KEYS} | OTHER_ENV_VARS)
    out = []
    for name in sorted(environ):
        if (not name.startswith("RUNNERQ_") or name in known
                or name.startswith(OTHER_ENV_PREFIXES)):
            continue
        close = values.closest(name, known)
        out.append(f"ignoring unknown environment variable {name}"
                   + (f" (did you mean {close}?)" if close else ""))
    return out


def _check_utf8(raw: Any, what: str, *, uri: bool = False, env: bool = False) -> None:
    """Refuse text that cannot be UTF-8: an environment variable's bytes that are not
    (Python hands them over as lone surrogates, PEP 383) or a YAML `"\\udcff"` escape.
    Left alone, it fails deep inside whatever encodes it (the driver's authentication,
    a BSON name: exit 1), possibly after a write; here it is the setting's error."""
    texts = (list(raw) + list(raw.values()) if isinstance(raw, dict)
             else list(raw) if isinstance(raw, list | tuple) else [raw])
    for text in texts:
        if not isinstance(text, str):
            continue
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            text = redact_uri(text) if uri else text
            escaped = values.shown(text)[1:-1]  # a YAML escape as written: \udcff
            if env:  # the variable's bytes as they were given: p\xff
                escaped = repr(text.encode("utf-8", "surrogateescape")[:60])[2:-1]
            raise InvalidArgument(f"{what}: not valid UTF-8 ({escaped})") from None


def load_settings(
    config_path: str | Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """Resolve every key: flags (`overrides`) > environment > file > default.

    A bad flag value is an InvalidArgument (exit 2); a bad file or environment
    value a ConfigError (exit 3); each names the flag, variable or key.
    """
    environ = os.environ if environ is None else environ
    parsed: dict[str, Any] = {}
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
    if path is not None and path.is_dir():
        raise ConfigError(f"config {path}: is a directory, not a file")

    layers: list[tuple[str, Mapping[str, Any]]] = []
    if path is not None:
        from runnerq_cli.config_file import read_config_file

        layers.append(("file", read_config_file(path, KEYS_BY_PATH)))
    layers.append(("env", {k.path: environ[k.env_var] for k in KEYS if environ.get(k.env_var)}))
    layers.append(("flag", {k: v for k, v in (overrides or {}).items() if v is not None}))

    for source, layer in layers:
        for key_path, raw in layer.items():
            key = KEYS_BY_PATH[key_path]
            what = {"flag": key.flag, "env": f"environment {key.env_var}"}.get(
                source, f"config {path}: key {key_path!r}")
            try:
                _check_utf8(raw, what, uri=key_path == "uri", env=source == "env")
                parsed[key_path] = key.parse(raw, what)
            except InvalidArgument as exc:
                message = str(exc)
                if key_path == "uri":
                    message = redact_uri(message)
                if source == "flag":  # a bad command-line value is a usage error (exit 2)
                    raise InvalidArgument(message) from None
                raise ConfigError(message) from None
            sources[key_path] = {"env": "env " + key.env_var,
                                 "file": f"file {path}"}.get(source, source)

    core = {k.attr: parsed[k.path] for k in KEYS
            if k.path in parsed and not k.path.startswith("worker.")}
    worker = {k.path.split(".", 1)[1]: parsed[k.path] for k in KEYS
              if k.path.startswith("worker.") and k.path in parsed}
    return Settings(**core, worker=WorkerSettings(**worker), sources=sources,
                    warnings=tuple(unknown_env_warnings(environ)))
