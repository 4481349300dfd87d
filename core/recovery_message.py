"""What an XID 154 message says: "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)".

One reading of the driver's text for everyone who needs it: the XID check (which action to recommend) and
the fake NVML (which value the driver leaves in NVML's recovery-action field when it raises the XID).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_TO_VALUE = re.compile(r"\bto\s+0x([0-9a-f]+)", re.IGNORECASE)
_TO_NAME = re.compile(r"\bto\s+(?:0x[0-9a-f]+\s*)?\(([^)]*)\)", re.IGNORECASE)
_TO_ANYTHING = re.compile(r"\bto\b", re.IGNORECASE)
# A name's meaning by keyword, first match wins ("Drain and Reset" is a drain, "PF FLR" a reset): drivers
# spell the same state differently ("OS Reboot", "Node Reboot Required").
_NAME_KEYWORDS: tuple[tuple[str, int], ...] = (
    ("reboot", 2),
    ("drain p2p", 3),
    ("drain", 4),
    ("reset", 1),
    ("flr", 1),
    ("none", 0),
)


@dataclass(frozen=True, slots=True)
class RecoveryChange:
    """What an XID 154 message says the GPU's recovery action changed to.

    One reading of the message for everyone who needs it: the XID check (which action to recommend) and
    the fake NVML (which value the driver leaves in the field when it raises the XID).
    """

    value: int | None  # the hex value after "to": authoritative when present
    name: str | None  # the name in parentheses, or a bare name ("GPU Reset Required")

    @property
    def value_by_name(self) -> int | None:
        """The field value the name stands for (by keyword), or None for a name we do not know."""
        if not self.name:
            return None
        lowered = self.name.lower()
        return next((value for keyword, value in _NAME_KEYWORDS if keyword in lowered), None)

    @property
    def field_value(self) -> int | None:
        """The value the driver puts in the field: the stated hex value, else the name's."""
        return self.value if self.value is not None else self.value_by_name


def recovery_change_from_message(message: str | None) -> RecoveryChange | None:
    """Read an XID 154 message; None when it states no new recovery action.

    The driver writes ``GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)``. A
    message with no "to" part is taken as a bare name (``GPU Reset Required``), as people write it.
    """
    if not message or not message.strip():
        return None
    value_match = _TO_VALUE.search(message)
    name_match = _TO_NAME.search(message)
    value = int(value_match.group(1), 16) if value_match else None
    if name_match is not None:
        name: str | None = name_match.group(1).strip() or None
    elif _TO_ANYTHING.search(message) is None:
        name = message.strip()
    else:
        name = None
    change = RecoveryChange(value=value, name=name)
    return change if change.field_value is not None else None
