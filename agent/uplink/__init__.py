"""The agent's link to the aggregator: its HTTP client, reports through the outbox, permits, central
drains."""
