"""Discovery documents and ``/version``, as clients use them to map kinds to paths.

API concepts "Discovery API": https://kubernetes.io/docs/reference/using-api/api-concepts/#discovery-api
"""

from __future__ import annotations

from typing import Any, cast

import httpx
from kubernetes import client

from sim.kube.harness import KubeSim, running_kube_sim
from sim.kube.resources import CustomResource


def _get(sim: KubeSim, path: str) -> Any:
    answer = httpx.get(f"{sim.url}{path}")
    assert answer.status_code == 200, answer.text
    return answer.json()


def _resource(document: dict[str, Any], name: str) -> dict[str, Any]:
    return next(r for r in document["resources"] if r["name"] == name)


def test_core_group_lists_versions_and_resources(bare_kube_sim: KubeSim) -> None:
    """Discovery API: /api names v1; /api/v1 is an APIResourceList with verbs, scope and short names."""
    assert _get(bare_kube_sim, "/api")["versions"] == ["v1"]
    core = _get(bare_kube_sim, "/api/v1")
    assert core["kind"] == "APIResourceList"
    assert core["groupVersion"] == "v1"
    nodes = _resource(core, "nodes")
    assert nodes["namespaced"] is False
    assert nodes["kind"] == "Node"
    assert "no" in nodes["shortNames"]
    assert set(nodes["verbs"]) >= {"get", "list", "watch", "patch", "update", "create", "delete"}


def test_pod_subresources_are_discoverable(bare_kube_sim: KubeSim) -> None:
    """Discovery API: pods/eviction is served by policy/v1 Eviction (kubectl drain checks this), and
    pods/status and nodes/status accept get, patch and update."""
    core = _get(bare_kube_sim, "/api/v1")
    eviction = _resource(core, "pods/eviction")
    assert (eviction["group"], eviction["version"], eviction["kind"], eviction["verbs"]) == (
        "policy",
        "v1",
        "Eviction",
        ["create"],
    )
    assert _resource(core, "pods/status")["verbs"] == ["get", "patch", "update"]
    assert _resource(core, "nodes/status")["kind"] == "Node"
    assert _resource(core, "pods/binding")["verbs"] == ["create"]


def test_named_groups_and_preferred_versions(bare_kube_sim: KubeSim) -> None:
    """Discovery API: /apis lists every group with its versions and preferred version."""
    groups = {g["name"]: g for g in _get(bare_kube_sim, "/apis")["groups"]}
    assert {"apps", "batch", "policy", "coordination.k8s.io", "events.k8s.io", "resource.k8s.io"} <= set(
        groups
    )
    assert groups["policy"]["preferredVersion"]["groupVersion"] == "policy/v1"
    resource_versions = [v["version"] for v in groups["resource.k8s.io"]["versions"]]
    assert resource_versions == ["v1", "v1beta2", "v1alpha3"]
    assert _get(bare_kube_sim, "/apis/apps")["kind"] == "APIGroup"
    assert _resource(_get(bare_kube_sim, "/apis/apps/v1"), "daemonsets")["shortNames"] == ["ds"]


def test_unknown_group_is_404(bare_kube_sim: KubeSim) -> None:
    """Discovery API: a group or resource that is not served is 404 NotFound."""
    assert httpx.get(f"{bare_kube_sim.url}/apis/nope.example.com").status_code == 404
    assert httpx.get(f"{bare_kube_sim.url}/api/v1/widgets").status_code == 404


def test_version_endpoint_matches_the_client_generation(bare_kube_sim: KubeSim) -> None:
    """/version reports a 1.37 server, the API the kubernetes 37 client was generated from."""
    info = client.VersionApi(bare_kube_sim.api_client()).get_code()
    assert (info.major, info.minor) == ("1", "37")


def test_custom_resources_registered_at_start_are_served() -> None:
    """Custom resources (https://kubernetes.io/docs/concepts/extend-kubernetes/api-extension/custom-resources/):
    a registered CRD is discoverable and served through CustomObjectsApi, with a status subresource."""
    jobset = CustomResource("jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets", short_names=("js",))
    with running_kube_sim(controllers=False, custom_resources=[jobset]) as sim:
        document = _get(sim, "/apis/jobset.x-k8s.io/v1alpha2")
        assert _resource(document, "jobsets")["kind"] == "JobSet"
        assert _resource(document, "jobsets/status")["verbs"] == ["get", "patch", "update"]
        custom = client.CustomObjectsApi(sim.api_client())
        body = {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": "train"},
            "spec": {"suspend": False},
            "status": {"restarts": 9},
        }
        created = cast(  # the custom-objects API returns the JSON object, typed `object`
            "dict[str, Any]",
            custom.create_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", "default", "jobsets", body),
        )
        assert "status" not in created
        patched = custom.patch_namespaced_custom_object(
            "jobset.x-k8s.io", "v1alpha2", "default", "jobsets", "train", {"spec": {"suspend": True}}
        )
        assert patched["spec"]["suspend"] is True
        assert patched["metadata"]["generation"] == 2
        listed = custom.list_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", "default", "jobsets")
        assert listed["items"][0]["kind"] == "JobSet"


def test_strategic_merge_patch_on_a_custom_resource_is_415() -> None:
    """Custom resources do not support strategic merge patch ("Update API Objects in Place Using kubectl
    patch", notes on custom resources): the server answers 415 Unsupported Media Type."""
    crd = CustomResource("example.com", "v1", "Widget", "widgets")
    with running_kube_sim(controllers=False, custom_resources=[crd]) as sim:
        httpx.post(
            f"{sim.url}/apis/example.com/v1/namespaces/default/widgets",
            json={"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}},
        )
        answer = httpx.patch(
            f"{sim.url}/apis/example.com/v1/namespaces/default/widgets/w",
            content=b'{"spec": {"a": 1}}',
            headers={"Content-Type": "application/strategic-merge-patch+json"},
        )
        assert answer.status_code == 415
        assert "application/strategic-merge-patch+json" not in answer.json()["message"]


def test_device_taint_rule_is_served_in_every_client_version(bare_kube_sim: KubeSim) -> None:
    """DRA device taints (https://kubernetes.io/docs/concepts/scheduling-eviction/dynamic-resource-allocation/#device-taints-and-tolerations):
    a DeviceTaintRule created through resource.k8s.io/v1 reads back through v1beta2 with that apiVersion."""
    api = bare_kube_sim.api_client()
    rule = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": "gpu-3-bad"},
        "spec": {
            "deviceSelector": {"driver": "gpu.nvidia.com", "pool": "node-1", "device": "gpu-3"},
            "taint": {"key": "gpuhealth.io/unhealthy", "value": "reset_gpu", "effect": "NoSchedule"},
        },
    }
    created = client.ResourceV1Api(api).create_device_taint_rule(rule)
    assert created.spec.taint.key == "gpuhealth.io/unhealthy"
    beta = httpx.get(f"{bare_kube_sim.url}/apis/resource.k8s.io/v1beta2/devicetaintrules/gpu-3-bad").json()
    assert beta["apiVersion"] == "resource.k8s.io/v1beta2"
    assert beta["spec"]["deviceSelector"]["device"] == "gpu-3"
