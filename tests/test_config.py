"""Settings resolution and config.example.yaml (no server needed)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from runnerq_cli.config import KEYS, KEYS_BY_PATH, Settings, load_settings
from runnerq_cli.config_file import read_config_file
from runnerq_cli.errors import ConfigError, InvalidArgument

EXAMPLE = Path(__file__).resolve().parent.parent / "config.example.yaml"
NO_ENV: dict[str, str] = {}


def test_example_file_covers_exactly_the_keys() -> None:
    assert set(read_config_file(EXAMPLE, KEYS_BY_PATH)) == set(KEYS_BY_PATH)


def test_example_file_loads_to_the_defaults() -> None:
    loaded = load_settings(EXAMPLE, environ=NO_ENV)
    assert loaded == Settings()
    assert all(source == f"file {EXAMPLE}" for source in loaded.sources.values())


def test_example_file_comments_every_key() -> None:
    lines = EXAMPLE.read_text().splitlines()
    leaf = re.compile(r"^\s*([a-z_]+):\s*\S")  # a key with a value on its line
    documented = set()
    parent = ""
    for number, line in enumerate(lines):
        top = re.match(r"^([a-z_]+):\s*$", line)
        if top:
            parent = top.group(1) + "."
            continue
        match = leaf.match(line)
        if not match:
            continue
        path = (parent if line.startswith(" ") else "") + match.group(1)
        assert lines[number - 1].strip().startswith("#"), f"{path} has no comment above it"
        documented.add(path)
    assert documented == set(KEYS_BY_PATH)


def test_precedence_flag_over_env_over_file_over_default(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("queue: from_file\ndatabase: db_file\nlease: 2m\n")
    env = {"RUNNERQ_QUEUE": "from_env", "RUNNERQ_DATABASE": "db_env"}
    settings = load_settings(config, overrides={"queue": "from_flag"}, environ=env)
    assert (settings.queue, settings.database, settings.lease) == ("from_flag", "db_env", 120.0)
    assert settings.sources["queue"] == "flag"
    assert settings.sources["database"] == "env RUNNERQ_DATABASE"
    assert settings.sources["lease"] == f"file {config}"
    assert "socket_timeout" not in settings.sources  # default


def test_uri_env_var_and_redaction() -> None:
    settings = load_settings(None, environ={"RUNNERQ_MONGO_URI": "mongodb://u:s3cret@h:1/",
                                            "RUNNERQ_CONFIG": ""})
    rows = {key: (value, source) for key, value, source in settings.effective()}
    assert rows["uri"] == ("mongodb://u:****@h:1/", "env RUNNERQ_MONGO_URI")


@pytest.mark.parametrize(("text", "fragments"), [
    ("queue: [unclosed\n", ["malformed YAML", "line"]),
    ("nope: 1\n", ["unknown key 'nope'"]),
    ("worker:\n  colour: red\n", ["unknown key 'worker.colour'"]),
    ("worker:\n  concurrency: many\n", ["'worker.concurrency'", "whole number", "'many'"]),
    ("lease: soon\n", ["'lease'", "duration", "'soon'"]),
    ("queue: 'a b'\n", ["'queue'", "invalid queue name"]),
    ("- a\n- b\n", ["mapping"]),
])
def test_config_file_errors_name_file_key_and_expectation(tmp_path: Path, text: str,
                                                          fragments: list[str]) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_settings(config, environ=NO_ENV)
    message = str(info.value)
    assert str(config) in message and "\n" not in message
    for fragment in fragments:
        assert fragment in message


def test_env_error_names_the_variable() -> None:
    with pytest.raises(ConfigError, match="RUNNERQ_LEASE"):
        load_settings(None, environ={"RUNNERQ_LEASE": "-5s", "RUNNERQ_CONFIG": ""})


def test_flag_error_is_a_usage_error_naming_the_flag() -> None:
    with pytest.raises(InvalidArgument, match="--queue"):
        load_settings(None, overrides={"queue": "a b"}, environ={"RUNNERQ_CONFIG": ""})


def test_every_key_has_an_env_var_and_help() -> None:
    assert len({key.env_var for key in KEYS}) == len(KEYS)
    assert all(key.help and key.expects for key in KEYS)


def test_the_user_config_file_lives_in_the_xdg_config_dir(tmp_path, monkeypatch) -> None:
    """README: ./runnerq.yaml, else $XDG_CONFIG_HOME/runnerq/config.yaml (~/.config)."""
    from runnerq_cli.config import load_settings

    monkeypatch.chdir(tmp_path)
    home = tmp_path / "home"
    (home / ".config" / "runnerq").mkdir(parents=True)
    (home / ".config" / "runnerq" / "config.yaml").write_text("queue: from_home\n")
    monkeypatch.setenv("HOME", str(home))
    assert load_settings(environ={"HOME": str(home)}).queue == "from_home"
    xdg = tmp_path / "xdg"
    (xdg / "runnerq").mkdir(parents=True)
    (xdg / "runnerq" / "config.yaml").write_text("queue: from_xdg\n")
    assert load_settings(environ={"HOME": str(home), "XDG_CONFIG_HOME": str(xdg)}).queue \
        == "from_xdg"
    (tmp_path / "runnerq.yaml").write_text("queue: from_cwd\n")
    assert load_settings(environ={"XDG_CONFIG_HOME": str(xdg)}).queue == "from_cwd"


def test_retryable_error_is_part_of_the_public_api() -> None:
    from runnerq_cli import NonRetryableError, RetryableError

    assert issubclass(RetryableError, Exception)
    assert not issubclass(NonRetryableError, RetryableError)
