"""Alembic migrations, shipped in the package and run programmatically when the aggregator starts."""
