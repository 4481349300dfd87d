"""Each plan step as the Kubernetes executor applies it, and what applying it twice leaves behind.

The official client talks HTTP to the emulated API server (``sim.kube``); assertions read the emulator's store.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kubernetes import client

from core.clock import ManualClock
from core.steps import (
    Cordon,
    EmitEvent,
    RemoveTaint,
    RequestPermit,
    SetCondition,
    SetIncidentAnnotation,
    SetStateLabel,
    SetTaint,
    Step,
    Uncordon,
)
from remediation.kubernetes.executor import KubernetesExecutor
from sim.kube.harness import KubeSim

NODE = "gpu-node-0"
StoredNode = Callable[..., dict[str, Any]]

UNHEALTHY = SetCondition("False", "XID_79", "GPU 0 has fallen off the bus")


def condition(node: dict[str, Any], kind: str = "GPUHealthy") -> dict[str, Any] | None:
    return next((c for c in node["status"]["conditions"] if c["type"] == kind), None)


def test_set_condition_adds_gpuhealthy_and_keeps_ready_and_the_kubelet_conditions(
    executor: KubernetesExecutor, stored_node: StoredNode
) -> None:
    """A strategic merge by type: our condition joins the list, the kubelet's stay as they were."""
    before = stored_node()["status"]["conditions"]

    report = executor.apply([UNHEALTHY])

    assert report.results[0].ok, report.results[0].detail
    after = stored_node()["status"]["conditions"]
    assert [c for c in after if c["type"] != "GPUHealthy"] == before
    ours = condition(stored_node())
    assert ours is not None
    assert (ours["status"], ours["reason"], ours["message"]) == (
        "False",
        "XID_79",
        "GPU 0 has fallen off the bus",
    )


def test_last_transition_time_moves_only_when_the_status_changes(
    executor: KubernetesExecutor, stored_node: StoredNode, clock: ManualClock
) -> None:
    """A new reason with the same status keeps lastTransitionTime and moves lastHeartbeatTime."""
    executor.apply([UNHEALTHY])
    first = condition(stored_node())
    assert first is not None

    clock.advance(60)
    executor.apply([SetCondition("False", "ROW_REMAP_PENDING", "row remap pending on GPU 3")])
    second = condition(stored_node())
    assert second is not None
    assert second["lastTransitionTime"] == first["lastTransitionTime"]
    assert second["lastHeartbeatTime"] != first["lastHeartbeatTime"]

    clock.advance(60)
    executor.apply([SetCondition("True", "AllChecksPassed", "all GPU checks pass")])
    third = condition(stored_node())
    assert third is not None
    assert third["lastTransitionTime"] == third["lastHeartbeatTime"] != second["lastTransitionTime"]


def test_set_condition_twice_writes_once(executor: KubernetesExecutor, sim: KubeSim) -> None:
    """The same condition again is "unchanged": no second write, one GPUHealthy entry."""
    executor.apply([UNHEALTHY])
    version = sim.store.resource_version
    writes = executor.writes_total

    result = executor.apply([UNHEALTHY]).results[0]

    assert (result.ok, result.detail) == (True, "unchanged")
    assert executor.writes_total == writes
    assert sim.store.resource_version == version


def test_state_label_and_incident_annotation_are_set_and_the_annotation_removed_with_none(
    executor: KubernetesExecutor, stored_node: StoredNode
) -> None:
    """Metadata patches touch only our keys; SetIncidentAnnotation(None) deletes the annotation."""
    labels_before = dict(stored_node()["metadata"]["labels"])

    report = executor.apply([SetStateLabel("unhealthy"), SetIncidentAnnotation("inc-gpu-node-0-1")])

    assert all(result.ok for result in report.results)
    metadata = stored_node()["metadata"]
    assert metadata["labels"] == {**labels_before, "gpuhealth.io/state": "unhealthy"}
    assert metadata["annotations"]["gpuhealth.io/incident"] == "inc-gpu-node-0-1"
    assert metadata["annotations"]["node.alpha.kubernetes.io/ttl"] == "0"

    executor.apply([SetIncidentAnnotation(None), SetStateLabel("unhealthy")])
    metadata = stored_node()["metadata"]
    assert "gpuhealth.io/incident" not in metadata["annotations"]
    assert metadata["labels"]["gpuhealth.io/state"] == "unhealthy"


