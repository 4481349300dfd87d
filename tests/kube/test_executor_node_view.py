"""Reading gpuhealth's facts out of a Node object as the API server sends it (pure, no server)."""

from __future__ import annotations

from typing import Any

from core.steps import NodeFacts
from remediation.kubernetes.node_view import node_facts
from sim.kube.fleet import gpu_node


def test_a_missing_node_does_not_exist() -> None:
    """No node object -> exists=False, nothing else claimed."""
    assert node_facts(None) == NodeFacts(exists=False)


def test_a_fresh_gpu_node_has_none_of_our_marks() -> None:
    """A GPU-operator node we never touched: no condition, label, taint, cordon or annotations."""
    assert node_facts(gpu_node("gpu-node-3")) == NodeFacts()


def test_every_mark_of_ours_is_read_back() -> None:
    """Condition, label, taint, cordon and the three annotations map onto NodeFacts field by field."""
    node: dict[str, Any] = gpu_node(
        "gpu-node-3",
        labels={"gpuhealth.io/state": "unhealthy"},
        taints=[
            {"key": "nvidia.com/gpu", "effect": "NoSchedule"},
            {"key": "gpuhealth.io/unhealthy", "value": "reset_gpu", "effect": "NoSchedule"},
        ],
        unschedulable=True,
    )
    node["metadata"]["annotations"].update(
        {
            "gpuhealth.io/cordoned": "true",
            "gpuhealth.io/incident": "inc-7",
            "gpuhealth.io/manual-release": "inc-6",
        }
    )
    node["status"]["conditions"].append(
        {"type": "GPUHealthy", "status": "False", "reason": "ROW_REMAP_PENDING"}
    )

    assert node_facts(node) == NodeFacts(
        condition_status="False",
        condition_reason="ROW_REMAP_PENDING",
        condition_message=None,
        state_label="unhealthy",
        taint_value="reset_gpu",
        taint_effect="NoSchedule",
        unschedulable=True,
        cordoned_by_us=True,
        incident_annotation="inc-7",
        manual_release="inc-6",
    )


def test_a_human_cordon_is_not_ours_and_a_valueless_taint_reads_as_empty() -> None:
    """unschedulable without our annotation is someone else's cordon; a taint with no value gives ""."""
    node = gpu_node(
        "gpu-node-3", taints=[{"key": "gpuhealth.io/unhealthy", "effect": "NoExecute"}], unschedulable=True
    )

    facts = node_facts(node)

    assert (facts.unschedulable, facts.cordoned_by_us) == (True, False)
    assert (facts.taint_value, facts.taint_effect) == ("", "NoExecute")


def test_values_outside_the_api_enums_are_not_trusted() -> None:
    """A condition status or taint effect the API does not define reads as absent, not as a wrong value."""
    node: dict[str, Any] = gpu_node(
        "gpu-node-3", taints=[{"key": "gpuhealth.io/unhealthy", "effect": "Sometimes"}]
    )
    node["status"]["conditions"].append({"type": "GPUHealthy", "status": "Maybe"})

    facts = node_facts(node)

    assert (facts.condition_status, facts.taint_effect) == (None, None)
