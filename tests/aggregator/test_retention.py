"""Retention (docs/aggregator.md): history older than its days is pruned, but never an open incident, its
events, or an alert that still waits to be delivered; pagination walks a long history page by page."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from live_aggregator import LiveAggregator
from sqlalchemy import func, insert, select

from aggregator.retention import prune
from aggregator.settings import load_settings
from aggregator.store.engine import open_database
from aggregator.store.tables import alert_deliveries, alerts, events, incidents, nodes
from core.clock import ManualClock

NOW = datetime(2026, 12, 3, tzinfo=UTC)
OLD = NOW - timedelta(days=400)


def _seed(database_url: str) -> None:
    settings = load_settings(environ={}, database_url=database_url, allow_anonymous=True)
    database = open_database(settings)
    with database.write() as conn:
        for name in ("gpu-node-1", "gpu-node-2"):
            conn.execute(insert(nodes).values(
                name=name, state="unhealthy", status="fail", action="reboot", orchestrator="kubernetes",
                gpu_count=8, interval_s=30.0, first_seen_at=OLD, last_report_at=OLD, stale_at=NOW, last_seq=1,
                reports_accepted=1, incident_id=None, hold=None, pending_requests=0, labels={}, gpus=[],
                findings=[],
            ))  # fmt: skip
        conn.execute(insert(incidents), [
            {"id": "inc-open", "node": "gpu-node-1", "started_at": OLD, "ended_at": None, "reasons": ["XID_79"],
             "action": "reboot"},
            {"id": "inc-closed", "node": "gpu-node-2", "started_at": OLD, "ended_at": OLD + timedelta(days=1),
             "reasons": ["XID_48"], "action": "reset_gpu"},
        ])  # fmt: skip
        conn.execute(insert(events), [
            {"at": OLD, "node": "gpu-node-1", "incident_id": "inc-open", "kind": "state", "message": "open",
             "details": {}},
            {"at": OLD, "node": "gpu-node-2", "incident_id": "inc-closed", "kind": "state", "message": "old",
             "details": {}},
            {"at": OLD, "node": None, "incident_id": None, "kind": "breaker", "message": "old", "details": {}},
            {"at": NOW, "node": "gpu-node-2", "incident_id": None, "kind": "state", "message": "new", "details": {}},
        ])  # fmt: skip
    database.dispose()


def test_pruning_keeps_open_incidents_their_events_and_undelivered_alerts(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    _seed(url)
    settings = load_settings(environ={}, database_url=url, allow_anonymous=True)
    database = open_database(settings)
    with database.write() as conn:
        for status in ("pending", "delivered"):
            inserted = conn.execute(insert(alerts).values(
                key=f"k-{status}", kind="incident", status="firing", severity="critical", group_key="g",
                node="gpu-node-2", incident_id=None, summary="s", details={}, labels={}, created_at=OLD,
                routed=True, silence_id=None,
            )).inserted_primary_key  # fmt: skip
            assert inserted is not None
            alert_id = inserted[0]
            conn.execute(insert(alert_deliveries).values(
                alert_id=alert_id, sink="pager", group_key="g", status=status, attempts=1, next_attempt_at=OLD,
                claimed_until=None, last_error=None, delivered_at=OLD if status == "delivered" else None,
            ))  # fmt: skip

    pruned = prune(database, settings, NOW)

    with database.read() as conn:
        left_events = sorted(conn.execute(select(events.c.message)).scalars())
        left_incidents = sorted(conn.execute(select(incidents.c.id)).scalars())
        left_alerts = sorted(conn.execute(select(alerts.c.key)).scalars())
        deliveries = conn.execute(select(func.count()).select_from(alert_deliveries)).scalar_one()
    database.dispose()
    assert left_events == ["new", "open"]  # the open incident's old event stays
    assert left_incidents == ["inc-open"]
    assert left_alerts == ["k-pending"] and deliveries == 1
    assert (pruned.events, pruned.incidents, pruned.alerts) == (2, 1, 1)


def test_the_client_follows_pages_of_nodes_and_events(tmp_path: Path) -> None:
    """A full page announces the next in its Link header; the client joins every page."""
    from core.aggregator_api import Report
    from tests.aggregator.builders import report

    live = LiveAggregator(tmp_path / "a.db", ManualClock(start=NOW), "t" * 40).start()
    try:
        with live.client() as client:
            for index in range(7):
                assert client.report(Report.model_validate(report(f"gpu-node-{index}", 1))).accepted
            names = [node.name for node in client.nodes(page_size=3)]
            assert names == [f"gpu-node-{index}" for index in range(7)]
            every = client.events(limit=4, all_pages=True)
            newest = client.events(limit=4)
            assert len(every) > 4 and every[-4:] == newest
            assert [event.id for event in every] == sorted(event.id for event in every)
    finally:
        live.stop()
