"""The peer comparison as it was before its statistics were taken once per population: the oracle of
``test_compare_optimised.py``, which checks that the faster comparison finds exactly what this one finds.

Every GPU here is judged against statistics computed anew for it (the median, MAD and usual link of its
whole population for each GPU), which is correct and quadratic in the group's size. Kept as it was apart from
this docstring and its imports; it reuses the product's data classes so the two results compare equal.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from statistics import median

from aggregator.peer_settings import PeerSettings
from aggregator.peers.compare import Comparison, PeerGpu, PeerGroup, PeerOutlier
from aggregator.peers.stats import mode_share, robust_z

PCIE_LINK = "PEER_PCIE_LINK"
SM_CLOCK = "PEER_SM_CLOCK"
POWER_LIMIT = "PEER_POWER_LIMIT"
TEMPERATURE = "PEER_TEMPERATURE"
PCIE_REPLAYS = "PEER_PCIE_REPLAYS"
NVLINK_ERRORS = "PEER_NVLINK_ERRORS"
PCIE_REPLAY_RATE = "PEER_PCIE_REPLAY_RATE"
NVLINK_ERROR_RATE = "PEER_NVLINK_ERROR_RATE"

# Clocks event reasons that explain low clocks (idle and application clocks do not).
_REASON_NAMES = {
    0x4: "SW power cap",
    0x8: "HW slowdown",
    0x20: "SW thermal",
    0x40: "HW thermal",
    0x80: "HW power brake",
}


def compare(gpus: Iterable[PeerGpu], settings: PeerSettings) -> Comparison:
    """Every GPU against the others of its model and driver."""
    groups: dict[tuple[str, str], list[PeerGpu]] = defaultdict(list)
    for gpu in gpus:
        groups[gpu.group].append(gpu)
    outliers: list[PeerOutlier] = []
    summary: list[PeerGroup] = []
    for (model, driver), members in sorted(groups.items()):
        busy = [gpu for gpu in members if _busy(gpu, settings)]
        judged = len(members) - 1 >= settings.min_peers
        summary.append(PeerGroup(model, driver, len(members), len(busy), judged))
        if not judged:
            continue
        found = _Group(members, busy, settings, driver)
        outliers += found.links() + found.clocks() + found.power_limits() + found.temperatures()
        outliers += found.counters(PCIE_REPLAYS) + found.counters(NVLINK_ERRORS)
        outliers += found.rates(PCIE_REPLAY_RATE) + found.rates(NVLINK_ERROR_RATE)
    outliers.sort(key=lambda item: (item.node, item.index, item.code))
    return Comparison(outliers, summary)


def _busy(gpu: PeerGpu, settings: PeerSettings) -> bool:
    utilization = gpu.readings.utilization_pct
    return utilization is not None and utilization >= settings.busy_utilization_pct


def _link_text(gen: int | None, width: int | None) -> str:
    return f"Gen{gen} x{width}" if gen is not None else f"x{width}"


def _reasons_text(mask: int | None) -> str:
    if mask is None:
        return "throttle reasons unknown"
    names = [name for bit, name in _REASON_NAMES.items() if mask & bit]
    return f"reason: {', '.join(names)}" if names else "no throttle reason reported"


class _Group:
    """The GPUs of one model and driver, and the tests of one pass over them."""

    def __init__(
        self, members: list[PeerGpu], busy: list[PeerGpu], settings: PeerSettings, driver: str
    ) -> None:
        self.members, self.busy, self.settings, self.driver = members, busy, settings, driver

    def outlier(
        self, gpu: PeerGpu, code: str, evidence: str, *, value: float, peer_value: float, peers: int
    ) -> PeerOutlier:
        return PeerOutlier(
            gpu.node, gpu.index, gpu.uuid, gpu.model, self.driver, code, evidence, value, peer_value, peers
        )

    def links(self) -> list[PeerOutlier]:
        """Under load, (generation, width) against the busy peers; idle (the link may drop its generation
        to save power), the width against every peer."""
        found = []
        busy_links = [(g.readings.pcie_gen, g.readings.pcie_width) for g in self.busy]
        busy_links_known = [link for link in busy_links if None not in link]
        widths = [g.readings.pcie_width for g in self.members if g.readings.pcie_width is not None]
        busy_ids = {id(gpu) for gpu in self.busy}
        for gpu in self.members:
            mine = (gpu.readings.pcie_gen, gpu.readings.pcie_width)
            if id(gpu) in busy_ids and None not in mine:
                population: Sequence[tuple[int | None, int | None]] = busy_links_known
                own: tuple[int | None, int | None] = mine
            elif gpu.readings.pcie_width is not None:
                population = [(None, width) for width in widths]
                own = (None, gpu.readings.pcie_width)
            else:
                continue
            peers = len(population) - 1
            if peers < self.settings.min_peers:
                continue
            usual, count = mode_share(population)
            if usual == own or count < self.settings.link_majority * peers:
                continue
            if not _below(own, usual):
                continue
            best = (gpu.readings.pcie_max_gen, gpu.readings.pcie_max_width)
            maximum = f" (its maximum: {_link_text(*best)})" if None not in best else ""
            evidence = (
                f"GPU {gpu.index} runs at PCIe {_link_text(*own)} while {count} of {peers} peers run "
                f"{_link_text(*usual)}{maximum}"
            )
            found.append(
                self.outlier(
                    gpu, PCIE_LINK, evidence, value=own[1] or 0, peer_value=usual[1] or 0, peers=peers
                )
            )
        return found

    def clocks(self) -> list[PeerOutlier]:
        """The SM clock under load against the busy peers' median."""
        clocked = [g for g in self.busy if g.readings.sm_clock_mhz is not None]
        if len(clocked) - 1 < self.settings.min_peers:
            return []
        clocks = [float(g.readings.sm_clock_mhz or 0) for g in clocked]
        middle = median(clocks)
        powers = [g.readings.power_w for g in clocked if g.readings.power_w is not None]
        peer_power = median(powers) if powers else None
        found = []
        for gpu, clock in zip(clocked, clocks, strict=True):
            deficit = 100.0 * (1 - clock / middle) if middle else 0.0
            if deficit < self.settings.clock_deficit_pct or robust_z(clock, clocks) > -self.settings.robust_z:
                continue
            power = gpu.readings.power_w
            limit = gpu.readings.power_limit_w
            if power is not None and peer_power is not None:
                tolerance = 0.05 * (limit or peer_power)
                same = abs(power - peer_power) <= tolerance
                where = (
                    "at the same power" if same else f"at {power:.0f} W against the peers' {peer_power:.0f} W"
                )
                where += f" ({power:.0f} W of a {limit:.0f} W limit)" if same and limit else ""
            else:
                where = "at load"
            evidence = (
                f"GPU {gpu.index}: SM clock {deficit:.0f} % below peers {where}: {clock:.0f} MHz against a "
                f"median of {middle:.0f} MHz of {len(clocked) - 1} peers under load; "
                f"{_reasons_text(gpu.readings.clocks_event_reasons)}"
            )
            found.append(
                self.outlier(gpu, SM_CLOCK, evidence, value=clock, peer_value=middle, peers=len(clocked) - 1)
            )
        return found

    def power_limits(self) -> list[PeerOutlier]:
        """The enforced power limit against the limit almost every peer has."""
        limited = [g for g in self.members if g.readings.power_limit_w is not None]
        peers = len(limited) - 1
        if peers < self.settings.min_peers:
            return []
        usual, count = mode_share([g.readings.power_limit_w or 0.0 for g in limited])
        if count < self.settings.link_majority * peers:
            return []
        found = []
        for gpu in limited:
            limit = gpu.readings.power_limit_w or 0.0
            if limit >= self.settings.power_limit_share * usual:
                continue
            evidence = (
                f"GPU {gpu.index} has a power limit of {limit:.0f} W while {count} of {peers} peers have "
                f"{usual:.0f} W"
            )
            found.append(self.outlier(gpu, POWER_LIMIT, evidence, value=limit, peer_value=usual, peers=peers))
        return found

    def temperatures(self) -> list[PeerOutlier]:
        """Temperature against peers drawing about the same power (bands of a tenth of the limit)."""
        bands: dict[int, list[PeerGpu]] = defaultdict(list)
        for gpu in self.members:
            r = gpu.readings
            if r.temperature_c is None or r.power_w is None or not r.power_limit_w:
                continue
            bands[min(9, int(10 * r.power_w / r.power_limit_w))].append(gpu)
        found = []
        for band, members in sorted(bands.items()):
            if len(members) - 1 < self.settings.min_peers:
                continue
            temperatures = [float(g.readings.temperature_c or 0) for g in members]
            middle = median(temperatures)
            for gpu, temperature in zip(members, temperatures, strict=True):
                excess = temperature - middle
                z = robust_z(temperature, temperatures)
                if excess < self.settings.temperature_excess_c or z < self.settings.robust_z:
                    continue
                limit = gpu.readings.power_limit_w or 0.0
                evidence = (
                    f"GPU {gpu.index} runs at {temperature:.0f} °C, {excess:.0f} °C hotter than the median "
                    f"of {len(members) - 1} peers at the same power ({band * limit / 10:.0f}-"
                    f"{(band + 1) * limit / 10:.0f} W)"
                )
                found.append(
                    self.outlier(
                        gpu,
                        TEMPERATURE,
                        evidence,
                        value=temperature,
                        peer_value=middle,
                        peers=len(members) - 1,
                    )
                )
        return found

    def rates(self, code: str) -> list[PeerOutlier]:
        return _rates(self, code)

    def counters(self, code: str) -> list[PeerOutlier]:
        """PCIe replays or NVLink errors since the driver loaded, against the peers' median."""

        def count(gpu: PeerGpu) -> int | None:
            return gpu.readings.pcie_replays if code == PCIE_REPLAYS else gpu.readings.nvlink_errors

        counted = [(g, c) for g in self.members if (c := count(g)) is not None]
        if len(counted) - 1 < self.settings.min_peers:
            return []
        middle = median(float(c) for _, c in counted)
        what = "PCIe replays" if code == PCIE_REPLAYS else "NVLink errors"
        found = []
        for gpu, value in counted:
            if value < self.settings.error_floor or value < self.settings.error_factor * (middle + 1):
                continue
            evidence = (
                f"GPU {gpu.index}: {value:,} {what} since the driver loaded while the median of "
                f"{len(counted) - 1} peers is {middle:,.0f}"
            )
            found.append(
                self.outlier(gpu, code, evidence, value=value, peer_value=middle, peers=len(counted) - 1)
            )
        return found


