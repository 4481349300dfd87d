"""Differential suite: the same requests against ``sim/kube`` and kube-apiserver 1.37, compared.

Each probe sends what the product (executor, drain, requeue) or the emulator's own conformance tests send,
through the product's request path (``remediation.kubernetes.rest.RestClient``), and reduces the answer to
what the product reads: the HTTP status, the Status ``reason``, the ``Retry-After`` header, the first
cause's reason, and a few fields of a successful answer. A probe whose outcomes differ fails, unless it is
listed in ``KNOWN_DIFFERENCES`` with the reason (also in ``sim/README.md``), where it must still differ.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from control_plane import ControlPlane
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from realkube import Cluster
from waiting import wait_until

from core.clock import RealClock
from remediation.kubernetes.rest import JSON, MERGE_PATCH, STRATEGIC_MERGE_PATCH, RestClient
from sim.kube.harness import running_kube_sim

JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"


@dataclass(frozen=True)
class Outcome:
    """What the product reads of one answer."""

    status: int
    reason: str | None = None
    retry_after: str | None = None
    cause: str | None = None
    fields: tuple[tuple[str, Any], ...] = field(default=())


@dataclass
class Target:
    """One API server under test, its admin client, a namespace and two nodes."""

    name: str
    api_client: client.ApiClient
    namespace: str
    nodes: list[str]
    serial: Iterator[int] = field(default_factory=lambda: iter(range(10**6)))

    @property
    def rest(self) -> RestClient:
        return RestClient(self.api_client, request_timeout_s=10.0)

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api_client)

    def unique(self, stem: str) -> str:
        return f"{stem}-{next(self.serial)}"

    def send(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str | None = None,
        query: tuple[tuple[str, str], ...] = (),
        pick: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> Outcome:
        """One request; the outcome (``pick`` chooses the fields of a 2xx answer that are compared)."""
        if body is not None and content_type is None:
            content_type = JSON
        try:
            answer = self.rest.json(method, path, body=body, content_type=content_type, query=list(query))
        except ApiException as exc:
            status = json.loads(exc.body) if exc.body else {}
            causes = (status.get("details") or {}).get("causes") or [{}]
            headers = exc.headers or {}
            return Outcome(
                int(exc.status), status.get("reason"), headers.get("Retry-After"), causes[0].get("reason")
            )
        picked = pick(answer) if pick else {}
        return Outcome(200, fields=tuple(sorted(picked.items())))

    def pod(
        self,
        *,
        labels: dict[str, str] | None = None,
        node: str | None = None,
        grace: int = 0,
        finalizers: list[str] | None = None,
    ) -> str:
        """A Running pod bound to ``node`` (default the first); returns its name."""
        name = self.unique("pod")
        body = {
            "metadata": {"name": name, "labels": labels or {}, "finalizers": finalizers or []},
            "spec": {
                "nodeName": node or self.nodes[0],
                "terminationGracePeriodSeconds": grace,
                "containers": [{"name": "c", "image": "trainer"}],
            },
        }
        self.core.create_namespaced_pod(self.namespace, body)
        self.wait(lambda: self.core.read_namespaced_pod(name, self.namespace).status.phase == "Running")
        return name

    def pdb(self, labels: dict[str, str], *, min_available: int, expected: int) -> str:
        name = self.unique("pdb")
        policy = client.PolicyV1Api(self.api_client)
        body = {
            "metadata": {"name": name},
            "spec": {"minAvailable": min_available, "selector": {"matchLabels": labels}},
        }
        policy.create_namespaced_pod_disruption_budget(self.namespace, body)

        def computed() -> bool:
            status = policy.read_namespaced_pod_disruption_budget(name, self.namespace).status
            return status is not None and status.expected_pods == expected and status.observed_generation == 1

        self.wait(computed)
        return name

    @staticmethod
    def wait(predicate: Callable[[], bool]) -> None:
        assert wait_until(predicate, interval=0.05), "hang guard"


# --- probes -------------------------------------------------------------------------------------------------


def node_path(t: Target, node: str | None = None, sub: str = "") -> str:
    return f"/api/v1/nodes/{node or t.nodes[0]}{sub}"


def pods_path(t: Target, name: str = "", sub: str = "") -> str:
    return f"/api/v1/namespaces/{t.namespace}/pods" + (f"/{name}" if name else "") + sub


def eviction(t: Target, pod: str) -> Outcome:
    body = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": pod, "namespace": t.namespace},
    }
    return t.send("POST", pods_path(t, pod, "/eviction"), body)


def probe_get_missing_node(t: Target) -> Outcome:
    return t.send("GET", node_path(t, "no-such-node"))


def probe_create_in_missing_namespace(t: Target) -> Outcome:
    body = {"metadata": {"name": "x"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
    return t.send("POST", "/api/v1/namespaces/no-such-namespace/pods", body)


def probe_create_twice_is_already_exists(t: Target) -> Outcome:
    name = t.unique("cm")
    t.send("POST", f"/api/v1/namespaces/{t.namespace}/configmaps", {"metadata": {"name": name}})
    return t.send("POST", f"/api/v1/namespaces/{t.namespace}/configmaps", {"metadata": {"name": name}})


def probe_create_with_resource_version(t: Target) -> Outcome:
    body = {"metadata": {"name": t.unique("cm"), "resourceVersion": "5"}}
    return t.send("POST", f"/api/v1/namespaces/{t.namespace}/configmaps", body)


def probe_node_patch_with_stale_resource_version(t: Target) -> Outcome:
    """The executor's taint patch carries the resourceVersion it read."""
    body = {"metadata": {"resourceVersion": "1"}, "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}}
    return t.send("PATCH", node_path(t), body, content_type=STRATEGIC_MERGE_PATCH)


def probe_taints_are_replaced_whole_by_a_strategic_merge(t: Target) -> Outcome:
    node = t.nodes[1]
    first = {"spec": {"taints": [{"key": "a", "effect": "NoSchedule"}]}}
    t.send("PATCH", node_path(t, node), first, content_type=STRATEGIC_MERGE_PATCH)
    second = {
        "spec": {"taints": [{"key": "gpuhealth.io/unhealthy", "value": "reboot", "effect": "NoSchedule"}]}
    }
    outcome = t.send(
        "PATCH",
        node_path(t, node),
        second,
        content_type=STRATEGIC_MERGE_PATCH,
        pick=lambda n: {
            "taints": [(x["key"], x.get("value"), x["effect"]) for x in n["spec"].get("taints", [])]
        },
    )
    t.send("PATCH", node_path(t, node), {"spec": {"taints": None}}, content_type=STRATEGIC_MERGE_PATCH)
    return outcome


def probe_condition_merges_by_type_on_the_status_subresource(t: Target) -> Outcome:
    condition = {"type": "GPUHealthy", "status": "False", "reason": "XID_79", "message": "fell off the bus"}

    def pick(node: dict[str, Any]) -> dict[str, Any]:
        conditions = {c["type"]: c for c in node["status"]["conditions"]}
        ours = conditions["GPUHealthy"]
        return {
            # The other conditions are kept (which ones a node has is up to its kubelet: KWOK's also
            # reports NetworkUnavailable, the emulated fleet's does not).
            "kept": {"Ready", "MemoryPressure", "DiskPressure", "PIDPressure"} <= set(conditions),
            "ours": (ours["status"], ours["reason"], ours["message"]),
            "transition": ours.get("lastTransitionTime"),  # null on the wire for a Go zero time
        }

    body = {"status": {"conditions": [condition]}}
    return t.send("PATCH", node_path(t, sub="/status"), body, content_type=STRATEGIC_MERGE_PATCH, pick=pick)


def probe_status_write_through_the_main_resource_is_ignored(t: Target) -> Outcome:
    body = {"status": {"conditions": [{"type": "Probe", "status": "True"}]}}
    return t.send(
        "PATCH",
        node_path(t),
        body,
        content_type=STRATEGIC_MERGE_PATCH,
        pick=lambda n: {"probe": any(c["type"] == "Probe" for c in n["status"]["conditions"])},
    )


def probe_label_and_annotation_patch_by_merge_patch(t: Target) -> Outcome:
    body = {
        "metadata": {
            "labels": {"gpuhealth.io/state": "unhealthy"},
            "annotations": {"gpuhealth.io/incident": "i"},
        }
    }
    outcome = t.send(
        "PATCH",
        node_path(t),
        body,
        content_type=MERGE_PATCH,
        pick=lambda n: {
            "label": n["metadata"]["labels"]["gpuhealth.io/state"],
            "annotation": n["metadata"]["annotations"]["gpuhealth.io/incident"],
        },
    )
    undo = {
        "metadata": {"labels": {"gpuhealth.io/state": None}, "annotations": {"gpuhealth.io/incident": None}}
    }
    t.send("PATCH", node_path(t), undo, content_type=MERGE_PATCH)
    return outcome


def probe_invalid_label_value(t: Target) -> Outcome:
    body = {"metadata": {"labels": {"gpuhealth.io/state": "not valid!"}}}
    return t.send("PATCH", node_path(t), body, content_type=MERGE_PATCH)


def probe_invalid_taint_effect(t: Target) -> Outcome:
    body = {"spec": {"taints": [{"key": "gpuhealth.io/unhealthy", "effect": "Sometimes"}]}}
    return t.send("PATCH", node_path(t), body, content_type=STRATEGIC_MERGE_PATCH)


def probe_json_patch_test_failure(t: Target) -> Outcome:
    body = [{"op": "test", "path": "/spec/unschedulable", "value": True}]
    return t.send("PATCH", node_path(t), body, content_type=JSON_PATCH)


def probe_unknown_patch_content_type(t: Target) -> Outcome:
    return t.send("PATCH", node_path(t), {"metadata": {}}, content_type="application/x-unknown-patch")


def probe_cordon_and_uncordon(t: Target) -> Outcome:
    node = t.nodes[1]
    cordoned = t.send(
        "PATCH",
        node_path(t, node),
        {"spec": {"unschedulable": True}},
        content_type=STRATEGIC_MERGE_PATCH,
        pick=lambda n: {"unschedulable": n["spec"].get("unschedulable")},
    )
    uncordoned = t.send(
        "PATCH",
        node_path(t, node),
        {"spec": {"unschedulable": False}},
        content_type=STRATEGIC_MERGE_PATCH,
        pick=lambda n: {"unschedulable": n["spec"].get("unschedulable")},
    )
    return Outcome(cordoned.status, fields=(("cordoned", cordoned.fields), ("uncordoned", uncordoned.fields)))


def probe_list_pods_of_a_node(t: Target) -> Outcome:
    """The drain's list: fieldSelector spec.nodeName, items without kind."""
    name = t.pod()
    return t.send(
        "GET",
        pods_path(t),
        query=(("fieldSelector", f"spec.nodeName={t.nodes[0]}"),),
        pick=lambda body: {
            "kind": body["kind"],
            "found": name in [p["metadata"]["name"] for p in body["items"]],
            "item_kind": body["items"][0].get("kind"),
        },
    )


def probe_unsupported_field_selector(t: Target) -> Outcome:
    return t.send("GET", pods_path(t), query=(("fieldSelector", "spec.schedulerName=x"),))


def probe_list_nodes_by_name_has_a_resource_version(t: Target) -> Outcome:
    """The executor's watch starts from this list."""
    return t.send(
        "GET",
        "/api/v1/nodes",
        query=(("fieldSelector", f"metadata.name={t.nodes[0]}"),),
        pick=lambda body: {
            "items": len(body["items"]),
            "has_version": bool(body["metadata"].get("resourceVersion")),
        },
    )


def probe_evict_a_missing_pod(t: Target) -> Outcome:
    return eviction(t, "no-such-pod")


HOLD = "gpuhealth.test/hold"


def probe_eviction_allowed_marks_disruption_target(t: Target) -> Outcome:
    # The finalizer keeps the evicted pod readable: a kubelet may finish a terminating pod at once (the test
    # kubelets do), and without the hold the read below races it.
    name = t.pod(grace=30, finalizers=[HOLD])
    outcome = eviction(t, name)
    pod = t.core.read_namespaced_pod(name, t.namespace)
    t.core.patch_namespaced_pod(name, t.namespace, {"metadata": {"finalizers": None}})
    condition = next((c for c in pod.status.conditions or [] if c.type == "DisruptionTarget"), None)
    return Outcome(
        outcome.status,
        outcome.reason,
        fields=(
            ("condition", (condition.status, condition.reason) if condition else None),
            ("terminating", pod.metadata.deletion_timestamp is not None),
        ),
    )


def probe_eviction_blocked_by_a_budget(t: Target) -> Outcome:
    labels = {"app": t.unique("blocked")}
    name = t.pod(labels=labels)
    t.pdb(labels, min_available=1, expected=1)
    return eviction(t, name)


def probe_eviction_with_two_budgets(t: Target) -> Outcome:
    labels = {"app": t.unique("two")}
    name = t.pod(labels=labels)
    t.pdb(labels, min_available=0, expected=1)
    t.pdb(labels, min_available=0, expected=1)
    return eviction(t, name)


def probe_eviction_name_mismatch(t: Target) -> Outcome:
    name = t.pod()
    body = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": "other", "namespace": t.namespace},
    }
    return t.send("POST", pods_path(t, name, "/eviction"), body)


