"""JSON for scripts (issue 25, point 11): one name for an activity's id, the result at
one stable path, as the commands print them."""

from __future__ import annotations

import json


def test_one_id_name_and_one_result_path(queue, run_cli) -> None:
    made = json.loads(run_cli("enqueue", "charge", "-p", '{"amount": 5}', "-o", "json").stdout)
    aid = made["id"]
    claim = queue.dequeue("w")[0]
    queue.ack_success(claim, {"charged": 5})
    listed = json.loads(run_cli("list", "completed", "-o", "json").stdout)["items"][0]
    waited = json.loads(run_cli("wait", aid, "-o", "json").stdout)
    result = json.loads(run_cli("result", aid, "-o", "json").stdout)
    assert listed["id"] == waited["id"] == result["id"] == aid
    assert waited["data"]["charged"] == result["data"]["charged"] == 5
    assert waited["state"] == result["state"] == "Ok"
    assert listed["priority"] == 2  # the stored number in JSON; "normal" in text (documented)
    assert "normal" in run_cli("list", "completed").stdout
