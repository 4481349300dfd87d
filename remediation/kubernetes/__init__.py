"""The Kubernetes executor: the only gpuhealth code (besides ``sim/`` and tests) that imports ``kubernetes``.

It applies plan steps (``remediation.steps``) to one Node — the ``GPUHealthy`` condition, the
``gpuhealth.io/state`` label, the ``gpuhealth.io/unhealthy`` taint, cordon, annotations, Events — and keeps a
watch of that Node so the agent loop sees drift and human changes without polling.
"""

from __future__ import annotations

from remediation.kubernetes.errors import KubeExecutorError
from remediation.kubernetes.executor import KubernetesExecutor, executor_from_kubeconfig
from remediation.kubernetes.names import (
    CONDITION_TYPE,
    CORDONED_ANNOTATION,
    EVENT_NAMESPACE,
    INCIDENT_ANNOTATION,
    MANUAL_RELEASE_ANNOTATION,
    STATE_LABEL,
    TAINT_KEY,
)
from remediation.kubernetes.node_view import node_facts
from remediation.kubernetes.retry import RetrySettings

__all__ = [
    "CONDITION_TYPE",
    "CORDONED_ANNOTATION",
    "EVENT_NAMESPACE",
    "INCIDENT_ANNOTATION",
    "MANUAL_RELEASE_ANNOTATION",
    "STATE_LABEL",
    "TAINT_KEY",
    "KubeExecutorError",
    "KubernetesExecutor",
    "RetrySettings",
    "executor_from_kubeconfig",
    "node_facts",
]
