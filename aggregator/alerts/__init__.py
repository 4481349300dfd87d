"""Alerts: events that on-call must hear about, written to a durable outbox and delivered to sinks."""
