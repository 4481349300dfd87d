"""The admission policy of per-GPU quarantine: an agent's token may create, patch and delete only its own
DeviceTaintRules on the devices of its own node's pool (the CEL evaluated as the API server would)."""

from __future__ import annotations

import copy
from typing import Any

import cel

from tests.helm.conftest import AGENT_USER, Manifest, PolicyUnderTest, Render, admission_request, by_kind

DEVICE_TAINTS = {"gpuQuarantine": {"deviceTaint": "instead"}}


def policy(render: Render) -> PolicyUnderTest:
    found = [
        p
        for p in by_kind(render(DEVICE_TAINTS), "ValidatingAdmissionPolicy")
        if "devices" in p["metadata"]["name"]
    ]
    assert len(found) == 1
    return PolicyUnderTest(found[0])


def rule(pool: str = "gpu-node-1", **changes: Any) -> Manifest:
    body: Manifest = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {
            "name": f"gpuhealth-{pool}-gpu-3",
            "labels": {"app.kubernetes.io/managed-by": "gpuhealth"},
        },
        "spec": {
            "deviceSelector": {"driver": "gpu.nvidia.com", "pool": pool, "device": "gpu-3"},
            "taint": {"key": "gpuhealth.io/unhealthy", "value": "reset_gpu", "effect": "NoSchedule"},
        },
    }
    for key, value in changes.items():
        body["metadata" if key in ("name", "labels") else "spec"][key] = value
    return body


def request(operation: str, **kwargs: Any) -> dict[str, Any]:
    return admission_request(operation, resource="devicetaintrules", group="resource.k8s.io", **kwargs)


def test_only_rendered_when_device_taints_are_on_and_its_expressions_compile(render: Render) -> None:
    assert not [
        p for p in by_kind(render(), "ValidatingAdmissionPolicy") if "devices" in p["metadata"]["name"]
    ]
    under_test = policy(render)
    for expression in under_test.expressions():
        cel.compile(expression)
    assert {v["reason"] for v in under_test.spec["validations"]} == {"Forbidden"}
    bindings = [
        b
        for b in by_kind(render(DEVICE_TAINTS), "ValidatingAdmissionPolicyBinding")
        if "devices" in b["metadata"]["name"]
    ]
    assert [b["spec"]["validationActions"] for b in bindings] == [["Deny"]]


def test_the_agent_creates_updates_and_deletes_its_own_rules(render: Render) -> None:
    under_test = policy(render)
    escalated = copy.deepcopy(rule())
    escalated["spec"]["taint"]["value"] = "replace"

    assert under_test.review(request("CREATE"), rule(), None).allowed
    assert under_test.review(request("UPDATE"), escalated, rule()).allowed
    assert under_test.review(request("DELETE"), None, rule()).allowed


def test_another_nodes_devices_or_someone_elses_rule_are_refused(render: Render) -> None:
    under_test = policy(render)
    theirs = rule(name="maintenance-gpu-3", labels={})
    other_key = rule(taint={"key": "example.com/x", "effect": "NoExecute"})

    assert not under_test.review(request("CREATE"), rule(pool="gpu-node-2"), None).allowed
    assert not under_test.review(request("DELETE"), None, rule(pool="gpu-node-2")).allowed
    assert not under_test.review(request("DELETE"), None, theirs).allowed
    assert not under_test.review(request("CREATE"), other_key, None).allowed
    assert not under_test.review(request("UPDATE"), rule(), theirs).allowed  # taking over a human's rule
    assert not under_test.review(request("CREATE", node_name=None), rule(), None).allowed


def test_other_users_are_not_affected(render: Render) -> None:
    human = request("CREATE", username="kubernetes-admin")
    assert AGENT_USER != "kubernetes-admin"
    assert policy(render).review(human, rule(pool="gpu-node-2"), None).allowed
