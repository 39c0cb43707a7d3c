"""A refused password is exit 6 (docs/reference.md), also from a server whose refusal
carries no error code (the dev server answers `Authentication failed` without one)."""

from __future__ import annotations

import pytest

from runnerq_cli.cli.exits import ExitCode


@pytest.mark.parametrize("args", [["list", "pending"], ["enqueue", "job", "-p", "{}"],
                                  ["show", "3f0c2a9e-0000-4000-8000-000000000000"]])
def test_wrong_password_is_exit_6(server, run_cli, args) -> None:
    uri = server.uri.replace("mongodb://", "mongodb://alice:wrong-secret@", 1)
    res = run_cli("--uri", uri, *args)
    assert res.code == ExitCode.UNAVAILABLE, res.stderr
    assert res.stderr.startswith("error: ") and res.stderr.count("\n") == 1
    assert "credentials" in res.stderr and "wrong-secret" not in res.stderr
