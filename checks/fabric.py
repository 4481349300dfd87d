"""The fabric beyond the GPU: InfiniBand / RoCE ports, the GPUs' NVLink fabric, NVSwitch SXids.

Two halves, both pure:

* :func:`check_fabric` judges one snapshot (it runs with every other check): ``IB_PORT_DOWN`` (a port not
  ``4: ACTIVE`` / ``5: LinkUp`` that should be up: the configured count, or, unset, a port down while more
  of its link-layer siblings are up), ``IB_DEVICE_MISSING`` (fewer RDMA devices than configured),
  ``NVLINK_FABRIC_NOT_READY`` / ``NVLINK_FABRIC_FAILED`` (a GPU in an NVSwitch fabric whose registration is
  not completed, or completed with an error), ``NVSWITCH_SXID_FATAL`` / ``NVSWITCH_SXID_NONFATAL``.
* :func:`judge_fabric_trends` needs earlier readings, passed in as a small :class:`FabricMemory` and handed
  back updated: ``IB_LINK_FLAP`` (link downs of a port in a window, from ``link_downed`` increases and the
  kernel log's mlx5 ``Link down`` lines, whichever counts more), ``IB_ERROR_RATE`` (error counters'
  increase within a window over a threshold: rates, not lifetime totals; a counter that went backwards was
  reset, by a driver reload or a reboot, and counts from zero) and ``IB_DEVICE_MISSING`` for a device that
  was listed and is gone. The agent keeps the memory (``agent/fabric_trends.py``).

A port fault (check family ``infiniband``) breaks jobs that span nodes, not work that stays on one node:
the check family is that label (docs/fabric.md). NVLink fabric and NVSwitch faults (family ``nvswitch``)
break multi-GPU work inside the node too. A missing sysfs tree (``ib_ports`` null) or NVML without fabric
support (``fabric`` null) is no signal, never a fault.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from checks.base import gpu_finding, warn_or_fail
from checks.config import ChecksConfig, FabricConfig
from core.findings import SHARED_CAUSE_CODES, Action, Finding, Status
from core.snapshot import GpuSnapshot, IbPort, LinkEvent, NodeSnapshot, SxidEvent

FABRIC_DOWN_CODE = SHARED_CAUSE_CODES[0]
INFINIBAND = "infiniband"
"""Check family of the port faults: they break multi-node jobs only (the label policy routes on)."""
NVSWITCH = "nvswitch"
"""Check family of NVLink fabric and NVSwitch faults: they break multi-GPU work on the node itself."""

ACTIVE_STATE = 4  # "4: ACTIVE" (IB_PORT_ACTIVE)
LINK_UP_PHYS_STATE = 5  # "5: LinkUp" (IB_PORT_PHYS_STATE_LINK_UP)
FABRIC_NOT_SUPPORTED = 0  # NVML_GPU_FABRIC_STATE_NOT_SUPPORTED: no signal, whoever saved it
FABRIC_COMPLETED = 3  # NVML_GPU_FABRIC_STATE_COMPLETED
_FABRIC_STATES = {1: "not started", 2: "in progress", 3: "completed"}
FABRIC_UNHEALTHY = 2  # NVML_GPU_FABRIC_HEALTH_SUMMARY_UNHEALTHY
FABRIC_LIMITED_CAPACITY = 3  # NVML_GPU_FABRIC_HEALTH_SUMMARY_LIMITED_CAPACITY


PORT_COUNTER_BITS: dict[str, int] = {
    "symbol_error": 16,
    "link_error_recovery": 8,
    "link_downed": 8,
    "port_rcv_errors": 16,
    "port_rcv_remote_physical_errors": 16,
    "port_rcv_switch_relay_errors": 16,
    "port_xmit_discards": 16,
    "port_xmit_constraint_errors": 8,
    "port_rcv_constraint_errors": 8,
    "local_link_integrity_errors": 4,
    "excessive_buffer_overrun_errors": 4,
    "VL15_dropped": 16,
}
"""Widths of the standard port counters in ``counters/`` (the kernel's ``drivers/infiniband/core/sysfs.c``,
PortCounters of the IB specification). They saturate: at ``2**bits - 1`` they stop, never wrap."""


def saturated_counters(port: IbPort, names: Iterable[str]) -> list[str]:
    """The watched standard counters of a port pinned at their maximum, as ``name at value (N-bit)``.

    A pinned counter's increase is 0 forever, so flap and error-rate detection on it are blind. A counter
    of the same name in ``hw_counters/`` (the driver's own, 64-bit) is the one read then, and is never pinned.
    """
    standard = port.counters or {}
    wider = port.hw_counters or {}
    pinned: list[str] = []
    for name in sorted(set(names)):
        bits = PORT_COUNTER_BITS.get(name)
        value = standard.get(name)
        if bits is None or value is None or name in wider:
            continue
        if value >= (1 << bits) - 1:
            pinned.append(f"{name} at {value} ({bits}-bit)")
    return pinned


def state_number(text: str | None) -> int | None:
    """The number of a sysfs state string (``"4: ACTIVE"`` -> 4); None when it has none."""
    if text is None:
        return None
    head = text.split(":", 1)[0].strip()
    return int(head) if head.isdigit() else None


def port_up(port: IbPort) -> bool | None:
    """True when ACTIVE and LinkUp, False when either says otherwise, None when neither was readable."""
    state, phys = state_number(port.state), state_number(port.phys_state)
    if state is None and phys is None:
        return None
    return state in (None, ACTIVE_STATE) and phys in (None, LINK_UP_PHYS_STATE)


def port_key(port: IbPort) -> str:
    """How findings and the memory name a port: ``mlx5_0/1``."""
    return f"{port.device}/{port.port}"


def watched_ports(ports: Iterable[IbPort], settings: FabricConfig) -> list[IbPort]:
    """The ports not left out by ``ignore_port_patterns`` (matched on ``device/port`` and the netdev)."""
    patterns = [re.compile(pattern) for pattern in settings.ignore_port_patterns]
    return [
        port
        for port in ports
        if not any(
            pattern.search(port_key(port)) or (port.netdev and pattern.search(port.netdev))
            for pattern in patterns
        )
    ]


def check_fabric(snapshot: NodeSnapshot, config: ChecksConfig) -> list[Finding]:
    """Everything one snapshot says about the fabric (see the module docstring)."""
    settings = config.fabric
    if not settings.enabled:
        return []
    findings: list[Finding] = []
    readings = snapshot.fabric
    if readings is not None and readings.ib_ports is not None:
        watched = watched_ports(readings.ib_ports, settings)
        findings.extend(_ports_down(snapshot.node, watched, settings))
        findings.extend(_devices_missing(readings.ib_ports, settings))
        findings.extend(_saturated(watched, settings))
    findings.extend(finding for gpu in snapshot.gpus if (finding := _gpu_fabric(gpu, settings)))
    if readings is not None:
        findings.extend(_sxids(readings.sxid_events, settings))
    return findings


INIT_STATE = 2  # "2: INIT": physically up, never configured by a subnet manager


def _fabric_down(node: str, ports: list[IbPort], settings: FabricConfig) -> list[Finding]:
    """``IB_FABRIC_DOWN``: every InfiniBand port of the node down or stuck in INIT, as when the subnet manager
    is gone. Reported whatever ``expected_active_ports`` says (no sibling is up to infer from); the aggregator
    takes it for a shared cause when several nodes report it (its breaker), never for a node to drain."""
    infiniband = [port for port in ports if (port.link_layer or "InfiniBand") == "InfiniBand"]
    if not infiniband or any(port_up(port) is not False for port in infiniband):
        return []
    stuck = [port for port in infiniband if state_number(port.state) == INIT_STATE]
    why = "stuck in INIT (no subnet manager?)" if len(stuck) == len(infiniband) else "down or stuck in INIT"
    listed = ", ".join(
        f"{port_key(port)} ({port.state or '?'} / {port.phys_state or '?'})" for port in infiniband
    )
    return [
        _node_finding(
            INFINIBAND,
            code=FABRIC_DOWN_CODE,
            message=f"{node}: every InfiniBand port {why}: {listed}",
            action=settings.port_down_action,
        )
    ]


def _ports_down(node: str, ports: list[IbPort], settings: FabricConfig) -> list[Finding]:
    fabric_down = _fabric_down(node, ports, settings)
    if fabric_down:  # the whole fabric, not one port: one finding says so
        return fabric_down
    states = [(port, port_up(port)) for port in ports]
    down = [port for port, up in states if up is False]
    if not down:
        return []
    if settings.expected_active_ports is not None:
        active = sum(1 for _, up in states if up)
        if active >= settings.expected_active_ports:
            return []
        why = f"{active} of {settings.expected_active_ports} expected ports active"
    elif settings.infer_from_siblings:
        down = [port for port in down if _siblings_mostly_up(port, states)]
        if not down:
            return []
        why = "while its sibling ports are up"
    else:
        return []
    listed = ", ".join(f"{port_key(port)} ({port.state or '?'} / {port.phys_state or '?'})" for port in down)
    action = settings.port_down_action
    return [
        _node_finding(
            INFINIBAND,
            code="IB_PORT_DOWN",
            message=f"{node}: IB/RoCE port(s) down {why}: {listed}",
            action=action,
        )
    ]


def _saturated(ports: list[IbPort], settings: FabricConfig) -> list[Finding]:
    """``IB_COUNTER_SATURATED`` (unknown): the counters flap and error-rate detection read are pinned."""
    names = {"link_downed", *settings.error_thresholds}
    pinned = [
        f"{port_key(port)} {', '.join(found)}" for port in ports if (found := saturated_counters(port, names))
    ]
    if not pinned:
        return []
    return [
        Finding(
            check=INFINIBAND,
            gpu=None,
            status=Status.UNKNOWN,
            code="IB_COUNTER_SATURATED",
            message=(
                "IB port counter(s) saturated: their increase is 0, so flap / error-rate detection on them "
                f"is blind until they are reset (perfquery -R, or a driver reload): {'; '.join(pinned)}"
            ),
            action=Action.NONE,
        )
    ]


def _siblings_mostly_up(port: IbPort, states: list[tuple[IbPort, bool | None]]) -> bool:
    """More of the ports of the same link layer are up than down: this port is expected up too."""
    same = [up for other, up in states if other.link_layer == port.link_layer and up is not None]
    return sum(1 for up in same if up) > sum(1 for up in same if not up)


def _devices_missing(ports: list[IbPort], settings: FabricConfig) -> list[Finding]:
    expected = settings.expected_ib_devices
    devices = {port.device for port in ports}
    if expected is None or len(devices) >= expected:
        return []
    action = settings.device_missing_action
    return [
        _node_finding(
            INFINIBAND,
            code="IB_DEVICE_MISSING",
            message=f"{len(devices)} of {expected} expected RDMA devices listed",
            action=action,
        )
    ]


def _gpu_fabric(gpu: GpuSnapshot, settings: FabricConfig) -> Finding | None:
    fabric = gpu.fabric
    if fabric is None or fabric.state in (None, FABRIC_NOT_SUPPORTED):
        return None
    action = settings.fabric_manager_action
    if fabric.state != FABRIC_COMPLETED:
        state = _FABRIC_STATES.get(fabric.state, f"state {fabric.state}")
        detail = f"NVLink fabric registration {state} (is nvidia-fabricmanager running?)"
        code = "NVLINK_FABRIC_NOT_READY"
    elif fabric.status not in (None, 0):
        detail = f"NVLink fabric registration failed (NVML status {fabric.status})"
        code = "NVLINK_FABRIC_FAILED"
    elif fabric.health_summary == FABRIC_UNHEALTHY:
        detail = "the driver reports its NVLink fabric unhealthy"
        code = "NVLINK_FABRIC_UNHEALTHY"
    elif fabric.health_summary == FABRIC_LIMITED_CAPACITY:
        detail = "the driver reports its NVLink fabric at limited capacity (degraded bandwidth)"
        return gpu_finding(
            NVSWITCH,
            gpu,
            status=Status.WARN,
            code="NVLINK_FABRIC_DEGRADED",
            detail=detail,
            action=Action.NONE,
        )
    else:
        return None
    return gpu_finding(NVSWITCH, gpu, status=warn_or_fail(action), code=code, detail=detail, action=action)


SXID_SEVERITY_FATAL = 1
"""``Severity 1`` on the driver's follow-up line: NVSWITCH_ERROR_SEVERITY_FATAL."""


def _sxid_key(event: SxidEvent) -> tuple[int, int | None, str | None]:
    return event.sxid, event.switch, event.pci_bus_id


def _sxids(events: Iterable[SxidEvent], settings: FabricConfig) -> list[Finding]:
    fatal: list[str] = []
    other: list[str] = []
    listed = list(events)
    headers = {_sxid_key(event) for event in listed if event.severity is not None}
    for event in listed:
        text = f"SXid {event.sxid}" + (f" on nvswitch{event.switch}" if event.switch is not None else "")
        if event.severity is None:  # a detail line ("Severity 1 Engine instance ...", "Data {...}")
            # Its header line lost (a rotated or truncated log): judged by its own "Severity 1".
            if event.detail_severity == SXID_SEVERITY_FATAL and _sxid_key(event) not in headers:
                fatal.append(f"{text} (Severity 1 detail line; its header line is missing)")
            continue
        (fatal if event.severity == "fatal" else other).append(text)
    findings: list[Finding] = []
    if fatal:
        action = settings.sxid_fatal_action
        findings.append(
            _node_finding(
                NVSWITCH,
                code="NVSWITCH_SXID_FATAL",
                message="fatal NVSwitch error(s): " + ", ".join(fatal),
                action=action,
            )
        )
    if other:
        findings.append(
            _node_finding(
                NVSWITCH,
                code="NVSWITCH_SXID_NONFATAL",
                message="non-fatal NVSwitch error(s): " + ", ".join(other),
                action=Action.NONE,
            )
        )
    return findings


def _node_finding(check: str, *, code: str, message: str, action: Action) -> Finding:
    """A node-level fabric finding; its status follows its action (warn, fail when it takes the node out)."""
    return Finding(
        check=check, gpu=None, status=warn_or_fail(action), code=code, message=message, action=action
    )


# --- judged over time -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PortHistory:
    """One port lately: its last counter reading, the counters' increases in time buckets covering the
    windows (bounded: at most ``BUCKETS_PER_WINDOW`` per flap window), and kernel-log link-down times."""

    last: Mapping[str, int] = field(default_factory=dict)
    buckets: tuple[tuple[datetime, Mapping[str, int]], ...] = ()
    downs: tuple[datetime, ...] = ()


@dataclass(frozen=True)
class FabricMemory:
    """The fabric readings the trends need, per port (``mlx5_0/1``), and the devices ever listed."""

    ports: Mapping[str, PortHistory] = field(default_factory=dict)
    devices: frozenset[str] = frozenset()


def judge_fabric_trends(
    snapshot: NodeSnapshot, config: ChecksConfig, memory: FabricMemory
) -> tuple[list[Finding], FabricMemory]:
    """Flaps, error rates and vanished devices from this snapshot and the memory; the memory updated."""
    settings = config.fabric
    readings = snapshot.fabric
    if not settings.enabled or readings is None or snapshot.taken_at is None:
        return [], memory
    now = snapshot.taken_at
    ports = readings.ib_ports or []
    devices = frozenset(port.device for port in ports)
    findings = _vanished(memory.devices - devices, settings)
    histories: dict[str, PortHistory] = {}
    flapping: list[str] = []
    noisy: list[str] = []
    for port in watched_ports(ports, settings):
        key = port_key(port)
        history = _advance(memory.ports.get(key, PortHistory()), port, readings.link_events, now, settings)
        histories[key] = history
        flaps = max(
            len(history.downs), _increase(history, "link_downed", now, settings.flap_window_s, settings)
        )
        if flaps >= settings.flap_threshold:
            flapping.append(f"{key} ({flaps} link downs in {settings.flap_window_s:.0f} s)")
        over = [
            f"{name} +{increase}"
            for name, limit in sorted(settings.error_thresholds.items())
            if (increase := _increase(history, name, now, settings.error_window_s, settings)) >= limit
        ]
        if over:
            noisy.append(f"{key}: {', '.join(over)}")
    if flapping:
        action = settings.flap_action
        findings.append(
            _node_finding(
                INFINIBAND,
                code="IB_LINK_FLAP",
                message="IB/RoCE link flapping: " + "; ".join(flapping),
                action=action,
            )
        )
    if noisy:
        action = settings.error_rate_action
        window = f"{settings.error_window_s:.0f} s"
        findings.append(
            _node_finding(
                INFINIBAND,
                code="IB_ERROR_RATE",
                message=f"IB/RoCE error counters over threshold in {window}: " + "; ".join(noisy),
                action=action,
            )
        )
    # A vanished device stays remembered (and reported) until it is listed again or the agent restarts.
    return findings, FabricMemory(ports=histories, devices=devices | memory.devices)


def _vanished(gone: frozenset[str], settings: FabricConfig) -> list[Finding]:
    if not gone:
        return []
    action = settings.device_missing_action
    return [
        _node_finding(
            INFINIBAND,
            code="IB_DEVICE_MISSING",
            message="RDMA device(s) vanished: " + ", ".join(sorted(gone)),
            action=action,
        )
    ]


BUCKETS_PER_WINDOW = 16
"""Increases are summed per time bucket of (the shorter window / this); memory stays bounded per port."""


def _bucket_s(settings: FabricConfig) -> float:
    return min(settings.flap_window_s, settings.error_window_s) / BUCKETS_PER_WINDOW


def _advance(
    history: PortHistory, port: IbPort, events: list[LinkEvent], now: datetime, settings: FabricConfig
) -> PortHistory:
    counters = {**(port.counters or {}), **(port.hw_counters or {})}
    # A counter lower than last time was reset (driver reload, reboot): it counts from zero.
    rises = {
        name: value - history.last[name] if value >= history.last[name] else value
        for name, value in counters.items()
        if name in history.last
    }
    width = _bucket_s(settings)
    start = datetime.fromtimestamp(now.timestamp() // width * width, tz=now.tzinfo)
    oldest = now - timedelta(seconds=max(settings.error_window_s, settings.flap_window_s) + width)
    buckets = [bucket for bucket in history.buckets if bucket[0] >= oldest]
    if any(rises.values()):
        if buckets and buckets[-1][0] == start:
            merged = dict(buckets[-1][1])
            for name, rise in rises.items():
                merged[name] = merged.get(name, 0) + rise
            buckets[-1] = (start, merged)
        else:
            buckets.append((start, {name: rise for name, rise in rises.items() if rise}))
    flap_start = now - timedelta(seconds=settings.flap_window_s)
    downs = [at for at in history.downs if at >= flap_start]
    # only downs inside the window: a line delivered late (a backlog, a restarted follower) that happened
    # long ago is not a flap now; a line without a time happened "now" as far as anyone knows
    downs.extend(
        at
        for event in events
        if not event.up and _names_port(event, port) and (at := event.at or now) >= flap_start
    )
    return PortHistory(last=counters, buckets=tuple(buckets), downs=tuple(downs))


def _names_port(event: LinkEvent, port: IbPort) -> bool:
    """Whether a link line is about this port: by its interface (mlx5 netdev lines) or by device and port
    number (ib_core's port-state lines, the only sign of an InfiniBand port, which has no interface)."""
    if port.netdev is not None and event.netdev == port.netdev:
        return True
    return event.ib_device == port.device and event.port == port.port


def _increase(history: PortHistory, name: str, now: datetime, window_s: float, settings: FabricConfig) -> int:
    """How much a counter rose in the buckets that overlap the window (a bucket counts whole)."""
    start = now - timedelta(seconds=window_s + _bucket_s(settings))
    return sum(rises.get(name, 0) for at, rises in history.buckets if at > start)


# --- a saved log, judged over its own timestamps (a post-mortem) -------------------------------------------


def judge_logged_flaps(events: Iterable[LinkEvent], config: ChecksConfig) -> list[Finding]:
    """``IB_LINK_FLAP`` from a saved kernel log alone: ``flap_threshold`` link downs of one port within any
    ``flap_window_s`` of the log's own times (``gpuhealth check --kernel-log FILE``, a post-mortem with no
    earlier reading). Ports are named as the lines name them (interface, or RDMA device and port); a down
    without a time cannot be placed in a window and is not counted."""
    settings = config.fabric
    if not settings.enabled:
        return []
    downs: dict[str, list[datetime]] = {}
    for event in events:
        if event.up or event.at is None:
            continue
        name = f"{event.ib_device}/{event.port}" if event.ib_device is not None else event.netdev
        if name is not None:
            downs.setdefault(name, []).append(event.at)
    window = timedelta(seconds=settings.flap_window_s)
    flapping: list[str] = []
    for name, times in sorted(downs.items()):
        times.sort()
        for first, at in enumerate(times):
            last = first + settings.flap_threshold - 1
            if last < len(times) and times[last] - at <= window:
                span = (times[last] - at).total_seconds()
                count = settings.flap_threshold
                flapping.append(
                    f"{name} ({count} link downs in {span:.0f} s from {at:%Y-%m-%d %H:%M:%S} UTC)"
                )
                break
    if not flapping:
        return []
    return [
        _node_finding(
            INFINIBAND,
            code="IB_LINK_FLAP",
            message="IB/RoCE link flapping (kernel log): " + "; ".join(flapping),
            action=settings.flap_action,
        )
    ]
