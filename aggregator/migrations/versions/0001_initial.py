"""Initial schema: nodes, incidents, events, permits, requests and the fleet_control row.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from aggregator.store.tables import IdType, UtcDateTime

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create every table and the single fleet_control row that permit grants lock."""
    op.create_table(
        "nodes",
        sa.Column("name", sa.String(253), primary_key=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("orchestrator", sa.String(16), nullable=False),
        sa.Column("gpu_count", sa.Integer, nullable=False),
        sa.Column("interval_s", sa.Float, nullable=False),
        sa.Column("first_seen_at", UtcDateTime, nullable=False),
        sa.Column("last_report_at", UtcDateTime, nullable=False),
        sa.Column(
            "stale_at",
            UtcDateTime,
            nullable=False,
            comment="last_report_at + stale_after_intervals * interval",
        ),
        sa.Column("last_seq", sa.BigInteger, nullable=False),
        sa.Column("reports_accepted", sa.BigInteger, nullable=False),
        sa.Column("incident_id", sa.String(128), nullable=True),
        sa.Column(
            "hold", sa.Text, nullable=True, comment="why a human must release the node; null when not held"
        ),
        sa.Column("pending_requests", sa.Integer, nullable=False, server_default="0"),
        sa.Column("labels", sa.JSON, nullable=False),
        sa.Column("gpus", sa.JSON, nullable=False),
        sa.Column("findings", sa.JSON, nullable=False),
    )
    op.create_index("ix_nodes_stale_at", "nodes", ["stale_at"])
    op.create_index("ix_nodes_summary", "nodes", ["state", "stale_at", "gpu_count"])
    op.create_index("ix_nodes_hold", "nodes", ["hold"])
    op.create_table(
        "incidents",
        sa.Column("id", sa.String(128), primary_key=True),
        sa.Column("node", sa.String(253), sa.ForeignKey("nodes.name"), nullable=False),
        sa.Column("started_at", UtcDateTime, nullable=False),
        sa.Column("ended_at", UtcDateTime, nullable=True),
        sa.Column("reasons", sa.JSON, nullable=False),
        sa.Column("action", sa.String(32), nullable=False),
    )
    op.create_index("ix_incidents_node_started", "incidents", ["node", "started_at"])
    op.create_index("ix_incidents_ended_at", "incidents", ["ended_at"])
    op.create_table(
        "events",
        sa.Column("id", IdType, primary_key=True, autoincrement=True),
        sa.Column("at", UtcDateTime, nullable=False),
        sa.Column("node", sa.String(253), nullable=True),
        sa.Column("incident_id", sa.String(128), nullable=True),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("message", sa.Text, nullable=False),
        sa.Column("details", sa.JSON, nullable=False),
    )
    op.create_index("ix_events_at", "events", ["at"])
    op.create_index("ix_events_node_at", "events", ["node", "at"])
    op.create_index("ix_events_incident", "events", ["incident_id"])
    op.create_index("ix_events_kind_at", "events", ["kind", "at"])
    op.create_table(
        "permits",
        sa.Column("id", IdType, primary_key=True, autoincrement=True),
        sa.Column("node", sa.String(253), sa.ForeignKey("nodes.name"), nullable=False),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("incident_id", sa.String(128), nullable=True),
        sa.Column("granted_at", UtcDateTime, nullable=False),
        sa.Column("expires_at", UtcDateTime, nullable=False),
        sa.Column("released_at", UtcDateTime, nullable=True),
    )
    op.create_index("ix_permits_node", "permits", ["node"])
    op.create_index("ix_permits_open", "permits", ["released_at", "expires_at"])
    op.create_table(
        "requests",
        sa.Column("id", IdType, primary_key=True, autoincrement=True),
        sa.Column("node", sa.String(253), sa.ForeignKey("nodes.name"), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("requested_by", sa.String(128), nullable=False),
        sa.Column("created_at", UtcDateTime, nullable=False),
        sa.Column("applied_at", UtcDateTime, nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
    )
    op.create_index("ix_requests_node_status", "requests", ["node", "status"])
    fleet_control = op.create_table(
        "fleet_control",
        sa.Column(
            "id",
            sa.Integer,
            primary_key=True,
            autoincrement=False,
            comment="always 1: the row every grant locks",
        ),
        sa.Column("breaker_tripped", sa.Boolean, nullable=False),
        sa.Column("tripped_at", UtcDateTime, nullable=True),
        sa.Column("tripped_reason", sa.Text, nullable=True),
        sa.Column("reset_at", UtcDateTime, nullable=True),
        sa.Column("reset_by", sa.String(128), nullable=True),
    )
    op.bulk_insert(fleet_control, [{"id": 1, "breaker_tripped": False}])


def downgrade() -> None:
    """Drop everything (only for tests of the migration itself)."""
    for table in ("fleet_control", "requests", "permits", "events", "incidents", "nodes"):
        op.drop_table(table)
