"""The executor contract every orchestrator implements, and the plumbing the executors share."""
