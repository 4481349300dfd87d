"""Node requests carry kind-specific parameters (the level and force of a diag request).

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add the nullable ``requests.params`` column (quarantine and release requests leave it empty)."""
    with op.batch_alter_table("requests") as batch:
        batch.add_column(
            sa.Column(
                "params",
                sa.JSON,
                nullable=True,
                comment="kind-specific: diag level and force (migration 0003)",
            )
        )


def downgrade() -> None:
    """Drop ``requests.params``."""
    with op.batch_alter_table("requests") as batch:
        batch.drop_column("params")
