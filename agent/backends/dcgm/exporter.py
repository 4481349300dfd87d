"""dcgm-exporter as a source of readings: scrape ``/metrics`` and parse it; the checks judge the readings.

Parsing uses ``prometheus_client``'s own text parser. Series are tied to a GPU by their ``UUID`` label,
else by the ``gpu`` index (resolved to the UUID NVML gives that index). The host label is read in both
spellings (``Hostname`` before dcgm-exporter renamed it, ``hostname`` after). DCGM's "blank" values —
huge sentinel integers such as 9223372036854775794 (int64 not supported) or 2147483632 (int32 blank),
140737488355328 (float blank) — and NaN mean "no value", never a reading.

An exporter that cannot be reached, answers an error, or serves a page that is not a dcgm-exporter page
is read as ``exporter_error`` (core/dcgm.py), which checks/dcgm_readings.py judges as one ``unknown``
finding (``DCGM_EXPORTER_UNAVAILABLE``): an exporter outage is not a fault.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import structlog
from prometheus_client.parser import text_string_to_metric_families

from core.dcgm import DcgmReadings, ExporterGpu, HealthWatch
from core.snapshot import NodeSnapshot

log = structlog.get_logger(__name__)

DEFAULT_URL = "http://127.0.0.1:9400/metrics"
MAX_PAGE_BYTES = 32 * 1024 * 1024  # an 8-GPU page with pod labels is well under 1 MiB

_INT32_BLANK = 0x7FFFFFF0  # DCGM_INT32_BLANK .. +15: blank, not found, not supported, no permission
_INT64_BLANK = 0x7FFFFFFFFFFFFFF0  # DCGM_INT64_BLANK; the float parse of the text lands on 2**63
_FP64_BLANK = 140737488355328.0  # DCGM_FP64_BLANK (2**47) .. +15
_SENTINEL_SPAN = 16


class ExporterError(Exception):
    """The page could not be fetched or is not a dcgm-exporter page; the message is one line."""


def is_blank(value: float) -> bool:
    """True for NaN and DCGM's blank sentinels (int32, int64 and float64 families)."""
    if math.isnan(value) or math.isinf(value):
        return True
    return (
        _INT32_BLANK <= value < _INT32_BLANK + _SENTINEL_SPAN
        or value >= float(_INT64_BLANK)
        or _FP64_BLANK <= value < _FP64_BLANK + _SENTINEL_SPAN
    )


# --- parsing -----------------------------------------------------------------------------------------------


@dataclass
class _GpuSeries:
    """Everything one page says about one GPU, before it becomes an :class:`ExporterGpu`."""

    index: int | None = None
    uuid: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    values: dict[str, float] = field(default_factory=dict)
    xid_counts: dict[int, int] | None = None
    xid_message: str | None = None
    health: dict[str, HealthWatch] = field(default_factory=dict)

    def keep_max(self, metric: str, value: float) -> None:
        """MIG pages repeat a GPU's series per instance; the worst (largest) counter value stands."""
        held = self.values.get(metric)
        self.values[metric] = value if held is None else max(held, value)


_COUNTERS = {
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    "DCGM_FI_DEV_ROW_REMAP_PENDING",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_XID_ERRORS",
}


# The per-XID count; the first release that had it (dcgm-exporter PR 239) declared the family under this
# name but printed its samples as DCGM_FI_DEV_XID_ERRORS_ACTIVE, which the text parser then reads as a
# family of its own.
_XID_COUNT_NAMES = frozenset({"DCGM_EXP_XID_ERRORS_COUNT", "DCGM_FI_DEV_XID_ERRORS_ACTIVE"})


