"""What never leaves the product in a text or a document it hands over: credentials.

The evidence archive (``gpuhealth evidence``) and the raw ``dcgmi diag`` output an agent sends with its
diagnostic both pass through here: a value under a key that names a token, secret, password, credential,
authorization or API key becomes ``[redacted]``, and so does any ``Bearer ...`` or ``token=...`` credential
inside a text (JSON written as text included: ``"password": "..."``).
"""

from __future__ import annotations

import re
from typing import Any

REDACTED = "[redacted]"
_SECRET_WORDS = r"token|secret|password|passwd|credential|authorization|api[_-]?key"  # noqa: S105 - the words, not a password
_SECRET_KEYS = re.compile(_SECRET_WORDS, re.IGNORECASE)
_BEARER = re.compile(r"(?i)\b(bearer|token)[\s:=]+[A-Za-z0-9._~+/=-]{8,}")
# A JSON member with a quoted value: the key (at most 64 characters, so the scan stays linear on any text)
# is judged by _SECRET_KEYS, and the value goes when it names a secret.
_MEMBER = re.compile(r'("([^"\\\n]{1,64})"\s*:\s*)"((?:[^"\\\n]|\\.)*)"')


def redact(value: Any) -> Any:
    """``value`` with every secret-looking entry and credential in text replaced."""
    if isinstance(value, dict):
        return {
            key: REDACTED if _SECRET_KEYS.search(str(key)) and item not in (None, "") else redact(item)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [redact(item) for item in value]
    if isinstance(value, str):
        return redact_text(value)
    return value


def redact_text(text: str) -> str:
    """``text`` with quoted values under secret-looking keys and ``Bearer`` credentials replaced."""
    text = _MEMBER.sub(_member, text)
    return _BEARER.sub(lambda match: f"{match.group(1)} {REDACTED}", text)


def tail(text: str, limit_bytes: int) -> str:
    """The last ``limit_bytes`` bytes of ``text`` (UTF-8), cut at a character; the whole text when shorter."""
    data = text.encode()
    if len(data) <= limit_bytes:
        return text
    return data[-limit_bytes:].decode(errors="ignore")


def _member(match: re.Match[str]) -> str:
    if _SECRET_KEYS.search(match.group(2)) and match.group(3):
        return f'{match.group(1)}"{REDACTED}"'
    return match.group(0)