def probe_pod_node_name_is_immutable(t: Target) -> Outcome:
    name = t.pod()
    return t.send(
        "PATCH", pods_path(t, name), {"spec": {"nodeName": t.nodes[1]}}, content_type=STRATEGIC_MERGE_PATCH
    )


def probe_delete_with_a_wrong_uid_precondition(t: Target) -> Outcome:
    name = t.pod()
    body = {"preconditions": {"uid": "00000000-0000-0000-0000-000000000000"}}
    return t.send("DELETE", pods_path(t, name), body)


def probe_put_with_a_name_mismatch(t: Target) -> Outcome:
    name = t.unique("cm")
    t.send("POST", f"/api/v1/namespaces/{t.namespace}/configmaps", {"metadata": {"name": name}})
    body = {"metadata": {"name": "other"}}
    return t.send("PUT", f"/api/v1/namespaces/{t.namespace}/configmaps/{name}", body)


def core_event(t: Target, namespace: str) -> tuple[str, dict[str, Any]]:
    name = t.unique("ev")
    return name, {
        "metadata": {"name": name, "namespace": namespace},
        "involvedObject": {"kind": "Node", "name": t.nodes[0], "apiVersion": "v1"},
        "reason": "GPUHealthUnhealthy",
        "message": "XID 79",
        "type": "Warning",
        "source": {"component": "gpuhealth-agent"},
        "firstTimestamp": "2026-01-01T00:00:00Z",
        "lastTimestamp": "2026-01-01T00:00:00Z",
        "count": 1,
    }


