"""InfiniBand / RoCE ports from sysfs: ``<root>/<device>/ports/<n>/`` under ``/sys/class/infiniband``.

Read as the kernel writes it (drivers/infiniband/core/sysfs.c): ``state`` is ``"4: ACTIVE"``,
``phys_state`` ``"5: LinkUp"``, ``rate`` ``"400 Gb/sec (4X NDR)"``, ``link_layer`` ``InfiniBand`` or
``Ethernet`` (RoCE); ``counters/`` holds the standard port counters and ``hw_counters/`` the driver's own.
A missing tree means "no RDMA devices here" (``None``, no signal, never a fault); a file that cannot be read
is left out. The root is a setting, so tests and the simulator point it at a fake tree
(:mod:`sim.fakes.infiniband`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

from core.snapshot import IbPort

DEFAULT_SYSFS_ROOT: Final = Path("/sys/class/infiniband")

PORT_COUNTERS: Final[tuple[str, ...]] = (
    "link_downed",
    "link_error_recovery",
    "symbol_error",
    "port_rcv_errors",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
    "port_xmit_discards",
)
"""The standard port counters read from ``counters/`` when present (the rest are traffic, not health)."""


def read_ib_ports(root: Path = DEFAULT_SYSFS_ROOT) -> list[IbPort] | None:
    """Every port of every RDMA device under ``root``, sorted; None when the tree is absent."""
    base = os.fspath(root)
    try:
        devices = sorted(entry.name for entry in os.scandir(base))
    except OSError:
        return None
    ports: list[IbPort] = []
    for device in devices:
        ports.extend(_device_ports(f"{base}/{device}", device))
    return ports


def _device_ports(path: str, device: str) -> list[IbPort]:
    try:
        numbers = sorted(int(entry.name) for entry in os.scandir(f"{path}/ports") if entry.name.isdigit())
    except OSError:
        return []
    netdevs = _netdevs(path)
    return [_port(f"{path}/ports/{number}", device, number, netdevs.get(number)) for number in numbers]


def _port(path: str, device: str, number: int, netdev: str | None) -> IbPort:
    return IbPort(
        device=device,
        port=number,
        state=_text(f"{path}/state"),
        phys_state=_text(f"{path}/phys_state"),
        rate=_text(f"{path}/rate"),
        link_layer=_text(f"{path}/link_layer"),
        netdev=netdev,
        counters=_counters(f"{path}/counters", PORT_COUNTERS),
        hw_counters=_counters(f"{path}/hw_counters", None),
    )


def _text(path: str) -> str | None:
    """A sysfs attribute's value, stripped; None when it cannot be read (os.read: sysfs files are small)."""
    try:
        descriptor = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        raw = os.read(descriptor, 4096)
    except OSError:
        return None
    finally:
        os.close(descriptor)
    return raw.decode("ascii", errors="replace").strip() or None


def _counters(path: str, names: tuple[str, ...] | None) -> dict[str, int] | None:
    """The integer counters in a directory (only ``names`` when given); None when it does not exist."""
    try:
        present = sorted(entry.name for entry in os.scandir(path) if entry.is_file())
    except OSError:
        return None
    wanted = present if names is None else [name for name in names if name in present]
    values: dict[str, int] = {}
    for name in wanted:
        text = _text(f"{path}/{name}")
        if text is not None and text.isdigit():
            values[name] = int(text)
    return values


def _netdevs(device_path: str) -> dict[int, str]:
    """Port number -> network interface, from ``device/net/<if>/dev_port`` (0-based) when the tree has it."""
    found: dict[int, str] = {}
    try:
        interfaces = sorted(entry.name for entry in os.scandir(f"{device_path}/device/net"))
    except OSError:
        return found
    for interface in interfaces:
        text = _text(f"{device_path}/device/net/{interface}/dev_port")
        port = int(text) + 1 if text is not None and text.isdigit() else 1
        found.setdefault(port, interface)
    return found
