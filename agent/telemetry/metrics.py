"""The agent's Prometheus metrics, in a registry of its own (many agents share one process in the demo).

Names are prefixed ``gpuhealth_agent_``; every series carries the ``node`` label so that the demo's and the
benchmarks' agents can be told apart when their registries are scraped together.
"""

from __future__ import annotations

from collections import Counter as TallyCounter
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from core.findings import Finding, Status, Verdict, worst_status
from core.snapshot import NodeSnapshot
from core.steps import ApplyReport

if TYPE_CHECKING:
    from agent.uplink.outbox import OutboxStats

GPU_HEALTH_VALUE: dict[Status, int] = {Status.OK: 0, Status.WARN: 1, Status.FAIL: 2, Status.UNKNOWN: 3}
"""The per-GPU health gauge: the Nagios exit-code convention (0 ok, 1 warn, 2 fail, 3 unknown)."""

LOOP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# Fault to taint: the target is under a second for XIDs; polled faults wait for their debounce readings.
TAINT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
DRAIN_OUTCOMES = ("complete", "incomplete", "failed")


class AgentMetrics:
    """The metrics of one agent; :meth:`record_tick` updates them all from one loop pass."""

    def __init__(self, node: str, registry: CollectorRegistry | None = None) -> None:
        self.node = node
        self.registry = registry if registry is not None else CollectorRegistry()
        self.gpu_health = Gauge(
            "gpuhealth_agent_gpu_health",
            "Health of each GPU: 0 ok, 1 warn, 2 fail, 3 unknown.",
            ["node", "gpu", "index"],
            registry=self.registry,
        )
        self.findings = Gauge(
            "gpuhealth_agent_findings",
            "Findings of the latest verdict, by code and status.",
            ["node", "code", "status"],
            registry=self.registry,
        )
        self.xids = Counter(
            "gpuhealth_agent_xid_events",
            "XID events seen, by XID code.",
            ["node", "xid"],
            registry=self.registry,
        )
        self.loop_duration = Histogram(
            "gpuhealth_agent_loop_duration_seconds",
            "Duration of one loop pass: snapshot, checks, state machine, plan, apply.",
            ["node"],
            buckets=LOOP_BUCKETS,
            registry=self.registry,
        )
        self.last_good_snapshot = Gauge(
            "gpuhealth_agent_last_good_snapshot_timestamp_seconds",
            "Unix time of the latest snapshot NVML answered.",
            ["node"],
            registry=self.registry,
        )
        self.actions = Counter(
            "gpuhealth_agent_actions",
            "Plan steps executed, by step type and result (ok, failed, dry_run).",
            ["node", "action", "result"],
            registry=self.registry,
        )
        self.tick_errors = Counter(
            "gpuhealth_agent_tick_errors",
            "Loop passes that raised an unexpected error (logged; the loop goes on).",
            ["node"],
            registry=self.registry,
        )
        self.fault_to_taint = Histogram(
            "gpuhealth_agent_fault_to_taint_seconds",
            "From the first reading of an incident's fault to our taint on the node, once per incident.",
            ["node"],
            buckets=TAINT_BUCKETS,
            registry=self.registry,
        )
        self.drains = Counter(
            "gpuhealth_agent_drains",
            "Drains of this node that ended, by outcome: complete, incomplete (pods left at the deadline, or "
            "evictions refused) or failed (could not run).",
            ["node", "outcome"],
            registry=self.registry,
        )
        for outcome in DRAIN_OUTCOMES:  # present at 0 from the start, so rate() and alerts see the series
            self.drains.labels(node, outcome)
        self._gpu_labels: set[tuple[str, str]] = set()
        self._finding_labels: set[tuple[str, str]] = set()

    def record_tick(
        self, snapshot: NodeSnapshot, verdict: Verdict, report: ApplyReport, *, seconds: float, dry_run: bool
    ) -> None:
        """Update every metric from one loop pass."""
        self.loop_duration.labels(self.node).observe(seconds)
        if snapshot.nvml_error is None and snapshot.taken_at is not None:
            self.last_good_snapshot.labels(self.node).set(snapshot.taken_at.timestamp())
        self._count_xids(snapshot)
        self._set_gpu_health(snapshot, verdict.findings)
        self._set_findings(verdict.findings)
        for result in report.results:
            outcome = "dry_run" if dry_run else ("ok" if result.ok else "failed")
            self.actions.labels(self.node, type(result.step).__name__, outcome).inc()

    def record_taint(self, seconds: float) -> None:
        """An incident's fault got our taint ``seconds`` after its first reading."""
        self.fault_to_taint.labels(self.node).observe(max(seconds, 0.0))

    def record_drain_end(self, outcome: str) -> None:
        """A drain of this node ended (``complete``, ``incomplete`` or ``failed``)."""
        self.drains.labels(self.node, outcome).inc()

    def record_tick_error(self) -> None:
        """Count a loop pass that raised."""
        self.tick_errors.labels(self.node).inc()

    def watch_outbox(self, stats: Callable[[], OutboxStats]) -> None:
        """Export the report outbox's counts, read from ``stats`` at each scrape (the sender thread and the
        loop change them; reading at scrape time needs no hook in either)."""
        self.registry.register(_OutboxCollector(self.node, stats))

    def watch_detectors(self, stats: Callable[[], Mapping[str, DetectorCounts]]) -> None:
        """Export the watchdog's stalls per detector (NVML, dcgm-exporter, dcgmi), read at each scrape."""
        self.registry.register(_DetectorCollector(self.node, stats))

    def _count_xids(self, snapshot: NodeSnapshot) -> None:
        events = [*snapshot.unattributed_xid_events]
        for gpu in snapshot.gpus:
            events.extend(gpu.xid_events)
        for xid, count in TallyCounter(event.xid for event in events).items():
            self.xids.labels(self.node, str(xid)).inc(count)

    def _set_gpu_health(self, snapshot: NodeSnapshot, findings: Iterable[Finding]) -> None:
        by_gpu: dict[str, list[Status]] = {}
        for finding in findings:
            if finding.gpu is not None:
                by_gpu.setdefault(finding.gpu, []).append(finding.status)
        current = {(gpu.uuid, str(gpu.index)) for gpu in snapshot.gpus}
        for uuid, index in self._gpu_labels - current:  # a GPU gone from NVML: drop its stale series
            self.gpu_health.remove(self.node, uuid, index)
        for gpu in snapshot.gpus:
            status = worst_status(by_gpu.get(gpu.uuid, []))
            self.gpu_health.labels(self.node, gpu.uuid, str(gpu.index)).set(GPU_HEALTH_VALUE[status])
        self._gpu_labels = current

    def _set_findings(self, findings: Iterable[Finding]) -> None:
        tally = TallyCounter((finding.code, finding.status.value) for finding in findings)
        for code, status in self._finding_labels - set(tally):
            self.findings.remove(self.node, code, status)
        for (code, status), count in tally.items():
            self.findings.labels(self.node, code, status).set(count)
        self._finding_labels = set(tally)


