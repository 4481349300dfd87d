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
# Kubelet records node Events in "default" (nodes are cluster-scoped; Events must live in a namespace).
EVENT_NAMESPACE = "default"
