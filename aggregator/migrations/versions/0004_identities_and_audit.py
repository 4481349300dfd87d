"""Identities: the audit log of every mutating call, and the epoch of each node's report sequence.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from aggregator.store.tables import IdType, UtcDateTime

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create ``audit``; add the nullable ``nodes.epoch`` (nodes that reported before have none)."""
    op.create_table(
        "audit",
        sa.Column("id", IdType, primary_key=True, autoincrement=True),
        sa.Column("at", UtcDateTime, nullable=False),
        sa.Column("actor", sa.String(128), nullable=False, comment="the authenticated principal's name"),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("method", sa.String(32), nullable=False, comment="how the actor authenticated"),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("target", sa.String(253), nullable=True, comment="node name or object id acted on"),
        sa.Column(
            "client", sa.String(64), nullable=False, comment="the client address the request came from"
        ),
        sa.Column("details", sa.JSON, nullable=False),
    )
    op.create_index("ix_audit_at", "audit", ["at"])
    op.create_index("ix_audit_actor_at", "audit", ["actor", "at"])
    with op.batch_alter_table("nodes") as batch:
        batch.add_column(
            sa.Column(
                "epoch",
                sa.String(64),
                nullable=True,
                comment="the agent's sequence epoch; a new one resets last_seq (0004)",
            )
        )


def downgrade() -> None:
    """Drop ``nodes.epoch`` and ``audit``."""
    with op.batch_alter_table("nodes") as batch:
        batch.drop_column("epoch")
    op.drop_index("ix_audit_actor_at", table_name="audit")
    op.drop_index("ix_audit_at", table_name="audit")
    op.drop_table("audit")