def probe_node_event_outside_default_is_invalid(t: Target) -> Outcome:
    """An Event about a cluster-scoped object belongs in ``default`` (where the executor writes it)."""
    _, body = core_event(t, t.namespace)
    return t.send("POST", f"/api/v1/namespaces/{t.namespace}/events", body)


def probe_node_event_is_served_as_events_k8s_io(t: Target) -> Outcome:
    """The executor's Event: a core v1 POST in ``default``; read back through events.k8s.io/v1."""
    name, body = core_event(t, "default")
    created = t.send("POST", "/api/v1/namespaces/default/events", body)
    read = t.send(
        "GET",
        f"/apis/events.k8s.io/v1/namespaces/default/events/{name}",
        pick=lambda e: {
            "regarding": e["regarding"]["name"] == t.nodes[0],
            "note": e.get("note"),
            "reason": e["reason"],
        },
    )
    return Outcome(created.status, created.reason, fields=(("read", read),))


def probe_server_side_apply_needs_a_field_manager(t: Target) -> Outcome:
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": t.unique("cm")}}
    return t.send(
        "PATCH",
        f"/api/v1/namespaces/{t.namespace}/configmaps/{body['metadata']['name']}",
        body,
        content_type=APPLY_PATCH,
    )


def probe_dry_run_create(t: Target) -> Outcome:
    name = t.unique("cm")
    created = t.send(
        "POST",
        f"/api/v1/namespaces/{t.namespace}/configmaps",
        {"metadata": {"name": name}},
        query=(("dryRun", "All"),),
    )
    stored = t.send("GET", f"/api/v1/namespaces/{t.namespace}/configmaps/{name}")
    return Outcome(created.status, created.reason, fields=(("stored", stored.status),))


