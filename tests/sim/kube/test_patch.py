"""Strategic merge, JSON merge and JSON patch behave as the Kubernetes API server applies them.

Strategic merge: https://kubernetes.io/docs/tasks/manage-kubernetes-objects/update-api-object-kubectl-patch/
and the strategic-merge-patch design (sig-api-machinery); list strategies are the ``patchStrategy`` /
``patchMergeKey`` tags of the Kubernetes API types (k8s.io/api/core/v1/types.go and friends).
"""

from __future__ import annotations

from typing import Any

import pytest

from sim.kube.patch import (
    PatchError,
    json_merge_patch,
    json_patch,
    strategic_merge,
    supports_strategic_merge,
)


def _node() -> dict[str, Any]:
    return {
        "metadata": {"name": "gpu-node-1", "labels": {"a": "1", "b": "2"}, "finalizers": ["x"]},
        "spec": {"taints": [{"key": "t1", "effect": "NoSchedule"}, {"key": "t2", "effect": "NoExecute"}]},
        "status": {
            "conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "MemoryPressure", "status": "False"},
            ],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
            "capacity": {"nvidia.com/gpu": "8"},
        },
    }


def test_maps_merge_recursively_and_null_deletes_a_key() -> None:
    """Docs 'kubectl patch': maps merge; a null value deletes the key."""
    patched = strategic_merge("nodes", _node(), {"metadata": {"labels": {"a": None, "c": "3"}}})
    assert patched["metadata"]["labels"] == {"b": "2", "c": "3"}
    assert patched["metadata"]["name"] == "gpu-node-1"


def test_original_is_not_modified() -> None:
    original = _node()
    strategic_merge("nodes", original, {"metadata": {"labels": {"a": None}}})
    assert original == _node()


def test_node_status_conditions_merge_by_type() -> None:
    """NodeStatus.Conditions patchStrategy:"merge" patchMergeKey:"type": Ready survives a GPUHealthy patch."""
    patch = {"status": {"conditions": [{"type": "GPUHealthy", "status": "False", "reason": "XID_79"}]}}
    patched = strategic_merge("nodes/status", _node(), patch)
    assert [c["type"] for c in patched["status"]["conditions"]] == ["Ready", "MemoryPressure", "GPUHealthy"]
    again = strategic_merge(
        "nodes", patched, {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}
    )
    assert again["status"]["conditions"][0] == {"type": "Ready", "status": "False"}


def test_json_merge_patch_replaces_the_conditions_list_whole() -> None:
    """RFC 7386: a JSON merge patch replaces lists, dropping Ready."""
    patch = {"status": {"conditions": [{"type": "GPUHealthy", "status": "False"}]}}
    patched = json_merge_patch(_node(), patch)
    assert patched["status"]["conditions"] == [{"type": "GPUHealthy", "status": "False"}]


def test_node_taints_are_atomic_and_replaced_whole() -> None:
    """NodeSpec.Taints has no patchStrategy tag: a strategic merge patch replaces the whole list."""
    patched = strategic_merge("nodes", _node(), {"spec": {"taints": [{"key": "gpuhealth.io/unhealthy"}]}})
    assert patched["spec"]["taints"] == [{"key": "gpuhealth.io/unhealthy"}]


def test_pod_tolerations_are_atomic() -> None:
    """PodSpec.Tolerations has no patchStrategy tag."""
    pod = {"spec": {"tolerations": [{"key": "a", "operator": "Exists"}], "containers": []}}
    patched = strategic_merge("pods", pod, {"spec": {"tolerations": [{"key": "b", "operator": "Exists"}]}})
    assert patched["spec"]["tolerations"] == [{"key": "b", "operator": "Exists"}]


def test_finalizers_merge_as_a_set() -> None:
    """ObjectMeta.Finalizers patchStrategy:"merge": scalars are unioned, not replaced."""
    patched = strategic_merge("pods", _node(), {"metadata": {"finalizers": ["y", "x"]}})
    assert patched["metadata"]["finalizers"] == ["x", "y"]