class _OutboxCollector(Collector):
    """``gpuhealth_agent_outbox_*``: reports waiting, dropped to stay bounded, unreadable files set aside."""

    def __init__(self, node: str, stats: Callable[[], OutboxStats]) -> None:
        self._node = node
        self._stats = stats

    def collect(self) -> Iterator[Metric]:
        stats = self._stats()
        queued = GaugeMetricFamily(
            "gpuhealth_agent_outbox_reports",
            "Reports waiting in the outbox for the aggregator.",
            labels=["node"],
        )
        queued.add_metric([self._node], stats.queued)
        dropped = CounterMetricFamily(
            "gpuhealth_agent_outbox_dropped_reports",
            "Reports dropped to keep the outbox within aggregator.outbox_max_reports (heartbeats first).",
            labels=["node"],
        )
        dropped.add_metric([self._node], stats.dropped)
        set_aside = CounterMetricFamily(
            "gpuhealth_agent_outbox_set_aside",
            "Unreadable outbox files moved aside at start (outbox.json.corrupt-<UTC timestamp>).",
            labels=["node"],
        )
        set_aside.add_metric([self._node], stats.set_aside)
        rejected = CounterMetricFamily(
            "gpuhealth_agent_outbox_rejected_reports",
            "Reports the aggregator refused for good (HTTP 4xx), set aside as outbox.json.rejected-<time>.",
            labels=["node"],
        )
        rejected.add_metric([self._node], stats.rejected)
        yield from (queued, dropped, set_aside, rejected)


class DetectorCounts(Protocol):
    """What the watchdog says of one detector (``agent.sources.watchdog.DetectorStats``)."""

    @property
    def stalls(self) -> int: ...

    @property
    def stalled_s(self) -> float: ...


class _DetectorCollector(Collector):
    """``gpuhealth_agent_detector_stalls`` and ``gpuhealth_agent_detector_stalled_seconds`` per detector."""

    def __init__(self, node: str, stats: Callable[[], Mapping[str, DetectorCounts]]) -> None:
        self._node = node
        self._stats = stats

    def collect(self) -> Iterator[Metric]:
        stalls = CounterMetricFamily(
            "gpuhealth_agent_detector_stalls",
            "Detector calls (NVML, dcgm-exporter, dcgmi) that missed the watchdog's deadline.",
            labels=["node", "detector"],
        )
        stalled = GaugeMetricFamily(
            "gpuhealth_agent_detector_stalled_seconds",
            "How long the detector's current call has hung past its deadline (0: answering).",
            labels=["node", "detector"],
        )
        for detector, counts in sorted(self._stats().items()):
            stalls.add_metric([self._node, detector], counts.stalls)
            stalled.add_metric([self._node, detector], counts.stalled_s)
        yield from (stalls, stalled)
