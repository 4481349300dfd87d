"""Tables (SQLAlchemy Core). Alembic migrations in ``aggregator/migrations`` create exactly these.

Times are stored as naive UTC (``UtcDateTime``) so SQLite and PostgreSQL behave the same.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy.types import TypeDecorator


class UtcDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC datetime, stored naive (SQLite has no time zones)."""

    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value
        return value.astimezone(UTC).replace(tzinfo=None)

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        assert isinstance(value, datetime)
        return value.replace(tzinfo=UTC)


# BigInteger ids that are still SQLite's rowid alias (an INTEGER PRIMARY KEY autoincrements only there).
IdType = BigInteger().with_variant(Integer(), "sqlite")

metadata = MetaData()

nodes = Table(
    "nodes",
    metadata,
    Column("name", String(253), primary_key=True),
    Column("state", String(16), nullable=False),
    Column("status", String(16), nullable=False),
    Column("action", String(32), nullable=False),
    Column("orchestrator", String(16), nullable=False),
    Column("gpu_count", Integer, nullable=False),
    Column("interval_s", Float, nullable=False),
    Column("first_seen_at", UtcDateTime, nullable=False),
    Column("last_report_at", UtcDateTime, nullable=False),
    Column(
        "stale_at", UtcDateTime, nullable=False, comment="last_report_at + stale_after_intervals * interval"
    ),
    Column("last_seq", BigInteger, nullable=False),
    Column(
        "epoch",
        String(64),
        nullable=True,
        comment="the agent's sequence epoch; a new one resets last_seq (0004)",
    ),
    Column("reports_accepted", BigInteger, nullable=False),
    Column("incident_id", String(128), nullable=True),
    Column("hold", Text, nullable=True, comment="why a human must release the node; null when not held"),
    Column("pending_requests", Integer, nullable=False, server_default="0"),
    Column("labels", JSON, nullable=False),
    Column("gpus", JSON, nullable=False),
    Column("findings", JSON, nullable=False),
    Column(
        "readings_sampled_at",
        UtcDateTime,
        nullable=True,
        comment="when the node's readings last went into the ring (0006)",
    ),
    Column(
        "readings_slot",
        Integer,
        nullable=False,
        server_default="0",
        comment="the ring slot the next sample takes (0006)",
    ),
    Column(
        "readings_after_incident",
        String(128),
        nullable=True,
        comment="the incident whose readings after its release are still being kept (0006)",
    ),
    Column(
        "readings_after_left",
        Integer,
        nullable=False,
        server_default="0",
        comment="how many more samples after that release to keep in its history (0006)",
    ),
)
Index("ix_nodes_stale_at", nodes.c.stale_at)
# Covering indexes for the fleet summary: counting 10,000 nodes by state must not read their GPU lists.
Index("ix_nodes_summary", nodes.c.state, nodes.c.stale_at, nodes.c.gpu_count)
Index("ix_nodes_hold", nodes.c.hold)

incidents = Table(
    "incidents",
    metadata,
    Column("id", String(128), primary_key=True),
    Column("node", String(253), ForeignKey("nodes.name"), nullable=False),
    Column("started_at", UtcDateTime, nullable=False),
    Column("ended_at", UtcDateTime, nullable=True),
    Column("reasons", JSON, nullable=False),
    Column("action", String(32), nullable=False),
)
Index("ix_incidents_node_started", incidents.c.node, incidents.c.started_at)
Index("ix_incidents_ended_at", incidents.c.ended_at)

events = Table(
    "events",
    metadata,
    Column("id", IdType, primary_key=True, autoincrement=True),
    Column("at", UtcDateTime, nullable=False),
    Column("node", String(253), nullable=True),
    Column("incident_id", String(128), nullable=True),
    Column("kind", String(32), nullable=False),
    Column("message", Text, nullable=False),
    Column("details", JSON, nullable=False),
)
Index("ix_events_at", events.c.at)
Index("ix_events_node_at", events.c.node, events.c.at)
Index("ix_events_incident", events.c.incident_id)
Index("ix_events_kind_at", events.c.kind, events.c.at)

# Each node's last few GPU readings (aggregator/readings_ring.py): at most RING_SIZE rows a node, one a slot.
readings_ring = Table(
    "readings_ring",
    metadata,
    Column("node", String(253), primary_key=True),
    Column("slot", Integer, primary_key=True, autoincrement=False, comment="0 .. ring size - 1"),
    Column("at", UtcDateTime, nullable=False, comment="when the report arrived"),
    Column("incident_id", String(128), nullable=True, comment="the node's open incident then"),
    Column("readings", JSON, nullable=False, comment="{gpu uuid: GpuReadings}"),
)

permits = Table(
    "permits",
    metadata,
    Column("id", IdType, primary_key=True, autoincrement=True),
    Column("node", String(253), ForeignKey("nodes.name"), nullable=False),
    Column("action", String(32), nullable=False),
    Column("incident_id", String(128), nullable=True),
    Column("granted_at", UtcDateTime, nullable=False),
    Column("expires_at", UtcDateTime, nullable=False),
    Column("released_at", UtcDateTime, nullable=True),
)
Index("ix_permits_node", permits.c.node)
Index("ix_permits_open", permits.c.released_at, permits.c.expires_at)