def test_delete_from_primitive_list_directive_removes_values() -> None:
    """$deleteFromPrimitiveList/<field> removes the listed scalars from a merging list."""
    patch = {"metadata": {"$deleteFromPrimitiveList/finalizers": ["x"], "finalizers": ["z"]}}
    assert strategic_merge("pods", _node(), patch)["metadata"]["finalizers"] == ["z"]


def test_containers_merge_by_name_and_nested_env_and_ports_by_their_keys() -> None:
    """PodSpec.Containers by name; Container.Env by name; Container.Ports by containerPort."""
    pod = {
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "a:1",
                    "env": [{"name": "A", "value": "1"}],
                    "ports": [{"containerPort": 80, "protocol": "TCP"}],
                },
                {"name": "sidecar", "image": "s:1"},
            ]
        }
    }
    patch = {
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "a:2",
                    "env": [{"name": "B", "value": "2"}],
                    "ports": [{"containerPort": 81}],
                },
                {"name": "extra", "image": "e:1"},
            ]
        }
    }
    containers = strategic_merge("pods", pod, patch)["spec"]["containers"]
    assert [c["name"] for c in containers] == ["main", "sidecar", "extra"]
    assert containers[0]["image"] == "a:2"
    assert containers[0]["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]
    assert [p["containerPort"] for p in containers[0]["ports"]] == [80, 81]


def test_pod_template_of_a_job_merges_like_a_pod_spec() -> None:
    job = {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "1"}]}}}}
    patch = {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "2"}]}}}}
    patched = strategic_merge("jobs.batch", job, patch)
    assert patched["spec"]["template"]["spec"]["containers"] == [{"name": "c", "image": "2"}]


def test_patch_delete_directive_in_a_list_element_removes_it() -> None:
    """'$patch: delete' on an element of a merging list deletes the element with that key."""
    patch = {"status": {"conditions": [{"type": "MemoryPressure", "$patch": "delete"}]}}
    patched = strategic_merge("nodes", _node(), patch)
    assert [c["type"] for c in patched["status"]["conditions"]] == ["Ready"]


def test_patch_replace_directive_in_a_list_replaces_it() -> None:
    """A '{"$patch": "replace"}' element makes the merging list be replaced by the patch's elements."""
    patch = {"status": {"conditions": [{"$patch": "replace"}, {"type": "X", "status": "True"}]}}
    patched = strategic_merge("nodes", _node(), patch)
    assert patched["status"]["conditions"] == [{"type": "X", "status": "True"}]


def test_patch_replace_directive_in_a_map_replaces_the_map() -> None:
    patch = {"metadata": {"labels": {"$patch": "replace", "only": "this"}}}
    assert strategic_merge("nodes", _node(), patch)["metadata"]["labels"] == {"only": "this"}


def test_patch_delete_directive_in_a_map_clears_it() -> None:
    patch = {"status": {"capacity": {"$patch": "delete"}}}
    assert strategic_merge("nodes", _node(), patch)["status"]["capacity"] == {}


def test_retain_keys_clears_fields_not_listed() -> None:
    """$retainKeys (used for union types such as Volume sources) keeps only the listed fields."""
    pod = {"spec": {"volumes": [{"name": "v", "emptyDir": {}}]}}
    patch = {
        "spec": {"volumes": [{"name": "v", "$retainKeys": ["name", "hostPath"], "hostPath": {"path": "/x"}}]}
    }
    patched = strategic_merge("pods", pod, patch)
    assert patched["spec"]["volumes"] == [{"name": "v", "hostPath": {"path": "/x"}}]


def test_retain_keys_refuses_patch_fields_outside_the_list() -> None:
    with pytest.raises(PatchError, match="retainKeys"):
        strategic_merge("pods", {"spec": {}}, {"spec": {"$retainKeys": ["a"], "b": 1}})


