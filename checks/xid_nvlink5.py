"""NVIDIA's decode of the NVLink5 XIDs 144-150 (the XID catalogue's "Xid 144-150 Decode" sheet).

The driver prints them as ``<unit> <Fatal|Nonfatal> XC<n> i<n> Link <n> (0x<intrinfo> 0x<errorstatus> ...)``,
for example ``145, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 0x00000008 ...)``. The catalogue's
sheet gives, per XID and unit, the resolution of each error status: ``RESET_GPU``, ``IGNORE``, or
``XID_154_EVAL`` (act on the XID 154 recovery action the driver raises with it). For the NETIR link events
of XID 149 the error status is 0 and the link-down reason in intrinfo bits 20-25 decides instead. The
severity word on the line is the driver's own classification and can disagree with the resolution (a
"Link Fatal" caused by the host or a user, reason 0b100110 or 0b101000, is resolved IGNORE), so the
decode wins and the word is only the fallback for a unit or status the sheet does not list.

Source: https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html (the downloadable
spreadsheet, sheet "Xid 144-150 Decode"), transcribed as data below.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum


class Resolution(StrEnum):
    """The sheet's resolution of one error status."""

    RESET_GPU = "RESET_GPU"
    IGNORE = "IGNORE"
    XID_154_EVAL = "XID_154_EVAL"

    @property
    def rank(self) -> int:
        return (Resolution.IGNORE, Resolution.XID_154_EVAL, Resolution.RESET_GPU).index(self)


_R, _I, _E = Resolution.RESET_GPU, Resolution.IGNORE, Resolution.XID_154_EVAL
_SW_REPORT = 0x80000000  # "reported by software": IGNORE in every unit
_TLW_PIPE = {0x1: _I, 0x2: _I, 0x4: _R, _SW_REPORT: _I}

DECODE: dict[tuple[int, str], dict[int, Resolution]] = {
    (144, "SAW_MVB"): {0x1: _I, 0x2: _R, 0x4: _I, 0x8: _I, 0x10: _R, 0x20: _I},
    (145, "RLW_CTRL"): {_SW_REPORT: _I},
    (145, "RLW_REMAP"): {
        **dict.fromkeys((0x1, 0x2, 0x4, 0x8, 0x10, 0x20), _E),
        0x40: _R,
        0x80: _R,
        0x100: _I,
        0x200: _I,
        _SW_REPORT: _I,
    },
    (145, "RLW_RSPCOL"): {0x1: _I, 0x2: _R, _SW_REPORT: _I},
    (145, "RLW_RXPIPE"): {0x1: _I, 0x2: _I, 0x4: _I, 0x8: _I, _SW_REPORT: _I},
    (145, "RLW_SRC_TRACK"): {0x1: _R, 0x2: _I, 0x4: _E, 0x8: _E, 0x10: _R, 0x20: _R, _SW_REPORT: _I},
    (145, "RLW_TAGSTATE"): {0x1: _I, 0x2: _R, 0x10000: _I, 0x20000: _R, 0x100000: _R, _SW_REPORT: _I},
    (146, "TLW_CTRL"): {0x1: _I, 0x2: _I, 0x4: _R, _SW_REPORT: _I},
    **{
        (146, unit): _TLW_PIPE
        for unit in ("TLW_RX", "TLW_RX_PIPE0", "TLW_RX_PIPE1", "TLW_TX", "TLW_TX_PIPE0", "TLW_TX_PIPE1")
    },
    (147, "TREX"): {0x1: _I, _SW_REPORT: _I},
    (148, "NVLPW_CTRL"): {_SW_REPORT: _I},
    (148, "NVLPW"): {_SW_REPORT: _I},
    (149, "NETIR"): {0x0: _R},
    (149, "NETIR_INT"): {0x0: _R},
    (149, "NETIR_BER_EVENT"): {0x0: _I, 0x1: _I, 0x2: _I, 0x3: _I},
    (149, "NETIR_MFDE_EVENT"): {0x1: _R, 0x3: _I, 0x4: _R, 0x5: _R, 0x7: _R},
    (150, "MSE_WATCHDOG"): {0x0: _R},
}
"""(XID, unit) -> error status -> resolution. Statuses are single bits for the bitmask units (several set
bits: the worst of them) and enumerated values for NETIR_BER_EVENT and NETIR_MFDE_EVENT."""

LINK_EVENT_UNITS = frozenset({"NETIR_LINK_EVT", "NETIR_LINK_DOWN"})
LINK_DOWN_REASONS_IGNORED = frozenset({0b100110, 0b101000})
"""XID 149 link events resolved IGNORE (a link fatal caused by software or a user; by the host); every other
listed reason (intrinfo bits 20-25) is RESET_GPU."""
LINK_DOWN_REASONS_LISTED = frozenset(
    {0b000000, 0b000001, 0b000010, 0b000100, 0b001010, 0b001111, 0b010000, 0b010001, 0b010010, 0b010101}
    | {0b010110, 0b100000, 0b100001, 0b100010, 0b100011, 0b100100, 0b100101, 0b101010, 0b101011}
    | LINK_DOWN_REASONS_IGNORED
)

_LINE = re.compile(
    r"^\s*(?P<unit>[A-Z][A-Z0-9_]*)\b.*?\(\s*0x(?P<intrinfo>[0-9a-fA-F]{1,8})\s+0x(?P<status>[0-9a-fA-F]{1,8})\b"
)


@dataclass(frozen=True, slots=True)
class Decoded:
    """One NVLink5 XID line decoded: its unit, the two words, and the sheet's resolution."""

    unit: str
    intrinfo: int
    error_status: int
    resolution: Resolution

    def describe(self) -> str:
        return f"{self.unit} status 0x{self.error_status:08x}: {self.resolution.value}"


def decode(xid: int, message: str | None) -> Decoded | None:
    """The sheet's resolution for an XID 144-150 message; None when the line or the sheet does not say."""
    if message is None:
        return None
    found = _LINE.match(message)
    if found is None:
        return None
    unit = found["unit"]
    intrinfo, status = int(found["intrinfo"], 16), int(found["status"], 16)
    resolution = _resolve(xid, unit, intrinfo, status)
    return None if resolution is None else Decoded(unit, intrinfo, status, resolution)


def _resolve(xid: int, unit: str, intrinfo: int, status: int) -> Resolution | None:
    if xid == 149 and unit in LINK_EVENT_UNITS:
        reason = (intrinfo >> 20) & 0x3F
        if reason not in LINK_DOWN_REASONS_LISTED:
            return None
        return _I if reason in LINK_DOWN_REASONS_IGNORED else _R
    table = DECODE.get((xid, unit))
    if table is None:
        return None
    if status in table:
        return table[status]
    bits = [1 << n for n in range(32) if status >> n & 1]
    if not bits or any(bit not in table for bit in bits):
        return None
    return max((table[bit] for bit in bits), key=lambda resolution: resolution.rank)
