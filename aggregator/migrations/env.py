"""Alembic environment: always online, on the connection the aggregator hands over (no alembic.ini)."""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from aggregator.store.tables import metadata

connection = context.config.attributes.get("connection")
if not isinstance(connection, Connection):
    raise RuntimeError("run migrations through aggregator.store.engine.migrate(), which passes a connection")

context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
