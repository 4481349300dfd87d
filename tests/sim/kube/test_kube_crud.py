"""Conformance of create/get/replace/patch/delete through the official ``kubernetes`` client over HTTP.

Each test cites the Kubernetes documentation it follows:
API concepts  = https://kubernetes.io/docs/reference/using-api/api-concepts/
API conventions = https://github.com/kubernetes/community/blob/master/contributors/devel/sig-architecture/api-conventions.md
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from kubernetes import client
from kubernetes.client import ApiException

from sim.kube.harness import KubeSim


def _pod(name: str, node: str | None = None, **labels: str) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "busybox:1.36"}]}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "labels": labels}, "spec": spec}


def _status(error: ApiException) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(error.body)
    return body


def _raises(call: Any, *args: Any, **kwargs: Any) -> ApiException:
    with pytest.raises(ApiException) as caught:
        call(*args, **kwargs)
    return caught.value


def test_create_fills_uid_timestamp_generation_and_resource_version(core: client.CoreV1Api) -> None:
    """API conventions "Metadata": the server sets uid, creationTimestamp, resourceVersion; generation 1."""
    pod = core.create_namespaced_pod("default", _pod("p1"))
    assert pod.metadata.uid
    assert pod.metadata.creation_timestamp is not None
    assert int(pod.metadata.resource_version) > 0
    assert pod.metadata.generation == 1
    assert pod.status.phase == "Pending"


def test_generate_name_appends_a_random_suffix(core: client.CoreV1Api) -> None:
    """API conventions "Idempotency": generateName gives a unique name with a random suffix."""
    pod = core.create_namespaced_pod(
        "default", {"metadata": {"generateName": "worker-"}, "spec": _pod("x")["spec"]}
    )
    assert pod.metadata.name.startswith("worker-")
    assert len(pod.metadata.name) == len("worker-") + 5


def test_every_write_bumps_one_global_resource_version(core: client.CoreV1Api) -> None:
    """API concepts "Resource versions": one cluster-wide, increasing version across resource types."""
    pod = core.create_namespaced_pod("default", _pod("p1"))
    node = core.create_node({"metadata": {"name": "n1"}})
    assert int(node.metadata.resource_version) > int(pod.metadata.resource_version)
    patched = core.patch_node("n1", {"metadata": {"labels": {"a": "b"}}})
    assert int(patched.metadata.resource_version) > int(node.metadata.resource_version)


def test_get_missing_object_is_404_not_found_status(core: client.CoreV1Api) -> None:
    """API conventions "Response Status Kind": 404 with kind Status, reason NotFound, details."""
    error = _raises(core.read_namespaced_pod, "nope", "default")
    assert error.status == 404
    status = _status(error)
    assert status["kind"] == "Status"
    assert status["apiVersion"] == "v1"
    assert status["status"] == "Failure"
    assert status["reason"] == "NotFound"
    assert status["code"] == 404
    assert status["message"] == 'pods "nope" not found'
    assert status["details"] == {"name": "nope", "kind": "pods"}


def test_create_with_a_taken_name_is_409_already_exists(core: client.CoreV1Api) -> None:
    """API conventions "HTTP Status codes": 409 AlreadyExists when the name is taken."""
    core.create_namespaced_pod("default", _pod("p1"))
    error = _raises(core.create_namespaced_pod, "default", _pod("p1"))
    assert error.status == 409
    assert _status(error)["reason"] == "AlreadyExists"


def test_create_in_a_missing_namespace_is_404(core: client.CoreV1Api) -> None:
    """API concepts: a namespaced create into a namespace that does not exist is NotFound (namespaces)."""
    error = _raises(core.create_namespaced_pod, "ghost", _pod("p1"))
    assert error.status == 404
    assert _status(error)["message"] == 'namespaces "ghost" not found'


def test_create_with_resource_version_set_is_refused(core: client.CoreV1Api) -> None:
    """API concepts "Resource versions": resourceVersion must not be set on objects to be created."""
    body = _pod("p1")
    body["metadata"]["resourceVersion"] = "5"
    error = _raises(core.create_namespaced_pod, "default", body)
    assert error.status == 500
    assert "resourceVersion should not be set" in _status(error)["message"]


def test_put_with_stale_resource_version_is_409_conflict(core: client.CoreV1Api) -> None:
    """API concepts "Concurrency control": an update with an old resourceVersion is 409 Conflict."""
    node = core.create_node({"metadata": {"name": "n1"}})
    core.patch_node("n1", {"metadata": {"labels": {"moved": "on"}}})
    stale = client.ApiClient().sanitize_for_serialization(node)
    stale["metadata"]["labels"] = {"x": "y"}
    error = _raises(core.replace_node, "n1", stale)
    assert error.status == 409
    status = _status(error)
    assert status["reason"] == "Conflict"
    assert "the object has been modified" in status["message"]


def test_put_without_resource_version_is_an_unconditional_update(core: client.CoreV1Api) -> None:
    """API concepts "Concurrency control": omitting resourceVersion means an unconditional update."""
    core.create_node({"metadata": {"name": "n1"}})
    replaced = core.replace_node("n1", {"metadata": {"name": "n1", "labels": {"k": "v"}}, "spec": {}})
    assert replaced.metadata.labels == {"k": "v"}


def test_patch_carrying_a_stale_resource_version_is_409(core: client.CoreV1Api) -> None:
    """API concepts "Patch": a patch that sets metadata.resourceVersion is a precondition (409 if stale)."""
    node = core.create_node({"metadata": {"name": "n1"}})
    core.patch_node("n1", {"metadata": {"labels": {"a": "1"}}})
    body = {"metadata": {"resourceVersion": node.metadata.resource_version}, "spec": {"taints": []}}
    error = _raises(core.patch_node, "n1", body)
    assert error.status == 409
    assert _status(error)["reason"] == "Conflict"


def test_patch_with_current_resource_version_succeeds(core: client.CoreV1Api) -> None:
    """API concepts "Patch": the read-modify-patch loop with the current resourceVersion succeeds."""
    node = core.create_node({"metadata": {"name": "n1"}})
    taint = {"key": "gpuhealth.io/unhealthy", "value": "reboot", "effect": "NoSchedule"}
    body = {"metadata": {"resourceVersion": node.metadata.resource_version}, "spec": {"taints": [taint]}}
    patched = core.patch_node("n1", body)
    assert patched.spec.taints[0].key == "gpuhealth.io/unhealthy"


def test_put_name_mismatch_is_400_bad_request(core: client.CoreV1Api) -> None:
    """API concepts / apiserver checkName: the object's name must match the URL's (400 BadRequest)."""
    core.create_node({"metadata": {"name": "n1"}})
    error = _raises(core.replace_node, "n1", {"metadata": {"name": "n2"}})
    assert error.status == 400
    assert "does not match the name on the URL" in _status(error)["message"]


def test_invalid_name_is_422_invalid_with_causes(core: client.CoreV1Api) -> None:
    """Object Names and IDs (https://kubernetes.io/docs/concepts/overview/working-with-objects/names/):
    names are RFC 1123 subdomains; a bad one is 422 Invalid with a cause per field."""
    error = _raises(core.create_node, {"metadata": {"name": "Bad_Name"}})
    assert error.status == 422
    status = _status(error)
    assert status["reason"] == "Invalid"
    assert status["details"]["causes"][0]["field"] == "metadata.name"
    assert status["message"].startswith('Node "Bad_Name" is invalid: metadata.name: Invalid value')


def test_missing_name_and_generate_name_is_422(core: client.CoreV1Api) -> None:
    """API conventions "Metadata": name or generateName is required."""
    error = _raises(core.create_namespaced_pod, "default", {"metadata": {}, "spec": _pod("x")["spec"]})
    assert error.status == 422
    assert _status(error)["details"]["causes"][0]["reason"] == "FieldValueRequired"


def test_invalid_label_value_is_422(core: client.CoreV1Api) -> None:
    """Labels and Selectors "Syntax and character set": values are <= 63 characters of [A-Za-z0-9_.-]."""
    error = _raises(core.create_node, {"metadata": {"name": "n1", "labels": {"a": "bad value!"}}})
    assert error.status == 422
    assert _status(error)["details"]["causes"][0]["field"] == "metadata.labels"


def test_invalid_taint_effect_is_422(core: client.CoreV1Api) -> None:
    """Taints and Tolerations: effect is NoSchedule, PreferNoSchedule or NoExecute (422 otherwise)."""
    core.create_node({"metadata": {"name": "n1"}})
    error = _raises(core.patch_node, "n1", {"spec": {"taints": [{"key": "k", "effect": "Sometimes"}]}})
    assert error.status == 422
    assert _status(error)["details"]["causes"][0]["field"] == "spec.taints[0].effect"


def test_body_namespace_must_match_url_namespace(core: client.CoreV1Api) -> None:
    """API concepts: the namespace in the body must equal the request's namespace (400 BadRequest)."""
    core.create_namespace({"metadata": {"name": "other"}})
    body = _pod("p1")
    body["metadata"]["namespace"] = "other"
    error = _raises(core.create_namespaced_pod, "default", body)
    assert error.status == 400


def test_wrong_kind_in_body_is_400(core: client.CoreV1Api) -> None:
    """API conventions "Types (Kinds)": a body of another kind cannot be handled (400 BadRequest)."""
    error = _raises(core.create_node, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "n1"}})
    assert error.status == 400


