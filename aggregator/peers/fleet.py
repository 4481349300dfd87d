"""The peer comparison over the stored fleet: read the nodes' GPU readings, compare, alert on new outliers.

``PeerView`` keeps the latest comparison (recomputed when older than ``peers.interval_s``, or at every pass
of its thread) so the node page, the fleet page and ``gpuhealth node`` read it without comparing the whole
fleet on every request. A new outlier raises one ``peer_outlier`` alert (severity warning) whose key names
the node, the GPU and the reading: the alert outbox's unique key makes that once per cause, whichever
aggregator noticed it first. Nothing here drains; nothing quarantines unless ``peers.quarantine`` names the
reading (off by default).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import structlog
from pydantic import ValidationError
from sqlalchemy import Connection, select, update

from aggregator.alerts.raising import AlertSpec, raise_alert
from aggregator.peer_settings import PeerSettings
from aggregator.peers.compare import Comparison, PeerGpu, PeerOutlier, compare
from aggregator.peers.rates import CounterRates
from aggregator.store import requests as node_requests
from aggregator.store.engine import Database
from aggregator.store.tables import alerts, nodes
from core.aggregator_api import GpuReadings
from core.findings import Finding

log = structlog.get_logger(__name__)


def fleet_gpus(conn: Connection, now: datetime) -> list[PeerGpu]:
    """Every GPU of every node not gone stale that carries readings and a model name."""
    rows = conn.execute(
        select(nodes.c.name, nodes.c.gpus, nodes.c.last_report_at).where(nodes.c.stale_at > now)
    )
    return [gpu for row in rows for gpu in peer_gpus(row.name, row.gpus or [], at=row.last_report_at)]


def peer_gpus(node: str, stored: list[dict[str, Any]], *, at: datetime | None = None) -> list[PeerGpu]:
    """The GPUs of one stored node row as the comparison reads them."""
    found = []
    for gpu in stored:
        raw, model = gpu.get("readings"), gpu.get("name")
        if not raw or not model:
            continue
        try:
            readings = GpuReadings.model_validate(raw)
        except ValidationError:
            continue
        found.append(
            PeerGpu(node, int(gpu.get("index", 0)), str(gpu.get("uuid")), str(model), readings, at=at)
        )
    return found


def outlier_alert(outlier: PeerOutlier) -> AlertSpec:
    """The warning for one outlier; its key names node, GPU and reading, so it is raised once."""
    return AlertSpec(
        key=f"peer_outlier:{outlier.node}:{outlier.uuid}:{outlier.code}",
        kind="peer_outlier",
        severity="warning",
        group_key=f"node:{outlier.node}",
        summary=f"{outlier.node}: {outlier.evidence}",
        node=outlier.node,
        details={
            "code": outlier.code,
            "gpu": outlier.uuid,
            "index": outlier.index,
            "model": outlier.model,
            "driver": outlier.driver,
            "value": outlier.value,
            "peer_value": outlier.peer_value,
            "peers": outlier.peers,
        },
    )


QUARANTINED_BY = "aggregator (peer comparison)"


def _quarantine(conn: Connection, outlier: PeerOutlier, now: datetime) -> None:
    """The policy says this reading takes the node out: a quarantine request its agent applies, held until
    a human releases it (as a repeat offender is)."""
    reason = f"peer comparison: {outlier.evidence}"
    node_requests.create(
        conn, outlier.node, kind="quarantine", reason=reason, requested_by=QUARANTINED_BY, now=now
    )
    conn.execute(
        update(nodes)
        .where(nodes.c.name == outlier.node, nodes.c.hold.is_(None))
        .values(hold=f"quarantined by {QUARANTINED_BY}: {reason}")
    )
    conn.execute(
        update(nodes)
        .where(nodes.c.name == outlier.node)
        .values(pending_requests=node_requests.pending_count(conn, outlier.node))
    )


class PeerView:
    """The latest comparison of the fleet, and the thread that renews it and raises the alerts."""

    def __init__(self, db: Database, settings: PeerSettings, now: Callable[[], datetime]) -> None:
        self._db, self._settings, self._now = db, settings, now
        self._lock = threading.Lock()
        self._latest: tuple[datetime, Comparison] | None = None
        self._rates = CounterRates(settings.rate_window_s)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def settings(self) -> PeerSettings:
        return self._settings

    def comparison(self) -> Comparison:
        """The latest comparison, renewed when older than the interval."""
        now = self._now()
        with self._lock:
            latest = self._latest
        if latest is not None and now - latest[0] < timedelta(seconds=self._settings.interval_s):
            return latest[1]
        return self.refresh()

    def refresh(self) -> Comparison:
        """Compare the fleet now (no alerts)."""
        now = self._now()
        if not self._settings.enabled:
            result = Comparison([], [])
        else:
            with self._db.read() as conn:
                gpus = fleet_gpus(conn, now)
            with self._lock:
                gpus = self._rates.with_rates(gpus)
            result = compare(gpus, self._settings)
        with self._lock:
            self._latest = (now, result)
        return result

    def findings(self, node: str) -> list[Finding]:
        """The node's peer findings (warn, no action)."""
        return [outlier.finding() for outlier in self.comparison().outliers if outlier.node == node]

    def run_once(self) -> Comparison:
        """Compare the fleet and raise an alert for each outlier not alerted before."""
        result = self.refresh()
        if self._settings.alerts and result.outliers:
            now = self._now()
            pairs = [(outlier, outlier_alert(outlier)) for outlier in result.outliers]
            with self._db.write() as conn:
                keys = [spec.key for _outlier, spec in pairs]
                known = set(conn.execute(select(alerts.c.key).where(alerts.c.key.in_(keys))).scalars())
                for outlier, spec in pairs:
                    if spec.key in known:
                        continue
                    raise_alert(conn, spec, now)
                    if outlier.code in self._settings.quarantine:
                        _quarantine(conn, outlier, now)
        return result

    def start(self) -> None:
        if not self._settings.enabled or self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="peer-comparison", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self._settings.interval_s):
            try:
                result = self.run_once()
            except Exception:
                log.exception("peer comparison failed")
                continue
            log.debug("peer comparison", outliers=len(result.outliers), groups=len(result.groups))