def _rates(group: _Group, code: str) -> list[PeerOutlier]:
    """PCIe replays or NVLink errors per hour (two readings apart) against the peers' median rate."""
    settings = group.settings
    rated = [(g, r) for g in group.members if (r := _rate_of(g, code)) is not None]
    if len(rated) - 1 < settings.min_peers:
        return []
    middle = median(r for _, r in rated)
    what = "PCIe replays" if code == PCIE_REPLAY_RATE else "NVLink errors"
    found = []
    for gpu, rate in rated:
        if rate < settings.error_rate_floor_per_h or rate < settings.error_factor * (middle + 1):
            continue
        evidence = (
            f"GPU {gpu.index}: {rate:,.0f} {what} an hour while the median of {len(rated) - 1} peers is "
            f"{middle:,.1f} an hour"
        )
        found.append(group.outlier(gpu, code, evidence, value=rate, peer_value=middle, peers=len(rated) - 1))
    return found


def _rate_of(gpu: PeerGpu, code: str) -> float | None:
    return gpu.replay_rate_per_h if code == PCIE_REPLAY_RATE else gpu.nvlink_rate_per_h


def _below(own: tuple[int | None, int | None], usual: tuple[int | None, int | None]) -> bool:
    """Whether a link is slower or narrower than the usual one (a faster one is no fault)."""
    gen, width = own
    usual_gen, usual_width = usual
    narrower = width is not None and usual_width is not None and width < usual_width
    slower = gen is not None and usual_gen is not None and gen < usual_gen
    return narrower or slower
