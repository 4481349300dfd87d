"""The readings ring: each node's last few GPU readings, kept for the readings around an incident.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from aggregator.store.tables import UtcDateTime

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create ``readings_ring``; add the ring's bookkeeping to ``nodes``."""
    op.create_table(
        "readings_ring",
        sa.Column("node", sa.String(253), primary_key=True),
        sa.Column("slot", sa.Integer, primary_key=True, autoincrement=False, comment="0 .. ring size - 1"),
        sa.Column("at", UtcDateTime, nullable=False, comment="when the report arrived"),
        sa.Column("incident_id", sa.String(128), nullable=True, comment="the node's open incident then"),
        sa.Column("readings", sa.JSON, nullable=False, comment="{gpu uuid: GpuReadings}"),
    )
    with op.batch_alter_table("nodes") as batch:
        batch.add_column(
            sa.Column(
                "readings_sampled_at",
                UtcDateTime,
                nullable=True,
                comment="when the node's readings last went into the ring (0006)",
            )
        )
        batch.add_column(
            sa.Column(
                "readings_slot",
                sa.Integer,
                nullable=False,
                server_default="0",
                comment="the ring slot the next sample takes (0006)",
            )
        )
        batch.add_column(
            sa.Column(
                "readings_after_incident",
                sa.String(128),
                nullable=True,
                comment="the incident whose readings after its release are still being kept (0006)",
            )
        )
        batch.add_column(
            sa.Column(
                "readings_after_left",
                sa.Integer,
                nullable=False,
                server_default="0",
                comment="how many more samples after that release to keep in its history (0006)",
            )
        )


def downgrade() -> None:
    """Drop the ring's ``nodes`` columns and ``readings_ring``."""
    with op.batch_alter_table("nodes") as batch:
        batch.drop_column("readings_after_left")
        batch.drop_column("readings_after_incident")
        batch.drop_column("readings_slot")
        batch.drop_column("readings_sampled_at")
    op.drop_table("readings_ring")