def test_unsupported_method_is_405(bare_kube_sim: KubeSim) -> None:
    """API concepts "API verbs": PUT on a collection is not a verb the server offers (405)."""
    answer = httpx.put(f"{bare_kube_sim.url}/api/v1/nodes", json={})
    assert answer.status_code == 405
    assert answer.json()["reason"] == "MethodNotAllowed"


def _raw_patch(api_client: client.ApiClient, path: str, content_type: str, body: Any) -> Any:
    """PATCH ``path`` (``/api/v1/nodes/NAME[/status]``) with an explicit media type, via the client."""
    core = client.CoreV1Api(api_client)
    name = path.split("/")[4]
    if path.endswith("/status"):
        node = core.patch_node_status(name, body, _content_type=content_type)
    else:
        node = core.patch_node(name, body, _content_type=content_type)
    return api_client.sanitize_for_serialization(node)


def test_unknown_patch_content_type_is_415(bare_kube_sim: KubeSim, core: client.CoreV1Api) -> None:
    """API concepts "Patch": only the documented patch media types are accepted (415 otherwise)."""
    core.create_node({"metadata": {"name": "n1"}})
    answer = httpx.patch(
        f"{bare_kube_sim.url}/api/v1/nodes/n1",
        content=b"{}",
        headers={"Content-Type": "application/x-yaml-please"},
    )
    assert answer.status_code == 415
    assert answer.json()["reason"] == "UnsupportedMediaType"


