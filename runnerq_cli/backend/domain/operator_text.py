"""The operator's own words on a record: `--reason` and `--actor`, checked once.

Pure (no server): the CLI and the console check them before connecting, the parts
(audit.py, control.py, dlq.py) before writing, with the same bounds.
"""

from __future__ import annotations

from runnerq_cli import texts

TEXT_MAX = 1000  # --reason
ACTOR_MAX = 200  # --actor


def check_text(value: str | None, what: str) -> str | None:
    """A reason or actor: one line of printable, valid UTF-8 text, at most TEXT_MAX
    (an actor: ACTOR_MAX) characters; InvalidArgument otherwise."""
    if value is None:
        return None
    limit = ACTOR_MAX if "actor" in what else TEXT_MAX
    return texts.one_line_text(value, what, max_chars=limit)
