"""Prometheus metrics of one aggregator process (its own registry, so several apps can share a process).

Fleet gauges (nodes by state, open incidents, permits in use, breaker) are read from the database at scrape
time, so every aggregator behind a load balancer reports the same fleet; ingest counters and latency are
this process's own (sum them across replicas).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import case, func, select

from aggregator import permits
from aggregator.reliability_metrics import ReliabilityCollector
from aggregator.store.engine import Database
from aggregator.store.tables import alert_deliveries, fleet_control, incidents, nodes
from core.aggregator_api import STALE

UNDELIVERED = ("pending", "dead")


class AggregatorMetrics:
    """The metric objects the app updates, and the registry ``/metrics`` exposes."""

    def __init__(self, database: Database, now: Callable[[], datetime]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.reports = Counter(
            "gpuhealth_aggregator_reports",
            "Agent reports received, by result (accepted, duplicate, refused).",
            ["result"],
            registry=self.registry,
        )
        self.report_seconds = Histogram(
            "gpuhealth_aggregator_report_duration_seconds",
            "Time to validate and store one agent report.",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
            registry=self.registry,
        )
        self.permit_decisions = Counter(
            "gpuhealth_aggregator_permit_decisions",
            "Permit requests answered, by outcome (granted or the refusal code).",
            ["outcome"],
            registry=self.registry,
        )
        self.registry.register(_FleetCollector(database, now))
        self.registry.register(ReliabilityCollector(database, now))


class _FleetCollector(Collector):
    def __init__(self, database: Database, now: Callable[[], datetime]) -> None:
        self._database = database
        self._now = now

    def collect(self) -> Iterator[GaugeMetricFamily]:
        now = self._now()
        shown = case((nodes.c.stale_at <= now, STALE), else_=nodes.c.state)
        with self._database.read() as conn:
            by_state = conn.execute(select(shown, func.count()).group_by(shown)).all()
            open_incidents = conn.execute(
                select(func.count()).select_from(incidents).where(incidents.c.ended_at.is_(None))
            ).scalar_one()
            in_use = permits.permits_in_use(conn, now)
            tripped = conn.execute(
                select(fleet_control.c.breaker_tripped).where(fleet_control.c.id == 1)
            ).scalar_one()
            # Only what is not delivered: the delivered rows are the year's bulk, and the (status, sink)
            # index answers this without reading them.
            undelivered = conn.execute(
                select(alert_deliveries.c.status, alert_deliveries.c.sink, func.count())
                .where(alert_deliveries.c.status.in_(UNDELIVERED))
                .group_by(alert_deliveries.c.status, alert_deliveries.c.sink)
            ).all()
        states = GaugeMetricFamily(
            "gpuhealth_aggregator_nodes", "Known nodes by shown state.", labels=["state"]
        )
        for state, count in by_state:
            states.add_metric([str(state)], float(count))
        yield states
        yield GaugeMetricFamily(
            "gpuhealth_aggregator_open_incidents", "Incidents not yet closed.", value=open_incidents
        )
        yield GaugeMetricFamily(
            "gpuhealth_aggregator_permits_in_use", "Active remediation permits.", value=in_use
        )
        deliveries = GaugeMetricFamily(
            "gpuhealth_aggregator_alert_deliveries",
            "Alert deliveries not yet delivered, by status (pending: retried later; dead: given up), sink.",
            labels=["status", "sink"],
        )
        for status, sink, count in undelivered:
            deliveries.add_metric([str(status), str(sink)], float(count))
        yield deliveries
        yield GaugeMetricFamily(
            "gpuhealth_aggregator_breaker_tripped",
            "1 while the fleet circuit breaker is tripped.",
            value=int(tripped),
        )