def test_json_merge_patch_replaces_lists_whole(core: client.CoreV1Api, api_client: client.ApiClient) -> None:
    """RFC 7386 via API concepts "Patch": merge-patch+json replaces status.conditions whole."""
    core.create_node(
        {"metadata": {"name": "n1"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    )
    body = {"status": {"conditions": [{"type": "GPUHealthy", "status": "False"}]}}
    result = _raw_patch(api_client, "/api/v1/nodes/n1/status", "application/merge-patch+json", body)
    assert [c["type"] for c in result["status"]["conditions"]] == ["GPUHealthy"]


def test_strategic_merge_on_status_merges_conditions_by_type(core: client.CoreV1Api) -> None:
    """Strategic merge patch (https://kubernetes.io/docs/tasks/manage-kubernetes-objects/update-api-object-kubectl-patch/):
    status.conditions merge by type, so Ready survives a GPUHealthy patch."""
    core.create_node(
        {"metadata": {"name": "n1"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    )
    node = core.patch_node_status(
        "n1", {"status": {"conditions": [{"type": "GPUHealthy", "status": "False"}]}}
    )
    assert sorted(c.type for c in node.status.conditions) == ["GPUHealthy", "Ready"]


def test_json_patch_applies_operations(core: client.CoreV1Api, api_client: client.ApiClient) -> None:
    """RFC 6902 via API concepts "Patch": json-patch+json applies a list of operations."""
    core.create_node({"metadata": {"name": "n1"}})
    ops = [{"op": "add", "path": "/spec/unschedulable", "value": True}]
    result = _raw_patch(api_client, "/api/v1/nodes/n1", "application/json-patch+json", ops)
    assert result["spec"]["unschedulable"] is True


def test_json_patch_test_failure_is_422(core: client.CoreV1Api, api_client: client.ApiClient) -> None:
    """RFC 6902 "test" via API concepts "Patch": a failing test operation makes the patch not apply."""
    core.create_node({"metadata": {"name": "n1"}})
    ops = [{"op": "test", "path": "/metadata/name", "value": "other"}]
    with pytest.raises(ApiException) as caught:
        _raw_patch(api_client, "/api/v1/nodes/n1", "application/json-patch+json", ops)
    assert caught.value.status == 422


def test_main_resource_write_ignores_status(core: client.CoreV1Api) -> None:
    """API conventions "Spec and Status": with a status subresource, writes to the main resource keep
    the stored status."""
    core.create_node(
        {"metadata": {"name": "n1"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    )
    node = core.patch_node(
        "n1",
        {
            "metadata": {"labels": {"a": "b"}},
            "status": {"conditions": [{"type": "Ready", "status": "False"}]},
        },
    )
    assert node.metadata.labels == {"a": "b"}
    assert node.status.conditions[0].status == "True"


def test_status_write_changes_only_status(core: client.CoreV1Api) -> None:
    """API conventions "Spec and Status": a write to /status changes the status and nothing else."""
    core.create_node({"metadata": {"name": "n1"}})
    node = core.patch_node_status(
        "n1",
        {
            "metadata": {"labels": {"sneaky": "yes"}},
            "spec": {"unschedulable": True},
            "status": {"conditions": [{"type": "GPUHealthy", "status": "True"}]},
        },
    )
    assert node.metadata.labels is None
    assert node.spec.unschedulable is None
    assert node.status.conditions[0].type == "GPUHealthy"


def test_pod_create_resets_client_status(core: client.CoreV1Api) -> None:
    """API conventions "Spec and Status": a create through the main resource starts with a fresh status."""
    body = _pod("p1")
    body["status"] = {"phase": "Running"}
    assert core.create_namespaced_pod("default", body).status.phase == "Pending"


def test_generation_bumps_on_spec_change_only(core: client.CoreV1Api) -> None:
    """API conventions "Metadata": generation increases on spec changes, not on metadata or status."""
    batch = client.BatchV1Api(core.api_client)
    job = batch.create_namespaced_job(
        "default",
        {
            "metadata": {"name": "j"},
            "spec": {
                "template": {
                    "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox:1.36"}]}
                }
            },
        },
    )
    assert job.metadata.generation == 1
    job = batch.patch_namespaced_job("j", "default", {"metadata": {"labels": {"a": "b"}}})
    assert job.metadata.generation == 1
    job = batch.patch_namespaced_job("j", "default", {"spec": {"suspend": True}})
    assert job.metadata.generation == 2


def test_pod_node_name_is_immutable(core: client.CoreV1Api) -> None:
    """Pod update and replacement (https://kubernetes.io/docs/concepts/workloads/pods/#pod-update-and-replacement):
    spec.nodeName cannot change once set (422 Forbidden)."""
    core.create_node({"metadata": {"name": "n1"}})
    core.create_namespaced_pod("default", _pod("p1", node="n1"))
    error = _raises(core.patch_namespaced_pod, "p1", "default", {"spec": {"nodeName": "n2"}})
    assert error.status == 422
    assert _status(error)["details"]["causes"][0]["reason"] == "FieldValueForbidden"


def _job(name: str, *, suspend: bool = False) -> dict[str, Any]:
    container = {"name": "c", "image": "trainer:1"}
    return {
        "metadata": {"name": name},
        "spec": {
            "suspend": suspend,
            "template": {"spec": {"restartPolicy": "Never", "containers": [container]}},
        },
    }


def test_a_jobs_pod_template_is_immutable(api_client: client.ApiClient) -> None:
    """JobSpec (API reference): the pod template cannot change (422, spec.template), as kube-apiserver 1.37
    answers in tests/realkube/test_differential.py."""
    batch = client.BatchV1Api(api_client)
    batch.create_namespaced_job("default", _job("j1"))
    change = {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "trainer:2"}]}}}}
    error = _raises(batch.patch_namespaced_job, "j1", "default", change)
    assert error.status == 422
    assert _status(error)["details"]["causes"][0]["field"] == "spec.template"


