"""The reliability report's figures as Prometheus gauges (30 days, by GPU model), computed at most once a
minute at scrape time so every aggregator behind a load balancer reports the same fleet."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime, timedelta

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from aggregator.reliability import reliability
from aggregator.store.engine import Database
from core.aggregator_api import ReliabilityReport

WINDOW = timedelta(days=30)
CACHE = timedelta(seconds=60)


class ReliabilityCollector(Collector):
    """``gpuhealth_fleet_health_ratio`` and the per-model incidents, MTBI, MTTR and GPU-hours out."""

    def __init__(self, database: Database, now: Callable[[], datetime], repeat_after: int = 3) -> None:
        self._database, self._now, self._repeat_after = database, now, repeat_after
        self._cached: tuple[datetime, ReliabilityReport] | None = None

    def _report(self) -> ReliabilityReport:
        now = self._now()
        if self._cached is not None and now - self._cached[0] < CACHE:
            return self._cached[1]
        with self._database.read() as conn:
            report = reliability(conn, now, since=now - WINDOW, by="model", repeat_after=self._repeat_after)
        self._cached = (now, report)
        return report

    def collect(self) -> Iterator[GaugeMetricFamily]:
        report = self._report()
        yield GaugeMetricFamily(
            "gpuhealth_fleet_health_ratio",
            "1 - GPU-hours out of service / GPU-hours observed over the last 30 days (1 is a perfect fleet).",
            value=report.fleet_health_ratio if report.fleet_health_ratio is not None else 1.0,
        )
        incidents = GaugeMetricFamily(
            "gpuhealth_reliability_incidents", "Incidents opened in the last 30 days.", labels=["model"]
        )
        mtbi = GaugeMetricFamily(
            "gpuhealth_reliability_mtbi_hours", "Mean time between incidents (30 days).", labels=["model"]
        )
        mttr = GaugeMetricFamily(
            "gpuhealth_reliability_mttr_hours",
            "Mean time to repair, fault to release (30 days).",
            labels=["model"],
        )
        out = GaugeMetricFamily(
            "gpuhealth_reliability_gpu_hours_out",
            "GPU-hours out of service in the last 30 days, by fault class and action.",
            labels=["model", "fault_class", "action"],
        )
        shares = GaugeMetricFamily(
            "gpuhealth_reliability_action_share",
            "Share of the last 30 days' incidents that needed a reset, a reboot or a replacement.",
            labels=["model", "action"],
        )
        for group in report.groups:
            incidents.add_metric([group.key], float(group.incidents))
            if group.mtbi_hours is not None:
                mtbi.add_metric([group.key], group.mtbi_hours)
            if group.mttr_hours is not None:
                mttr.add_metric([group.key], group.mttr_hours)
            for fault, hours in group.gpu_hours_out_by_class.items():
                out.add_metric([group.key, fault, ""], hours)
            for action, hours in group.gpu_hours_out_by_action.items():
                out.add_metric([group.key, "", action], hours)
            for action, share in (
                ("reset", group.reset_share),
                ("reboot", group.reboot_share),
                ("replace", group.replace_share),
            ):
                if share is not None:
                    shares.add_metric([group.key, action], share)
        yield from (incidents, mtbi, mttr, out, shares)
