"""Text from the aggregator made safe for a terminal before the CLI prints it.

Findings, actions and events carry text a node wrote (a finding's message, an action's note). A compromised
node can put terminal control sequences in it (cursor moves, erase line, a window title, a hyperlink), and
``gpuhealth node`` or ``gpuhealth events`` would send them to on-call's terminal. Every control character
(C0 but tab, DEL, C1) and every bidirectional override is shown escaped instead (``\\x1b``, ``\\u202e``), so
the text reads as what it is and cannot act. ``--json`` output needs none of this: JSON escapes them.
"""

from __future__ import annotations

import re
from typing import TypeVar, cast

from pydantic import BaseModel

_UNSAFE = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")

Value = TypeVar("Value")


def terminal_safe(text: str) -> str:
    """``text`` with every control character and bidirectional override escaped."""
    return _UNSAFE.sub(_escaped, text)


def terminal_safe_model(value: Value) -> Value:
    """``value`` (a wire model, a list of them, text) with every string in it made :func:`terminal_safe`;
    enums, numbers and times are kept as they are."""
    return cast(Value, _cleaned(value))


def _cleaned(value: object) -> object:
    if type(value) is str:
        return terminal_safe(value)
    if isinstance(value, BaseModel):
        fields = {name: _cleaned(getattr(value, name)) for name in type(value).model_fields}
        return value.model_copy(update=fields)
    if isinstance(value, list | tuple):
        return type(value)(_cleaned(item) for item in value)
    if isinstance(value, dict):
        return {_cleaned(key): _cleaned(item) for key, item in value.items()}
    return value


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"