def parse_metrics(text: str, uuid_for_index: Mapping[int, str] | None = None) -> list[ExporterGpu]:
    """The GPUs of a dcgm-exporter page, ordered by index; ExporterError when it is not such a page."""
    per_gpu: dict[str, _GpuSeries] = {}
    seen_dcgm = False
    try:
        for family in text_string_to_metric_families(text):
            if not family.name.startswith("DCGM_"):
                continue
            seen_dcgm = True
            for sample in family.samples:
                # the parser names a counter's samples NAME_total; the family keeps the exporter's name
                if sample.name in {family.name, f"{family.name}_total"}:
                    _take(per_gpu, family.name, dict(sample.labels), float(sample.value))
    except (ValueError, TypeError, IndexError) as exc:
        raise ExporterError(f"not a Prometheus text page: {' '.join(str(exc).split())[:160]}") from None
    if not seen_dcgm:
        raise ExporterError("no DCGM_ series on the page (not a dcgm-exporter page?)")
    gpus = [_to_gpu(series, uuid_for_index or {}) for series in per_gpu.values()]
    return sorted((gpu for gpu in gpus if gpu is not None), key=lambda gpu: gpu.index)


def _take(per_gpu: dict[str, _GpuSeries], name: str, labels: dict[str, str], value: float) -> None:
    uuid = labels.get("UUID") or labels.get("uuid") or labels.get("gpu_uuid") or None
    index = _index(labels.get("gpu"))
    if uuid is None and index is None:
        return  # a node-level DCGM series (NVSwitch, CPU): not about one GPU
    key = uuid if uuid is not None else f"index:{index}"
    series = per_gpu.setdefault(key, _GpuSeries(index=index, uuid=uuid))
    series.labels.update({k: v for k, v in labels.items() if v})
    if is_blank(value):
        return
    if name in _XID_COUNT_NAMES:
        xid = _index(labels.get("xid"))
        series.xid_counts = series.xid_counts if series.xid_counts is not None else {}
        if xid is not None:
            series.xid_counts[xid] = max(series.xid_counts.get(xid, 0), int(value))
    elif name == "DCGM_EXP_GPU_HEALTH_STATUS":
        watch = labels.get("health_watch") or labels.get("system") or "ALL"
        held = series.health.get(watch)
        if held is None or value > held.value:
            series.health[watch] = HealthWatch(
                system=watch, value=value, error_code=labels.get("health_error_code") or None
            )
    elif name in _COUNTERS:
        series.keep_max(name, value)
        if name == "DCGM_FI_DEV_XID_ERRORS" and value > 0:
            series.xid_message = labels.get("err_msg") or None


def _index(text: str | None) -> int | None:
    if text is None or not text.strip().isdigit():
        return None
    return int(text.strip())


def _to_gpu(series: _GpuSeries, uuid_for_index: Mapping[int, str]) -> ExporterGpu | None:
    index = series.index
    uuid = series.uuid or (uuid_for_index.get(index) if index is not None else None)
    if uuid is None:
        uuid = f"GPU-index-{index}"  # no UUID on the page nor in the snapshot: name it by its index
    values = series.values

    def count(metric: str) -> int | None:
        value = values.get(metric)
        return int(value) if value is not None else None

    def flag(metric: str) -> bool | None:
        value = values.get(metric)
        return value > 0 if value is not None else None

    return ExporterGpu(
        index=index if index is not None else -1,
        uuid=uuid,
        name=series.labels.get("modelName"),
        pci_bus_id=series.labels.get("pci_bus_id"),
        hostname=series.labels.get("hostname") or series.labels.get("Hostname"),
        dbe_volatile=count("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"),
        dbe_aggregate=count("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL"),
        remapped_correctable=count("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"),
        remapped_uncorrectable=count("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"),
        remap_pending=flag("DCGM_FI_DEV_ROW_REMAP_PENDING"),
        remap_failure=flag("DCGM_FI_DEV_ROW_REMAP_FAILURE"),
        pcie_replays=count("DCGM_FI_DEV_PCIE_REPLAY_COUNTER"),
        last_xid=count("DCGM_FI_DEV_XID_ERRORS"),
        last_xid_message=series.xid_message,
        xid_counts=dict(series.xid_counts) if series.xid_counts is not None else None,
        health=tuple(series.health.values()),
    )


# --- fetching ----------------------------------------------------------------------------------------------