requests = Table(
    "requests",
    metadata,
    Column("id", IdType, primary_key=True, autoincrement=True),
    Column("node", String(253), ForeignKey("nodes.name"), nullable=False),
    Column("kind", String(16), nullable=False),
    Column("reason", Text, nullable=False),
    Column("requested_by", String(128), nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Column("applied_at", UtcDateTime, nullable=True),
    Column("status", String(16), nullable=False),
    Column("params", JSON, nullable=True, comment="kind-specific: diag level and force (migration 0003)"),
)
Index("ix_requests_node_status", requests.c.node, requests.c.status)

fleet_control = Table(
    "fleet_control",
    metadata,
    Column(
        "id", Integer, primary_key=True, autoincrement=False, comment="always 1: the row every grant locks"
    ),
    Column("breaker_tripped", Boolean, nullable=False),
    Column("tripped_at", UtcDateTime, nullable=True),
    Column("tripped_reason", Text, nullable=True),
    Column("reset_at", UtcDateTime, nullable=True),
    Column("reset_by", String(128), nullable=True),
)

# --- alerts (migration 0002) ---------------------------------------------------------------------------

alerts = Table(
    "alerts",
    metadata,
    Column("id", IdType, primary_key=True, autoincrement=True),
    Column("key", String(255), nullable=False, unique=True),
    Column("kind", String(32), nullable=False),
    Column("status", String(16), nullable=False),
    Column("severity", String(16), nullable=False),
    Column("group_key", String(255), nullable=False),
    Column("node", String(253), nullable=True),
    Column("incident_id", String(128), nullable=True),
    Column("summary", Text, nullable=False),
    Column("details", JSON, nullable=False),
    Column("labels", JSON, nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Column("silence_id", IdType, nullable=True),
    Column("routed", Boolean, nullable=False),
)
Index("ix_alerts_routed", alerts.c.routed)
Index("ix_alerts_created_at", alerts.c.created_at)

alert_deliveries = Table(
    "alert_deliveries",
    metadata,
    Column("id", IdType, primary_key=True, autoincrement=True),
    Column("alert_id", IdType, ForeignKey("alerts.id"), nullable=False),
    Column("sink", String(64), nullable=False),
    Column("group_key", String(255), nullable=False),
    Column("status", String(16), nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("next_attempt_at", UtcDateTime, nullable=False),
    Column("claimed_until", UtcDateTime, nullable=True),
    Column("last_error", Text, nullable=True),
    Column("delivered_at", UtcDateTime, nullable=True),
    UniqueConstraint("alert_id", "sink", name="uq_alert_deliveries_alert_sink"),
)
Index("ix_alert_deliveries_status_sink", alert_deliveries.c.status, alert_deliveries.c.sink)

silences = Table(
    "silences",
    metadata,
    Column("id", IdType, primary_key=True, autoincrement=True),
    Column("node", String(253), nullable=True),
    Column("selector", JSON, nullable=False),
    Column("reason", Text, nullable=False),
    Column("created_by", String(128), nullable=False),
    Column("starts_at", UtcDateTime, nullable=False),
    Column("ends_at", UtcDateTime, nullable=False),
    Column("removed_at", UtcDateTime, nullable=True),
)
Index("ix_silences_ends_at", silences.c.ends_at)

# --- audit (migration 0004) ----------------------------------------------------------------------------

audit = Table(
    "audit",
    metadata,
    Column("id", IdType, primary_key=True, autoincrement=True),
    Column("at", UtcDateTime, nullable=False),
    Column("actor", String(128), nullable=False, comment="the authenticated principal's name"),
    Column("role", String(16), nullable=False),
    Column("method", String(32), nullable=False, comment="how the actor authenticated"),
    Column("action", String(64), nullable=False),
    Column("target", String(253), nullable=True, comment="node name or object id acted on"),
    Column("client", String(64), nullable=False, comment="the client address the request came from"),
    Column("details", JSON, nullable=False),
)
Index("ix_audit_at", audit.c.at)
Index("ix_audit_actor_at", audit.c.actor, audit.c.at)

# --- central drains (migration 0005) -------------------------------------------------------------------

drains = Table(
    "drains",
    metadata,
    Column("permit_id", IdType, primary_key=True, autoincrement=False, comment="the permit it acts on"),
    Column("node", String(253), nullable=False),
    Column("incident_id", String(128), nullable=True),
    Column("deadline_s", Float, nullable=False),
    Column("phase", String(16), nullable=False, comment="requested, running, complete, incomplete, failed"),
    Column("detail", Text, nullable=False),
    Column("news", JSON, nullable=False, comment="[{seq, ok, detail, requeue}] for the node's timeline"),
    Column("owner", String(128), nullable=True, comment="the remediator that runs it"),
    Column("lease_until", UtcDateTime, nullable=True, comment="another remediator may take it after"),
    Column("requested_at", UtcDateTime, nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
    Column("finished_at", UtcDateTime, nullable=True, comment="the drain and its requeue both ended"),
)
Index("ix_drains_phase", drains.c.phase)
Index("ix_drains_node", drains.c.node)
