"""Central drains: the drain and requeue the remediator runs for a granted permit.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from aggregator.store.tables import IdType, UtcDateTime

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create ``drains``."""
    op.create_table(
        "drains",
        sa.Column(
            "permit_id", IdType, primary_key=True, autoincrement=False, comment="the permit it acts on"
        ),
        sa.Column("node", sa.String(253), nullable=False),
        sa.Column("incident_id", sa.String(128), nullable=True),
        sa.Column("deadline_s", sa.Float, nullable=False),
        sa.Column(
            "phase",
            sa.String(16),
            nullable=False,
            comment="requested, running, complete, incomplete, failed",
        ),
        sa.Column("detail", sa.Text, nullable=False),
        sa.Column(
            "news", sa.JSON, nullable=False, comment="[{seq, ok, detail, requeue}] for the node's timeline"
        ),
        sa.Column("owner", sa.String(128), nullable=True, comment="the remediator that runs it"),
        sa.Column("lease_until", UtcDateTime, nullable=True, comment="another remediator may take it after"),
        sa.Column("requested_at", UtcDateTime, nullable=False),
        sa.Column("updated_at", UtcDateTime, nullable=False),
        sa.Column("finished_at", UtcDateTime, nullable=True, comment="the drain and its requeue both ended"),
    )
    op.create_index("ix_drains_phase", "drains", ["phase"])
    op.create_index("ix_drains_node", "drains", ["node"])


def downgrade() -> None:
    """Drop ``drains``."""
    op.drop_index("ix_drains_node", table_name="drains")
    op.drop_index("ix_drains_phase", table_name="drains")
    op.drop_table("drains")
