"""What the agent publishes about itself: Prometheus metrics and its /metrics, /healthz, /readyz server."""