def safe_url(url: str) -> str:
    """The URL as it may be logged or printed: a ``user:password@`` part and the query are dropped."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2], query="", fragment=""))


def fetch_page(url: str, *, timeout_s: float, client: httpx.Client | None = None) -> str:
    """GET the page; ExporterError (one line, no credentials) for any failure to get a 200 text answer."""
    try:
        if client is not None:
            response = client.get(url, timeout=timeout_s)
        else:
            with httpx.Client(timeout=timeout_s, follow_redirects=False) as own:
                response = own.get(url)
    except httpx.HTTPError as exc:
        raise ExporterError(f"{safe_url(url)}: {type(exc).__name__}") from None
    if response.status_code != httpx.codes.OK:
        raise ExporterError(f"{safe_url(url)}: HTTP {response.status_code}")
    if len(response.content) > MAX_PAGE_BYTES:
        raise ExporterError(f"{safe_url(url)}: page larger than {MAX_PAGE_BYTES} bytes")
    return response.text


def read_page(location: str, *, timeout_s: float = 5.0) -> str:
    """A page from a URL (http/https) or a saved file; ExporterError for a URL, OSError for a file."""
    if location.startswith(("http://", "https://")):
        return fetch_page(location, timeout_s=timeout_s)
    return Path(location).read_text(encoding="utf-8", errors="replace")


# --- the agent's source ------------------------------------------------------------------------------------


class ExporterSource:
    """Scrapes the exporter at most every ``every_s`` seconds; its GPUs (or why not) as DCGM readings.

    Between scrapes the last reading is returned again, so a loop faster than the exporter's own
    collection interval (30 s by default) does not hammer it. Never raises.
    """

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        timeout_s: float = 5.0,
        every_s: float = 30.0,
        monotonic: Callable[[], float] = time.monotonic,
        client: httpx.Client | None = None,
    ) -> None:
        self.url = url
        self._timeout_s = timeout_s
        self._every_s = every_s
        self._monotonic = monotonic
        self._client = client or httpx.Client(timeout=timeout_s, follow_redirects=False)
        self._owns_client = client is None
        self._lock = threading.Lock()
        self._last: tuple[float, DcgmReadings] | None = None
        self._log = log.bind(url=safe_url(url))

    def read(self, snapshot: NodeSnapshot) -> DcgmReadings:
        """The latest page's GPUs (scraped now if the cached one is older than ``every_s``); GPUs without a
        UUID label get the snapshot's UUID for their index."""
        with self._lock:
            now = self._monotonic()
            if self._last is not None and now - self._last[0] < self._every_s:
                return self._last[1]
            readings = self._scrape(snapshot)
            self._last = (now, readings)
            return readings

    def _scrape(self, snapshot: NodeSnapshot) -> DcgmReadings:
        try:
            text = fetch_page(self.url, timeout_s=self._timeout_s, client=self._client)
            gpus = parse_metrics(text, {gpu.index: gpu.uuid for gpu in snapshot.gpus})
        except ExporterError as exc:
            self._log.warning("dcgm_exporter_unavailable", error=str(exc))
            return DcgmReadings(exporter_error=str(exc))
        return DcgmReadings(exporter=gpus)

    def close(self) -> None:
        if self._owns_client:
            self._client.close()


def readings_for_page(text: str, snapshot: NodeSnapshot | None) -> DcgmReadings:
    """The readings of a page already in hand (the CLI's saved file); a garbled page is an exporter_error."""
    mapping = {gpu.index: gpu.uuid for gpu in snapshot.gpus} if snapshot is not None else {}
    try:
        return DcgmReadings(exporter=parse_metrics(text, mapping))
    except ExporterError as exc:
        return DcgmReadings(exporter_error=str(exc))


def host_of(gpus: Iterable[ExporterGpu]) -> str | None:
    """The host label of the page's first GPU that has one (``hostname`` or ``Hostname``)."""
    return next((gpu.hostname for gpu in gpus if gpu.hostname), None)