def watch_events(t: Target, query: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """The events of one watch the server ends after a second (bookmarks included)."""
    response = t.rest.request(
        "GET", "/api/v1/nodes", query=[("watch", "true"), ("timeoutSeconds", "1"), *query]
    )
    try:
        return [json.loads(line) for line in response.data.splitlines() if line.strip()]
    finally:
        response.release_conn()


def probe_node_watch_from_the_lists_version_sees_a_change(t: Target) -> Outcome:
    """The executor's node watch: list with fieldSelector metadata.name, then watch from its version with
    bookmarks; a label patch in between arrives as MODIFIED carrying the new label."""
    node = t.nodes[1]
    selector = ("fieldSelector", f"metadata.name={node}")
    listed = t.rest.json("GET", "/api/v1/nodes", query=[selector])
    value = t.unique("v")
    t.send("PATCH", node_path(t, node), {"metadata": {"labels": {"probe": value}}}, content_type=MERGE_PATCH)
    events = watch_events(
        t,
        [
            selector,
            ("resourceVersion", listed["metadata"]["resourceVersion"]),
            ("allowWatchBookmarks", "true"),
        ],
    )
    changes = [e for e in events if e["type"] != "BOOKMARK"]
    seen = [
        (e["type"], e["object"]["metadata"]["name"] == node, e["object"]["metadata"]["labels"].get("probe"))
        for e in changes
    ]
    return Outcome(200, fields=(("changes", seen),))


def probe_node_watch_from_version_zero_starts_with_added(t: Target) -> Outcome:
    """A watch from "0" starts with a synthetic ADDED of the current object."""
    events = watch_events(t, [("fieldSelector", f"metadata.name={t.nodes[0]}"), ("resourceVersion", "0")])
    return Outcome(200, fields=(("types", [e["type"] for e in events if e["type"] != "BOOKMARK"]),))


def probe_eviction_of_a_pending_pod_ignores_the_budget(t: Target) -> Outcome:
    """A pod that never ran causes no disruption: evicted (201) although its budget allows none."""
    labels = {"app": t.unique("pending")}
    name = t.unique("pod")
    body = {
        "metadata": {"name": name, "labels": labels},
        "spec": {"nodeSelector": {"no-such": "node"}, "containers": [{"name": "c", "image": "i"}]},
    }
    t.core.create_namespaced_pod(t.namespace, body)
    t.pdb(labels, min_available=1, expected=1)
    return eviction(t, name)


def probe_job_pod_template_is_immutable(t: Target) -> Outcome:
    """A running Job's pod template cannot change (the API reference, JobSpec.template)."""
    name = t.unique("job")
    container = {"name": "c", "image": "trainer:1"}
    body = {
        "metadata": {"name": name},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [container]}}},
    }
    t.send("POST", f"/apis/batch/v1/namespaces/{t.namespace}/jobs", body)
    change = {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "trainer:2"}]}}}}
    return t.send(
        "PATCH",
        f"/apis/batch/v1/namespaces/{t.namespace}/jobs/{name}",
        change,
        content_type=STRATEGIC_MERGE_PATCH,
    )


