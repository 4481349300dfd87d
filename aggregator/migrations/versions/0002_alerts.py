"""Alerts: the durable outbox (alerts, alert_deliveries) and silences.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from aggregator.store.tables import IdType, UtcDateTime

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create the alert outbox, its per-sink deliveries and the silences."""
    op.create_table(
        "alerts",
        sa.Column("id", IdType, primary_key=True, autoincrement=True),
        sa.Column("key", sa.String(255), nullable=False, unique=True),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("severity", sa.String(16), nullable=False),
        sa.Column("group_key", sa.String(255), nullable=False),
        sa.Column("node", sa.String(253), nullable=True),
        sa.Column("incident_id", sa.String(128), nullable=True),
        sa.Column("summary", sa.Text, nullable=False),
        sa.Column("details", sa.JSON, nullable=False),
        sa.Column("labels", sa.JSON, nullable=False),
        sa.Column("created_at", UtcDateTime, nullable=False),
        sa.Column("silence_id", IdType, nullable=True),
        sa.Column("routed", sa.Boolean, nullable=False),
    )
    op.create_index("ix_alerts_routed", "alerts", ["routed"])
    op.create_index("ix_alerts_created_at", "alerts", ["created_at"])
    op.create_table(
        "alert_deliveries",
        sa.Column("id", IdType, primary_key=True, autoincrement=True),
        sa.Column("alert_id", IdType, sa.ForeignKey("alerts.id"), nullable=False),
        sa.Column("sink", sa.String(64), nullable=False),
        sa.Column("group_key", sa.String(255), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("next_attempt_at", UtcDateTime, nullable=False),
        sa.Column("claimed_until", UtcDateTime, nullable=True),
        sa.Column("last_error", sa.Text, nullable=True),
        sa.Column("delivered_at", UtcDateTime, nullable=True),
        sa.UniqueConstraint("alert_id", "sink", name="uq_alert_deliveries_alert_sink"),
    )
    op.create_index("ix_alert_deliveries_status_sink", "alert_deliveries", ["status", "sink"])
    op.create_table(
        "silences",
        sa.Column("id", IdType, primary_key=True, autoincrement=True),
        sa.Column("node", sa.String(253), nullable=True),
        sa.Column("selector", sa.JSON, nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("created_by", sa.String(128), nullable=False),
        sa.Column("starts_at", UtcDateTime, nullable=False),
        sa.Column("ends_at", UtcDateTime, nullable=False),
        sa.Column("removed_at", UtcDateTime, nullable=True),
    )
    op.create_index("ix_silences_ends_at", "silences", ["ends_at"])


def downgrade() -> None:
    """Drop the alert tables (only for tests of the migration itself)."""
    for table in ("silences", "alert_deliveries", "alerts"):
        op.drop_table(table)