def test_state_label_and_incident_annotation_next_to_each_other_are_one_write(
    executor: KubernetesExecutor, stored_node: StoredNode
) -> None:
    """The planner puts the label and the annotation next to each other: one merge patch carries both (a
    fault's pass writes one request less, and every watcher of the node sees one event less); each step
    still has its own result. Apart, or with another step between them, each is its own write."""
    writes = executor.writes_total

    report = executor.apply([SetStateLabel("unhealthy"), SetIncidentAnnotation("inc-gpu-node-0-1")])

    assert [(r.ok, r.detail) for r in report.results] == [(True, "label set"), (True, "annotation set")]
    assert executor.writes_total == writes + 1
    metadata = stored_node()["metadata"]
    assert metadata["labels"]["gpuhealth.io/state"] == "unhealthy"
    assert metadata["annotations"]["gpuhealth.io/incident"] == "inc-gpu-node-0-1"

    writes = executor.writes_total
    report = executor.apply([SetStateLabel("healthy"), UNHEALTHY, SetIncidentAnnotation(None)])

    assert [r.detail for r in report.results] == ["label set", "condition set", "annotation removed"]
    assert executor.writes_total == writes + 3


def test_set_taint_keeps_every_other_taint_in_order_and_applying_twice_leaves_one(
    executor: KubernetesExecutor, human: client.CoreV1Api, stored_node: StoredNode
) -> None:
    """Our taint joins the atomic list; others (a human's, the GPU operator's) stay where they were."""
    others = [
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
        {"key": "team", "value": "research", "effect": "PreferNoSchedule"},
    ]
    human.patch_node(NODE, {"spec": {"taints": others}})

    executor.apply([SetTaint("reboot")])
    executor.apply([SetTaint("reboot")])

    assert stored_node()["spec"]["taints"] == [
        *others,
        {"key": "gpuhealth.io/unhealthy", "value": "reboot", "effect": "NoSchedule"},
    ]


def test_set_taint_with_a_new_action_updates_our_taint_in_place(
    executor: KubernetesExecutor, human: client.CoreV1Api, stored_node: StoredNode
) -> None:
    """The incident's action grows from reset_gpu to reboot: one taint, same position, new value."""
    executor.apply([SetTaint("reset_gpu")])
    human.patch_node(
        NODE,
        {"spec": {"taints": [*stored_node()["spec"]["taints"], {"key": "late", "effect": "NoSchedule"}]}},
    )

    result = executor.apply([SetTaint("reboot")]).results[0]

    assert result.ok
    assert stored_node()["spec"]["taints"] == [
        {"key": "gpuhealth.io/unhealthy", "value": "reboot", "effect": "NoSchedule"},
        {"key": "late", "effect": "NoSchedule"},
    ]


def test_a_noexecute_taint_carries_time_added(
    executor: KubernetesExecutor, stored_node: StoredNode, clock: ManualClock
) -> None:
    """NoExecute (only when configured) needs timeAdded: the taint manager counts tolerations from it."""
    executor.apply([SetTaint("reboot", effect="NoExecute")])

    (taint,) = stored_node()["spec"]["taints"]
    assert taint["effect"] == "NoExecute"
    assert taint["timeAdded"] == clock.now().strftime("%Y-%m-%dT%H:%M:%SZ")


def test_remove_taint_removes_only_ours_and_twice_is_a_no_op(
    executor: KubernetesExecutor, human: client.CoreV1Api, stored_node: StoredNode, sim: KubeSim
) -> None:
    """Release: our taint goes, a human's stays; removing again writes nothing."""
    executor.apply([SetTaint("reboot")])
    human_taint = {"key": "maintenance", "value": "bios", "effect": "NoSchedule"}
    human.patch_node(NODE, {"spec": {"taints": [human_taint, *stored_node()["spec"]["taints"]]}})

    first = executor.apply([RemoveTaint()]).results[0]
    version = sim.store.resource_version
    second = executor.apply([RemoveTaint()]).results[0]

    assert (first.ok, first.detail) == (True, "taint removed")
    assert (second.ok, second.detail) == (True, "unchanged")
    assert stored_node()["spec"]["taints"] == [human_taint]
    assert sim.store.resource_version == version


def test_cordon_records_that_we_did_it_and_uncordon_clears_both(
    executor: KubernetesExecutor, stored_node: StoredNode
) -> None:
    """Cordon sets unschedulable and gpuhealth.io/cordoned=true; Uncordon undoes exactly that."""
    executor.apply([Cordon(), Cordon()])
    node = stored_node()
    assert node["spec"]["unschedulable"] is True
    assert node["metadata"]["annotations"]["gpuhealth.io/cordoned"] == "true"
    assert executor.facts().cordoned_by_us

    executor.apply([Uncordon()])
    node = stored_node()
    assert not node["spec"].get("unschedulable", False)
    assert "gpuhealth.io/cordoned" not in node["metadata"]["annotations"]


def test_uncordon_leaves_a_node_alone_when_the_cordon_is_not_ours(
    executor: KubernetesExecutor, human: client.CoreV1Api, stored_node: StoredNode
) -> None:
    """A human's cordon (no gpuhealth.io/cordoned annotation) is never undone, even if Uncordon is asked."""
    human.patch_node(NODE, {"spec": {"unschedulable": True}})

    result = executor.apply([Uncordon()]).results[0]

    assert result.ok
    assert "not cordoned by gpuhealth" in result.detail
    assert stored_node()["spec"]["unschedulable"] is True