def probe_suspended_job_scheduling_directives_may_change(t: Target) -> Outcome:
    """A suspended Job that never started: its template's node selector may change (Kueue's admission)."""
    name = t.unique("job")
    container = {"name": "c", "image": "trainer:1"}
    body = {
        "metadata": {"name": name},
        "spec": {
            "suspend": True,
            "template": {"spec": {"restartPolicy": "Never", "containers": [container]}},
        },
    }
    t.send("POST", f"/apis/batch/v1/namespaces/{t.namespace}/jobs", body)
    change = {"spec": {"template": {"spec": {"nodeSelector": {"pool": "a"}}}}}
    return t.send(
        "PATCH",
        f"/apis/batch/v1/namespaces/{t.namespace}/jobs/{name}",
        change,
        content_type=STRATEGIC_MERGE_PATCH,
        pick=lambda job: {"selector": job["spec"]["template"]["spec"].get("nodeSelector")},
    )


def probe_percentage_budget_over_job_pods(t: Target) -> Outcome:
    """minAvailable 50% over a Job's pods: a percentage needs the owner's scale subresource, which a Job has
    not, so the disruption controller cannot compute it: nothing may be disrupted."""
    name = t.unique("job")
    labels = {"app": name}
    body = {
        "metadata": {"name": name},
        "spec": {
            "parallelism": 2,
            "completions": 2,
            "template": {
                "metadata": {"labels": labels},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "trainer"}]},
            },
        },
    }
    t.send("POST", f"/apis/batch/v1/namespaces/{t.namespace}/jobs", body)
    t.wait(
        lambda: (
            len(
                [
                    p
                    for p in t.core.list_namespaced_pod(t.namespace, label_selector=f"app={name}").items
                    if p.status.phase == "Running"
                ]
            )
            == 2
        )
    )
    policy = client.PolicyV1Api(t.api_client)
    pdb = {"metadata": {"name": name}, "spec": {"minAvailable": "50%", "selector": {"matchLabels": labels}}}
    policy.create_namespaced_pod_disruption_budget(t.namespace, pdb)

    def observed() -> bool:
        status = policy.read_namespaced_pod_disruption_budget(name, t.namespace).status
        return status is not None and any(c.type == "DisruptionAllowed" for c in status.conditions or [])

    t.wait(observed)
    status = t.api_client.sanitize_for_serialization(
        policy.read_namespaced_pod_disruption_budget(name, t.namespace).status
    )
    condition: dict[str, Any] = next(
        (c for c in status.get("conditions", []) if c["type"] == "DisruptionAllowed"), {}
    )
    return Outcome(
        200,
        fields=(
            ("allowed", status.get("disruptionsAllowed")),
            ("condition", (condition.get("status"), condition.get("reason"))),
        ),
    )


