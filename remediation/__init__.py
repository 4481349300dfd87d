"""Remediation: planning and the executors that talk to orchestrators, and the aggregator client."""
