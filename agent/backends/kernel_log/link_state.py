"""NIC link state lines: ``mlx5_core 0000:3b:00.0 enp59s0f0np0: Link down`` / ``... Link up``, and ib_core's
``mlx5_core 0000:08:00.0 mlx5_0: Port: 1 Link DOWN`` / ``... Link ACTIVE``.

mlx5's Ethernet side prints the first through ``netdev_info`` when the carrier changes (mlx5e_update_carrier
in drivers/net/ethernet/mellanox/mlx5/core/en_main.c), so the prefix is the driver, the PCI function and the
interface. ib_core prints the second through ``ibdev_info`` when a port's logical state changes
(``ib_cache_update`` in drivers/infiniband/core/cache.c, Linux 6.15 and later): the only kernel-log sign of a
pure InfiniBand port, which has no netdev. ``DOWN`` is a link down and ``ACTIVE`` / ``ACTIVE_DEFER`` a link
up; ``INIT`` and ``ARMED`` are steps on the way up and are not link changes. These lines are the kernel-log
half of link-flap detection (the other half is the port's ``link_downed`` counter); the fabric checks count
the downs per port in a window.
"""

from __future__ import annotations

import re

from agent.backends.kernel_log.text_lines import logged_by_a_program
from agent.backends.kernel_log.timestamps import absolute_time
from core.snapshot import LinkEvent

_LINK = re.compile(
    r"\bmlx5_core\s+(?P<pci>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+(?P<netdev>[^\s:]+):\s+"
    r"Link (?P<state>up|down)\b",
    re.IGNORECASE,
)


_IB_PORT_STATE = re.compile(
    r"\b(?P<pci>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+(?P<ibdev>[^\s:]+):\s+"
    r"Port:\s*(?P<port>\d{1,3})\s+Link\s+(?P<state>ACTIVE_DEFER|ACTIVE|DOWN|INIT|ARMED|NOP)\b"
)
_IB_UP = frozenset({"ACTIVE", "ACTIVE_DEFER"})


def parse_link_line(line: str, *, year_hint: int | None = None) -> LinkEvent | None:
    """The link change a kernel-log line reports (mlx5's netdev line or ib_core's port-state line), or None
    for any other line (never raises); a line another program logged (quoting the kernel's) is None, as for
    XIDs."""
    port_state = _IB_PORT_STATE.search(line)
    if port_state is not None:
        return _port_state_event(line, port_state, year_hint)
    match = _LINK.search(line)
    if match is None or logged_by_a_program(line[: match.start()]):
        return None
    return LinkEvent(
        up=match["state"].lower() == "up",
        pci_bus_id=match["pci"],
        netdev=match["netdev"],
        message=line[match.start() :].strip(),
        at=absolute_time(line[: match.start()], year_hint=year_hint),
    )


def _port_state_event(line: str, match: re.Match[str], year_hint: int | None) -> LinkEvent | None:
    state = match["state"]
    start = line.rfind(" ", 0, max(0, match.start() - 1)) + 1  # the driver's name before the PCI address
    if (state not in _IB_UP and state != "DOWN") or logged_by_a_program(line[:start]):
        return None
    return LinkEvent(
        up=state in _IB_UP,
        pci_bus_id=match["pci"],
        ib_device=match["ibdev"],
        port=int(match["port"]),
        message=line[start:].strip(),
        at=absolute_time(line[:start], year_hint=year_hint),
    )
