"""Words (issue 25, point 10): `resume` says what it did; `retry --help` shows a filter."""

from __future__ import annotations


def test_resume_says_what_it_did(queue, run_cli) -> None:
    queue.enqueue("charge", {})
    assert run_cli("pause", "--type", "charge", "--type", "resize").code == 0
    res = run_cli("resume", "--type", "charge")
    assert res.code == 0 and res.stdout.splitlines()[0] == "resumed charge", res.stdout
    res = run_cli("resume", "--type", "charge")
    assert res.stdout.splitlines()[0] == "charge was not paused: nothing changed"
    res = run_cli("resume")
    assert res.stdout.splitlines()[0] == "resumed queue tests"
    res = run_cli("resume")
    assert res.stdout.splitlines()[0] == "queue tests was not paused: nothing changed"


def test_resume_refuses_a_type_the_queue_never_saw(queue, run_cli) -> None:
    """A misspelt type is refused (exit 4, one line, nothing written); a type the queue
    knows (an activity in any state, a worker, a past pause) is "not paused", exit 0."""
    queue.enqueue("report", {})
    queue.ack_success(queue.dequeue("w", types=["report"])[0], {})
    queue.registry.register_worker("w2", types=["resize"])
    before = run_cli("audit", "-o", "json").stdout
    res = run_cli("resume", "--type", "reprot")
    assert res.code == 4 and res.stdout == "", res
    assert res.stderr.splitlines() == [
        "error: activity type 'reprot' is unknown on this queue (no activity, worker or "
        "pause of it): nothing resumed"]
    assert run_cli("resume", "--type", "report", "--type", "reprot").code == 4
    assert run_cli("audit", "-o", "json").stdout == before  # nothing recorded
    for known in ("report", "resize"):  # only finished activities; only a worker
        res = run_cli("resume", "--type", known)
        assert res.code == 0 and res.stdout.startswith(f"{known} was not paused"), res
    assert run_cli("pause", "--type", "new_type").code == 0  # before its first activity
    assert run_cli("resume", "--type", "new_type").stdout.startswith("resumed new_type")
    res = run_cli("resume", "--type", "new_type")  # again: its pause is in the audit trail
    assert res.code == 0 and res.stdout.startswith("new_type was not paused"), res


def test_pause_and_resume_json_say_what_changed(queue, run_cli) -> None:
    """`resume --type charge -o json` names what it resumed, what was not paused and what
    is still paused, each by name: a bare `types` holding the types still paused read as
    the ones resumed. `pause -o json` alike. The state left is `pause`, as in `stats`."""
    import json

    queue.enqueue("charge", {})
    queue.enqueue("send_email", {})
    res = run_cli("pause", "--type", "charge", "--type", "send_email", "-o", "json")
    paused = json.loads(res.stdout)
    assert res.code == 0 and "types" not in paused, res
    assert {k: v for k, v in paused.items() if k != "pause"} == {
        "action": "pause", "whole_queue": False, "paused": ["charge", "send_email"],
        "already_paused": []}
    assert paused["pause"] == json.loads(run_cli("stats", "-o", "json").stdout)["pause"]
    again = json.loads(run_cli("pause", "--type", "charge", "-o", "json").stdout)
    assert (again["paused"], again["already_paused"]) == ([], ["charge"])
    res = run_cli("resume", "--type", "charge", "--type", "charge", "-o", "json")
    resumed = json.loads(res.stdout)
    assert res.code == 0 and "types" not in resumed, res
    assert {k: v for k, v in resumed.items() if k != "pause"} == {
        "action": "resume", "whole_queue": False, "changed": True, "resumed": ["charge"],
        "not_paused": [], "still_paused": ["send_email"]}
    assert resumed["pause"]["types"] == ["send_email"] and resumed["pause"]["paused"]
    same = json.loads(run_cli("resume", "--type", "charge", "-o", "json").stdout)
    assert (same["changed"], same["resumed"], same["not_paused"], same["still_paused"]) == (
        False, [], ["charge"], ["send_email"])
    everything = json.loads(run_cli("resume", "-o", "json").stdout)
    assert (everything["whole_queue"], everything["changed"], everything["resumed"],
            everything["still_paused"], everything["pause"]["paused"]) == (
        True, True, ["send_email"], [], False)
    assert run_cli("pause", "-o", "json").code == 0
    whole = json.loads(run_cli("resume", "-o", "json").stdout)
    assert (whole["changed"], whole["resumed"], whole["still_paused"]) == (True, [], [])


def test_retry_help_has_an_example_by_filter(run_cli) -> None:
    res = run_cli("retry", "--help")
    assert "retry --status dead-letter --type charge --error-contains 502" in " ".join(
        res.stdout.split())


def test_root_help_groups_the_commands(run_cli) -> None:
    res = run_cli("--help")
    lines = res.stdout.splitlines()
    titles = [ln for ln in lines if ln.endswith(":") and not ln.startswith(" ")]
    assert titles[-5:] == ["Set up:", "Run:", "Inspect:", "Act:", "Diagnose:"], titles
    assert "Other commands:" not in res.stdout  # every command has its group
    act = lines[lines.index("Act:") + 1:lines.index("Diagnose:")]
    assert [ln.split()[0] for ln in act if ln.strip()][:2] == ["cancel", "retry"]


def test_every_help_names_values_in_words(run_cli) -> None:
    """No option or argument of any command or subcommand shows how Python typed it
    (`<int range>`, `<str>`, `<list[str]>`, `<float>`) or its range (`1<=x<=10000`): a
    metavar in words (N, TEXT, ID, ...) or its choices; the usage line names arguments as
    the Arguments section does (`ID`, `[ID...]`), not typer 0.29's `{ID}` or `[[ID...]]...`."""
    import re

    from runnerq_cli.cli.app import _root_command

    root = _root_command()
    commands: list[tuple[str, ...]] = []
    for name in root.list_commands(None):
        command = root.get_command(None, name)
        commands.append((name,))
        commands += [(name, sub) for sub in getattr(command, "commands", {}) or {}]
    assert len(commands) > 30
    for words in commands:
        res = run_cli(*words, "--help")
        assert res.code == 0, (words, res.stderr)
        typed = re.findall(r"<(?:int|float|str|list\[)[^>]*>", res.stdout)
        assert not typed, (words, typed)
        # No number range (`[default: 0; 0<=x<=9223372036854775807]`, `[x>=1]`): a bound
        # that matters is in the option's words.
        ranges = re.findall(r".*(?:<=|>=|x<|x>).*", res.stdout)
        assert not ranges, (words, ranges)
        usage = res.stdout.split("\n\n", 1)[0]
        assert "{" not in usage and "[[" not in usage, (words, usage)
    shown = run_cli("show", "--help").stdout
    assert "Usage: runnerq-mongo show [OPTIONS] ID\n" in shown
    assert "\n  ID  The activity's id" in shown
    shown = run_cli("cancel", "--help").stdout
    assert "cancel [OPTIONS] [ID...]\n" in shown and "\n  [ID...]  Activity id(s)" in shown
    enqueue = " ".join(run_cli("enqueue", "--help").stdout.split())
    assert "\n  [TYPE]  Activity type" in run_cli("enqueue", "--help").stdout
    assert "--batch-size N With --from: activities per write (1 to 10,000). [default: 100]" \
        in enqueue
    assert "skip the first N lines (go on after an interrupted run: it prints N). " \
        "[default: 0]" in enqueue