def test_emit_event_records_a_kubelet_shaped_event_once_per_key(
    executor: KubernetesExecutor, node_events: Callable[..., list[dict[str, Any]]], stored_node: StoredNode
) -> None:
    """A core/v1 Event on the Node in 'default'; the same key again is "already recorded", not a second."""
    step = EmitEvent("GPUHealthUnhealthy", "XID 79 on GPU 0: fallen off the bus", key="inc-1/opened")

    first = executor.apply([step]).results[0]
    second = executor.apply([step]).results[0]

    assert (first.detail, second.detail) == ("event recorded", "already recorded")
    assert second.ok
    (event,) = node_events()
    assert event["involvedObject"] == {
        "kind": "Node",
        "apiVersion": "v1",
        "name": NODE,
        "uid": stored_node()["metadata"]["uid"],
    }
    assert (event["reason"], event["type"], event["count"]) == ("GPUHealthUnhealthy", "Warning", 1)
    assert event["source"] == {"component": "gpuhealth-agent", "host": NODE}
    assert (event["reportingComponent"], event["reportingInstance"]) == ("gpuhealth-agent", NODE)
    assert event["metadata"]["name"].startswith(f"{NODE}.gpuhealth.")


def test_a_restarted_executor_emitting_the_same_key_makes_no_duplicate_event(
    make_executor: Callable[..., KubernetesExecutor], node_events: Callable[..., list[dict[str, Any]]]
) -> None:
    """Agent restarted mid-incident: it re-emits the incident's Event, and there is still one."""
    step = EmitEvent("GPUHealthTainted", "tainted gpuhealth.io/unhealthy=reboot", key="inc-7/tainted")
    first = make_executor()
    first.apply([step])
    first.close()

    restarted = make_executor()
    result = restarted.apply([step]).results[0]

    assert (result.ok, result.detail) == (True, "already recorded")
    assert len(node_events()) == 1


def test_different_keys_make_different_events(
    executor: KubernetesExecutor, node_events: Callable[..., list[dict[str, Any]]]
) -> None:
    """Opened and released are two Events."""
    executor.apply(
        [
            EmitEvent("GPUHealthUnhealthy", "XID 79", key="inc-1/opened"),
            EmitEvent("GPUHealthRecovered", "all checks pass", key="inc-1/closed", type="Normal"),
        ]
    )

    assert sorted(event["reason"] for event in node_events()) == ["GPUHealthRecovered", "GPUHealthUnhealthy"]


def test_request_permit_is_left_to_the_agent_loop(executor: KubernetesExecutor) -> None:
    """The executor does not talk to the aggregator: ok, no request."""
    requests = executor.requests_total

    result = executor.apply([RequestPermit("drain", "inc-1")]).results[0]

    assert (result.ok, result.detail) == (True, "handled by the agent loop")
    assert executor.requests_total == requests


def test_dry_run_mutates_nothing_and_reports_every_step(
    executor: KubernetesExecutor, sim: KubeSim, node_events: Callable[..., list[dict[str, Any]]]
) -> None:
    """--dry-run: every step reported ok "dry-run", no request at all, the store's version unchanged."""
    steps: list[Step] = [
        UNHEALTHY,
        SetStateLabel("unhealthy"),
        SetTaint("reboot"),
        Cordon(),
        SetIncidentAnnotation("inc-1"),
        EmitEvent("GPUHealthUnhealthy", "XID 79", key="inc-1/opened"),
    ]
    version = sim.store.resource_version
    requests = executor.requests_total

    report = executor.apply(steps, dry_run=True)

    assert [(r.ok, r.detail) for r in report.results] == [(True, "dry-run")] * len(steps)
    assert executor.requests_total == requests
    assert executor.writes_total == 0
    assert sim.store.resource_version == version
    assert node_events() == []


def test_the_other_node_is_never_touched(executor: KubernetesExecutor, stored_node: StoredNode) -> None:
    """An executor writes only to its own node."""
    other_before = stored_node("gpu-node-1")

    executor.apply([UNHEALTHY, SetStateLabel("unhealthy"), SetTaint("reboot"), Cordon()])

    assert stored_node("gpu-node-1") == other_before


def test_writes_are_counted_per_mutating_request(executor: KubernetesExecutor) -> None:
    """writes_total counts patches and creates (the benchmark's "API writes"), reads are not writes."""
    executor.apply([UNHEALTHY, SetStateLabel("unhealthy"), SetTaint("reboot")])
    assert executor.writes_total == 3

    executor.apply([UNHEALTHY, SetTaint("reboot")])  # both already so: reads only
    assert executor.writes_total == 3
