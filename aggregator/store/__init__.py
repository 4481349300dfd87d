"""The aggregator's store: SQLAlchemy Core tables, the engine set-up and the repository functions."""
