"""Flag names, the CLI's own words: the backend names a value by its field ("delay",
"metadata") and the CLI says which option the user typed (errors read `--delay: ...`)."""

from __future__ import annotations

METADATA = "--metadata"


def flag(field: str) -> str:
    """The option that sets `field`: max_retries -> --max-retries."""
    return "--" + field.replace("_", "-")