def test_a_suspended_unstarted_jobs_scheduling_directives_may_change(api_client: client.ApiClient) -> None:
    """JobSpec: while suspended and never started, node selector, affinity, tolerations, scheduling gates and
    the template's labels and annotations are mutable (what Kueue does on admission); the image is not."""
    batch = client.BatchV1Api(api_client)
    batch.create_namespaced_job("default", _job("j2", suspend=True))
    directives = {"spec": {"template": {"spec": {"nodeSelector": {"pool": "a"}}}}}
    patched = batch.patch_namespaced_job("j2", "default", directives)
    assert patched.spec.template.spec.node_selector == {"pool": "a"}
    change = {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "trainer:2"}]}}}}
    assert _raises(batch.patch_namespaced_job, "j2", "default", change).status == 422


def test_pod_binding_sets_node_name_once(core: client.CoreV1Api) -> None:
    """Pod binding subresource (scheduler API, API reference "Binding"): sets spec.nodeName; a second
    binding is 409 Conflict."""
    core.create_namespaced_pod("default", _pod("p1"))
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "p1"},
        "target": {"kind": "Node", "name": "n1"},
    }
    core.create_namespaced_binding("default", binding, _preload_content=False)
    pod = core.read_namespaced_pod("p1", "default")
    assert pod.spec.node_name == "n1"
    assert any(c.type == "PodScheduled" and c.status == "True" for c in pod.status.conditions)
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_pod_binding("p1", "default", binding, _preload_content=False)
    assert caught.value.status == 409