PROBES: dict[str, Callable[[Target], Outcome]] = {
    name.removeprefix("probe_"): fn for name, fn in sorted(globals().items()) if name.startswith("probe_")
}

# Where the emulator knowingly answers otherwise (each also listed in sim/README.md, "What is not emulated").
KNOWN_DIFFERENCES: dict[str, str] = {
    "dry_run_create": "dryRun is refused with 400 rather than emulated (a dry run must never be committed)",
}


# --- the two servers ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sim_target() -> Iterator[Target]:
    with running_kube_sim(clock=RealClock(), nodes=2, bookmark_interval_s=0.2) as sim:
        sim.store.create("namespaces", {"metadata": {"name": "diff"}})
        api_client = sim.api_client()
        yield Target("sim", api_client, "diff", ["gpu-node-0", "gpu-node-1"])
        api_client.close()


@pytest.fixture(scope="module")
def real_target(kube_stack: ControlPlane) -> Iterator[Target]:
    cluster = Cluster(kube_stack, nodes=2)
    try:
        yield Target("real", cluster.admin, cluster.namespace, cluster.node_names)
    finally:
        with contextlib.suppress(Exception):
            cluster.close()


@pytest.mark.parametrize("probe", PROBES)
def test_the_emulator_answers_as_kube_apiserver_does(
    sim_target: Target, real_target: Target, probe: str
) -> None:
    """Same request, same outcome (status, reason, Retry-After, first cause, the fields the product reads)."""
    real = PROBES[probe](real_target)
    emulated = PROBES[probe](sim_target)
    if probe in KNOWN_DIFFERENCES:
        assert emulated != real, (
            f"{probe} no longer differs: drop it from KNOWN_DIFFERENCES and sim/README.md"
        )
        pytest.xfail(KNOWN_DIFFERENCES[probe])
    assert emulated == real


def _patch_parameters(target: Target, path: str, kind: str) -> set[str] | None:
    """The query parameters of the PATCH tagged with ``kind`` (cli-runtime's QueryParamVerifierV3 lookup)."""
    document = target.rest.json("GET", f"/openapi/v3/{path}")
    for item in document["paths"].values():
        operation = item.get("patch") or {}
        gvk = operation.get("x-kubernetes-group-version-kind") or {}
        if gvk.get("kind") == kind:
            return {p["name"] for p in operation.get("parameters", []) if p.get("in") == "query"}
    return None


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("api/v1", "Node"),
        ("api/v1", "Pod"),
        ("apis/batch/v1", "Job"),
        ("apis/policy/v1", "PodDisruptionBudget"),
    ],
)
def test_the_openapi_v3_documents_kubectl_reads_agree(
    sim_target: Target, real_target: Target, path: str, kind: str
) -> None:
    """Both indexes list the group version; in both documents the kind's PATCH takes fieldValidation and
    fieldManager, so kubectl validates on the server against either."""
    for target in (sim_target, real_target):
        index = target.rest.json("GET", "/openapi/v3")
        assert path in index["paths"], (target.name, path)
        parameters = _patch_parameters(target, path, kind)
        assert parameters is not None and {"fieldValidation", "fieldManager"} <= parameters, target.name
