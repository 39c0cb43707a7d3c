"""The API names its parameters; the command line owns exit codes and flag names (issue 26).

An API caller reads `max_count must be at least 1` and catches an exception kind;
a user of the command line reads `--max ...` and gets the documented exit code.
"""

from __future__ import annotations

import pytest

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.backend.domain.models import MalformedDocument
from runnerq_cli.backend.store.connection import ConnectionInterrupted
from runnerq_cli.backend.views.events import ChangeStreamsUnavailable
from runnerq_cli.cli.exits import ExitCode, exit_code_of, message_of
from runnerq_cli.errors import (
    InvalidArgument,
    NotFound,
    RunnerQError,
    Unavailable,
    WrongState,
)


def test_the_api_names_the_parameter(queue: RunnerQ) -> None:
    with pytest.raises(InvalidArgument) as raised:
        list(queue.dead_letters.dlq_export(max_count=0))
    assert str(raised.value) == "max_count must be at least 1"
    assert "--" not in str(raised.value)
    assert message_of(raised.value) == "--max must be at least 1"


def test_a_bad_cursor_is_named_by_its_flag_on_the_command_line(queue: RunnerQ, run_cli) -> None:
    with pytest.raises(InvalidArgument, match=r"^after: invalid cursor"):
        queue.inspector.list_page("pending", after="not-a-cursor")
    result = run_cli("list", "pending", "--after", "not-a-cursor")
    assert result.code == ExitCode.USAGE
    assert result.stderr.strip().splitlines() == ["error: --after: invalid cursor 'not-a-cursor'"]


def test_only_the_named_parameters_are_rewritten() -> None:
    # "since" and "until" are parameters here; "after" is a word of the sentence.
    exc = InvalidArgument("since is after until: nothing can match", "since", "until")
    assert message_of(exc) == "--since is after --until: nothing can match"
    assert message_of(InvalidArgument("max_count is odd")) == "max_count is odd"


@pytest.mark.parametrize(("exc", "code"), [
    (InvalidArgument("x"), ExitCode.USAGE),
    (ChangeStreamsUnavailable("x"), ExitCode.USAGE),  # a subclass: its base's code
    (NotFound("x"), ExitCode.NOT_FOUND),
    (WrongState("x"), ExitCode.WRONG_STATE),
    (Unavailable("x"), ExitCode.UNAVAILABLE),
    (ConnectionInterrupted("x"), ExitCode.UNAVAILABLE),
    (MalformedDocument("x"), ExitCode.FAILURE),  # not listed: a bug report is welcome
    (RunnerQError("x"), ExitCode.FAILURE),
    (ValueError("x"), ExitCode.FAILURE),
])
def test_each_kind_of_error_has_one_exit_code(exc: BaseException, code: ExitCode) -> None:
    assert exit_code_of(exc) is code
