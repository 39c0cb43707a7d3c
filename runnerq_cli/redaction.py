"""Keep passwords out of output, logs and error messages."""

from __future__ import annotations

import re

REDACTED = "****"
# scheme://user:password@host...  (the password may hold any character but '@' and '/')
_USERINFO = re.compile(r"(?P<scheme>mongodb(?:\+srv)?://)(?P<user>[^:@/\s]*):(?P<pw>[^@/\s]*)@")
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


def redact_secret(text: str, secret: str | None) -> str:
    """`text` without `secret` (and its URI form), for messages built from foreign errors."""
    text = redact_uri(text)
    if secret:
        text = text.replace(secret, REDACTED)
    return text
