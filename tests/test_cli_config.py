"""`runnerq-mongo config show`: values, sources, precedence, redaction, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runnerq_cli.cli.exits import ExitCode


def _show(run_cli, *args: str, env: dict[str, str] | None = None) -> dict:
    result = run_cli(*args, "config", "show", "-o", "json", env=env)
    assert result.code == 0, result.stderr
    return json.loads(result.stdout)["settings"]


def test_text_lists_every_key_with_its_source(run_cli) -> None:
    result = run_cli("config", "show")
    assert result.code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "config file: none"
    queue_line = next(line for line in lines if line.startswith("queue "))
    assert queue_line.split() == ["queue", "tests", "env", "RUNNERQ_QUEUE"]
    assert any(line.split()[:3] == ["lease", "1m", "default"] for line in lines)


@pytest.mark.parametrize(("flag", "env_queue", "file_queue", "want", "source"), [
    (True, True, True, "q_flag", "flag"),
    (False, True, True, "q_env", "env RUNNERQ_QUEUE"),
    (False, False, True, "q_file", "file"),
    (False, False, False, "default", "default"),
])
def test_precedence_flag_env_file_default(run_cli, tmp_path: Path, flag: bool, env_queue: bool,
                                          file_queue: bool, want: str, source: str) -> None:
    config = tmp_path / "runnerq.yaml"
    config.write_text("queue: q_file\n" if file_queue else "lease: 90s\n")
    args = ["--config", str(config)] + (["--queue", "q_flag"] if flag else [])
    settings = _show(run_cli, *args, env={"RUNNERQ_QUEUE": "q_env" if env_queue else ""})
    assert settings["queue"]["value"] == want
    expected_source = f"file {config}" if source == "file" else source
    assert settings["queue"]["source"] == expected_source
    assert settings["lease"]["value"] == (90.0 if not file_queue else 60.0)


def test_config_file_found_in_the_working_directory(run_cli, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "runnerq.yaml").write_text("worker:\n  concurrency: 9\n")
    monkeypatch.chdir(tmp_path)
    result = run_cli("config", "show", "-o", "json")
    data = json.loads(result.stdout)
    assert data["config_file"] == str(tmp_path / "runnerq.yaml")
    assert data["settings"]["worker.concurrency"]["value"] == 9
    assert data["settings"]["worker.concurrency"]["source"].startswith("file ")


def test_runnerq_config_env_names_the_file(run_cli, tmp_path: Path) -> None:
    config = tmp_path / "elsewhere.yaml"
    config.write_text("database: from_env_file\n")
    settings = _show(run_cli, env={"RUNNERQ_CONFIG": str(config), "RUNNERQ_DATABASE": ""})
    assert settings["database"] == {"value": "from_env_file", "source": f"file {config}",
                                    "env": "RUNNERQ_DATABASE"}


@pytest.mark.parametrize("where", ["flag", "env", "file"])
def test_password_is_never_shown(run_cli, tmp_path: Path, where: str) -> None:
    uri = "mongodb://admin:s3cret@db.example:27017/?authSource=admin"
    config = tmp_path / "c.yaml"
    config.write_text(f"uri: '{uri}'\n" if where == "file" else "")
    args = ["--config", str(config)] + (["--uri", uri] if where == "flag" else [])
    env = {"RUNNERQ_MONGO_URI": uri if where == "env" else ""}
    for fmt in ("text", "json"):
        result = run_cli(*args, "config", "show", "-o", fmt, env=env)
        assert result.code == 0, result.stderr
        assert "s3cret" not in result.stdout + result.stderr
        assert "admin:****@db.example" in result.stdout


@pytest.mark.parametrize(("text", "fragments"), [
    ("queue: [oops\n", ["malformed YAML"]),
    ("colour: blue\n", ["unknown key 'colour'"]),
    ("worker:\n  concurrency: -1\n", ["'worker.concurrency'", "expected a whole number"]),
    ("server_selection_timeout: forever\n", ["'server_selection_timeout'", "duration"]),
])
def test_bad_config_file_is_one_line_exit_config(run_cli, tmp_path: Path, text: str,
                                                 fragments: list[str]) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(text)
    result = run_cli("--config", str(config), "config", "show")
    assert result.code == ExitCode.CONFIG
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: config ")
    assert str(config) in lines[0]
    for fragment in fragments:
        assert fragment in lines[0]


def test_missing_config_file(run_cli, tmp_path: Path) -> None:
    result = run_cli("--config", str(tmp_path / "nope.yaml"), "config", "show")
    assert result.code == ExitCode.CONFIG
    assert "no such file" in result.stderr and "nope.yaml" in result.stderr


def test_bad_env_value_names_the_variable(run_cli) -> None:
    result = run_cli("config", "show", env={"RUNNERQ_WORKER_LOG_LEVEL": "loud"})
    assert result.code == ExitCode.CONFIG
    assert "RUNNERQ_WORKER_LOG_LEVEL" in result.stderr and "debug, info" in result.stderr


def test_bad_flag_value_is_a_usage_error(run_cli) -> None:
    result = run_cli("--queue", "a b", "config", "show")
    assert result.code == ExitCode.USAGE
    assert result.stderr.splitlines() == [
        "error: --queue: invalid queue name 'a b': use only letters, digits, '_' and '-'"]


@pytest.mark.parametrize("uri", [
    "mongodb://u:hunt/er2@localhost",          # unescaped '/' in the password
    "mongodb://u:p@ss-hunter2@localhost:1/",   # unescaped '@' in the password
    "MONGODB://u:hunter2@localhost",           # scheme in capitals (refused, echoed)
    "u:hunter2@localhost",                     # scheme forgotten (refused, echoed)
])
def test_mistyped_uris_never_show_their_password(run_cli, uri):
    """The URIs an operator gets wrong are the ones echoed back in errors and `config show`."""
    secret = "hunter2" if "hunter2" in uri else "er2"
    for args in (("--uri", uri, "config", "show"), ("--uri", uri, "stats")):
        result = run_cli(*args)
        assert secret not in result.stdout + result.stderr, args
    shown = run_cli("--uri", uri, "config", "show")
    assert "u:****@" in shown.stdout + shown.stderr
