"""Keep passwords out of output, logs and error messages."""

from __future__ import annotations

import re

REDACTED = "****"
# scheme://user:password@host..., any scheme in any case, or user:password@host at the
# start of a word (scheme forgotten). The password runs to the last '@' of the word:
# mistyped URIs (an unescaped '@' or '/' in the password) are the ones errors echo.
_USERINFO = re.compile(
    r"(?i)(?P<scheme>\b[a-z][a-z0-9+.\-]*://|(?<![^\s'\"(\[=,]))"
    r"(?P<user>[^:@/\s'\"]*):(?!//)(?P<pw>[^\s'\"]*)@")
_QUERY_SECRET = re.compile(
    r"(?i)(?P<key>[?&](?:password|tlsCertificateKeyFilePassword|authMechanismProperties)=)"
    r"(?P<value>[^&\s]*)"
)


def redact_uri(text: str) -> str:
    """`text` with every password of a MongoDB URI in it replaced by ****.

    Works on whole messages too, so driver errors that quote a URI are safe.
    """
    text = _USERINFO.sub(lambda m: f"{m['scheme']}{m['user']}:{REDACTED}@", text)
    return _QUERY_SECRET.sub(lambda m: f"{m['key']}{REDACTED}", text)



def secrets_in(text: str) -> list[str]:
    """The passwords `redact_uri` would hide in `text` (to withhold them elsewhere)."""
    found = [m["pw"] for m in _USERINFO.finditer(text) if m["pw"]]
    return found + [m["value"] for m in _QUERY_SECRET.finditer(text) if m["value"]]
