"""The names gpuhealth uses on Kubernetes objects; change them nowhere else.

docs/agent.md, "What the agent writes on its Node", documents them and when each is written.
"""

from __future__ import annotations

CONDITION_TYPE = "GPUHealthy"
STATE_LABEL = "gpuhealth.io/state"
TAINT_KEY = "gpuhealth.io/unhealthy"
INCIDENT_ANNOTATION = "gpuhealth.io/incident"
CORDONED_ANNOTATION = "gpuhealth.io/cordoned"
MANUAL_RELEASE_ANNOTATION = "gpuhealth.io/manual-release"
# The pods a drain is about to evict, written before the first eviction and removed once their jobs were
# requeued: a drain resumed after a crash requeues the jobs of the pods its first run already evicted.
REQUEUE_PENDING_ANNOTATION = "gpuhealth.io/requeue-pending"
# Kubelet records node Events in "default" (nodes are cluster-scoped; Events must live in a namespace).
EVENT_NAMESPACE = "default"
# Per-GPU quarantine (DRA DeviceTaintRules, remediation/kubernetes/device_taints.py): our rules carry both
# labels (the node's name, or a hash of it when it is no valid label value) and the GPU's UUID.
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "gpuhealth"
DEVICE_TAINT_NODE_LABEL = "gpuhealth.io/node"
DEVICE_TAINT_GPU_ANNOTATION = "gpuhealth.io/gpu"
