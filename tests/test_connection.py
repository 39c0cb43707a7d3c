"""Connection behaviour: unreachable servers are reported fast, safely, as Unavailable."""

from __future__ import annotations

import time

import pytest

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.config import load_settings
from runnerq_cli.errors import Unavailable


@pytest.mark.parametrize("timeout_source", ["uri", "setting"])
def test_unreachable_server_raises_unavailable_quickly_without_the_password(
        timeout_source: str) -> None:
    uri = "mongodb://ops:s3cret@127.0.0.1:1/"
    overrides = {"uri": uri}
    if timeout_source == "uri":
        overrides["uri"] = uri + "?serverSelectionTimeoutMS=300"
    else:
        overrides["server_selection_timeout"] = "0.3s"
    queue = RunnerQ(load_settings(None, overrides=overrides, environ={}))
    started = time.monotonic()
    with pytest.raises(Unavailable) as raised:
        queue.enqueue("t", {})
    assert time.monotonic() - started < 3
    assert "s3cret" not in str(raised.value)
    assert "****" in str(raised.value)
