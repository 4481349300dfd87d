"""The executor's own exceptions (configuration problems only: API errors end up in ``StepResult``)."""

from __future__ import annotations


class KubeExecutorError(Exception):
    """The executor cannot be set up: no kubeconfig, not in a cluster, no node name."""