def test_graceful_pod_delete_keeps_the_pod_until_the_grace_period_ends(
    bare_kube_sim: KubeSim, core: client.CoreV1Api
) -> None:
    """Termination of Pods (https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#pod-termination):
    a scheduled pod gets deletionTimestamp + deletionGracePeriodSeconds and stays until the grace ends."""
    core.create_namespaced_pod("default", _pod("p1", node="n1"))
    deleted = core.delete_namespaced_pod("p1", "default", grace_period_seconds=30)
    assert deleted.metadata.deletion_timestamp is not None
    assert deleted.metadata.deletion_grace_period_seconds == 30
    assert core.read_namespaced_pod("p1", "default").metadata.deletion_timestamp is not None
    bare_kube_sim.clock.advance(31)  # type: ignore[attr-defined]
    assert _raises(core.read_namespaced_pod, "p1", "default").status == 404


def test_unscheduled_pod_is_deleted_at_once(core: client.CoreV1Api) -> None:
    """Termination of Pods: a pod never bound to a node has nothing to stop and is removed immediately."""
    core.create_namespaced_pod("default", _pod("p1"))
    core.delete_namespaced_pod("p1", "default")
    assert _raises(core.read_namespaced_pod, "p1", "default").status == 404


def test_finalizers_keep_a_deleted_object_until_removed(core: client.CoreV1Api) -> None:
    """Finalizers (https://kubernetes.io/docs/concepts/overview/working-with-objects/finalizers/): delete
    sets deletionTimestamp; the object goes when the last finalizer is removed."""
    core.create_namespaced_config_map(
        "default", {"metadata": {"name": "cm", "finalizers": ["example.com/hold"]}}
    )
    core.delete_namespaced_config_map("cm", "default")
    held = core.read_namespaced_config_map("cm", "default")
    assert held.metadata.deletion_timestamp is not None
    core.patch_namespaced_config_map("cm", "default", {"metadata": {"finalizers": None}})
    assert _raises(core.read_namespaced_config_map, "cm", "default").status == 404