def test_set_element_order_reorders_a_merged_list() -> None:
    """$setElementOrder/<field> fixes the order of the patched list (kubectl apply sends it)."""
    patch = {
        "status": {
            "$setElementOrder/conditions": [{"type": "MemoryPressure"}, {"type": "Ready"}],
            "conditions": [{"type": "Ready", "status": "Unknown"}],
        }
    }
    conditions = strategic_merge("nodes", _node(), patch)["status"]["conditions"]
    assert [c["type"] for c in conditions] == ["MemoryPressure", "Ready"]
    assert conditions[1]["status"] == "Unknown"


def test_element_without_the_merge_key_is_refused() -> None:
    with pytest.raises(PatchError, match="merge key: type"):
        strategic_merge("nodes", _node(), {"status": {"conditions": [{"status": "True"}]}})


def test_owner_references_merge_by_uid() -> None:
    pod = {"metadata": {"ownerReferences": [{"uid": "1", "name": "a"}]}}
    patched = strategic_merge("pods", pod, {"metadata": {"ownerReferences": [{"uid": "2", "name": "b"}]}})
    assert [o["uid"] for o in patched["metadata"]["ownerReferences"]] == ["1", "2"]


def test_unknown_lists_of_builtin_types_are_replaced() -> None:
    """A list without a patchStrategy tag is atomic."""
    pod = {"spec": {"containers": [{"name": "c", "args": ["a", "b"]}]}}
    patch = {"spec": {"containers": [{"name": "c", "args": ["z"]}]}}
    assert strategic_merge("pods", pod, patch)["spec"]["containers"][0]["args"] == ["z"]


def test_custom_resources_refuse_strategic_merge_with_415() -> None:
    """kubectl patch docs: strategic merge patch is not supported for custom resources."""
    assert supports_strategic_merge("pods")
    assert supports_strategic_merge("nodes/status")
    assert supports_strategic_merge("jobs.batch")
    assert supports_strategic_merge("poddisruptionbudgets.policy")
    assert not supports_strategic_merge("jobsets.jobset.x-k8s.io")
    with pytest.raises(PatchError) as raised:
        strategic_merge("workloads.kueue.x-k8s.io", {}, {"spec": {"active": False}})
    assert raised.value.status_code == 415


def test_json_merge_patch_follows_rfc7386() -> None:
    """RFC 7386 section 3 example."""
    original = {"a": "b", "c": {"d": "e", "f": "g"}}
    patched = json_merge_patch(original, {"a": "z", "c": {"f": None}})
    assert patched == {"a": "z", "c": {"d": "e"}}
    assert json_merge_patch({"a": [1, 2]}, {"a": [3]}) == {"a": [3]}
    assert json_merge_patch({"a": 1}, {"b": {"c": None}}) == {"a": 1, "b": {}}


def test_json_patch_applies_rfc6902_operations() -> None:
    """RFC 6902 add / replace / remove / test, as used with 'kubectl patch --type json'."""
    ops = [
        {"op": "test", "path": "/metadata/name", "value": "gpu-node-1"},
        {"op": "add", "path": "/spec/taints/-", "value": {"key": "t3", "effect": "NoSchedule"}},
        {"op": "remove", "path": "/spec/taints/0"},
        {"op": "replace", "path": "/metadata/labels/a", "value": "9"},
    ]
    patched = json_patch(_node(), ops)
    assert [t["key"] for t in patched["spec"]["taints"]] == ["t2", "t3"]
    assert patched["metadata"]["labels"]["a"] == "9"


def test_json_patch_failed_test_is_422_and_malformed_is_400() -> None:
    """The API server answers 422 when a patch does not apply and 400 when it cannot be decoded."""
    with pytest.raises(PatchError) as failed:
        json_patch(_node(), [{"op": "test", "path": "/metadata/name", "value": "other"}])
    assert failed.value.status_code == 422
    with pytest.raises(PatchError) as missing:
        json_patch(_node(), [{"op": "remove", "path": "/spec/nothing"}])
    assert missing.value.status_code == 422
    with pytest.raises(PatchError) as malformed:
        json_patch(_node(), [{"op": "frobnicate", "path": "/a"}])
    assert malformed.value.status_code == 400
