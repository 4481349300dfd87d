"""The central aggregator: fleet health, incident history, remediation permits, circuit breaker."""