def test_delete_precondition_uid_mismatch_is_409(core: client.CoreV1Api) -> None:
    """API reference DeleteOptions.preconditions: a uid that does not match is 409 Conflict."""
    core.create_node({"metadata": {"name": "n1"}})
    error = _raises(core.delete_node, "n1", body={"preconditions": {"uid": "not-the-uid"}})
    assert error.status == 409
    assert "Precondition failed" in _status(error)["message"]


def test_delete_of_a_node_answers_a_success_status(core: client.CoreV1Api) -> None:
    """API concepts "Delete": types that do not return the deleted object answer Status Success."""
    core.create_node({"metadata": {"name": "n1"}})
    answer = core.delete_node("n1")
    assert answer["status"] == "Success"
    assert answer["details"]["name"] == "n1"


def test_deletecollection_honours_label_selector(core: client.CoreV1Api) -> None:
    """API concepts "API verbs" deletecollection: deletes the selected objects only."""
    for name, team in (("a", "x"), ("b", "x"), ("c", "y")):
        core.create_namespaced_config_map("default", {"metadata": {"name": name, "labels": {"team": team}}})
    core.delete_collection_namespaced_config_map("default", label_selector="team=x")
    names = [cm.metadata.name for cm in core.list_namespaced_config_map("default").items]
    assert names == ["c"]


def test_namespace_delete_removes_its_contents(core: client.CoreV1Api) -> None:
    """Namespaces (https://kubernetes.io/docs/concepts/overview/working-with-objects/namespaces/): deleting
    a namespace deletes everything in it."""
    core.create_namespace({"metadata": {"name": "team"}})
    core.create_namespaced_config_map("team", {"metadata": {"name": "cm"}})
    answer = core.delete_namespace("team")
    assert answer["status"]["phase"] == "Terminating"
    assert _raises(core.read_namespace, "team").status == 404
    assert core.list_config_map_for_all_namespaces().items == []


def test_default_namespace_cannot_be_deleted(core: client.CoreV1Api) -> None:
    """Namespaces: the system namespaces (default, kube-system, kube-public) are protected (403)."""
    assert _raises(core.delete_namespace, "default").status == 403


def test_events_are_one_object_in_both_event_apis(core: client.CoreV1Api) -> None:
    """Event v1 (events.k8s.io) (https://kubernetes.io/docs/reference/kubernetes-api/cluster-resources/event-v1/):
    an event written through events.k8s.io/v1 is read through core v1 with the renamed fields, and the
    events.k8s.io field selectors (regarding.name) work on it."""
    events = client.EventsV1Api(core.api_client)
    events.create_namespaced_event(
        "default",
        {
            "metadata": {"name": "n1.gpu"},
            "eventTime": "2026-01-01T00:00:00.000000Z",
            "regarding": {"kind": "Node", "name": "n1"},
            "note": "XID 79: GPU has fallen off the bus",
            "reason": "GPUHealthUnhealthy",
            "type": "Warning",
            "action": "Taint",
            "reportingController": "gpuhealth.io/agent",
            "reportingInstance": "agent-n1",
        },
    )
    legacy = core.read_namespaced_event("n1.gpu", "default")
    assert legacy.involved_object.name == "n1"
    assert legacy.message == "XID 79: GPU has fallen off the bus"
    assert legacy.reporting_component == "gpuhealth.io/agent"
    selected = events.list_namespaced_event("default", field_selector="regarding.name=n1").items
    assert [e.note for e in selected] == ["XID 79: GPU has fallen off the bus"]
    core.patch_namespaced_event("n1.gpu", "default", {"message": "updated"})
    assert events.read_namespaced_event("n1.gpu", "default").note == "updated"
