"""The per-pod decision of the drain (pure: no cluster) and the policy's validation."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest
from kubernetes import client

from core.clock import ManualClock
from remediation.kubernetes.drain.drainer import Drainer, DrainInputError
from remediation.kubernetes.drain.policy import DrainMode, DrainPolicy, ModeRule, Verdict, decide
from remediation.kubernetes.requeue.api import Requeuer
from remediation.kubernetes.requeue.decisions import KindMode, RequeuePolicy


def pod(
    *,
    namespace: str = "default",
    owner: str | None = "ReplicaSet",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    emptydir: bool = False,
    phase: str = "Running",
    terminating: bool = False,
) -> dict[str, Any]:
    """A pod as the API returns it, with only what the decision reads."""
    metadata: dict[str, Any] = {"name": "p", "namespace": namespace, "labels": labels or {}}
    metadata["annotations"] = annotations or {}
    if owner:
        metadata["ownerReferences"] = [{"kind": owner, "name": "o", "uid": "u", "controller": True}]
    if terminating:
        metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    volumes = [{"name": "v", "emptyDir": {}}] if emptydir else []
    return {"metadata": metadata, "spec": {"volumes": volumes}, "status": {"phase": phase}}


def test_mirror_daemonset_and_agent_pods_are_skipped_before_any_other_rule() -> None:
    """Skips win over refusals: a mirror pod with no controller is skipped, not refused."""
    policy = DrainPolicy()
    mirror = pod(owner=None, annotations={"kubernetes.io/config.mirror": "x"})
    agent = pod(namespace="gpuhealth", labels={"app.kubernetes.io/name": "gpuhealth"}, owner="DaemonSet")
    assert decide(mirror, policy).verdict is Verdict.SKIP
    assert decide(pod(owner="DaemonSet", emptydir=True), policy).verdict is Verdict.SKIP
    assert decide(agent, policy).verdict is Verdict.SKIP
    custom = DrainPolicy(agent_namespace="ops", agent_labels={"app": "gpu-agent"})
    assert (
        decide(pod(namespace="ops", labels={"app": "gpu-agent"}, owner=None), custom).verdict is Verdict.SKIP
    )


def test_unmanaged_and_emptydir_pods_are_refused_unless_the_policy_allows_them() -> None:
    """kubectl's defaults refuse; force / delete_emptydir_data allow each separately."""
    assert decide(pod(owner=None), DrainPolicy()).verdict is Verdict.REFUSE
    assert decide(pod(emptydir=True), DrainPolicy()).verdict is Verdict.REFUSE
    assert decide(pod(owner=None), DrainPolicy(force=True)).verdict is Verdict.EVICT
    assert decide(pod(emptydir=True), DrainPolicy(delete_emptydir_data=True)).verdict is Verdict.EVICT
    assert decide(pod(owner=None, emptydir=True), DrainPolicy(force=True)).verdict is Verdict.REFUSE


def test_finished_pods_are_evicted_whatever_they_carry_and_terminating_ones_only_awaited() -> None:
    """A Succeeded bare pod with emptyDir holds nothing: evicted at once; a terminating pod is waited for."""
    finished = decide(pod(owner=None, emptydir=True, phase="Succeeded"), DrainPolicy())
    assert finished.verdict is Verdict.EVICT and finished.mode is DrainMode.IMMEDIATE
    assert decide(pod(terminating=True), DrainPolicy()).verdict is Verdict.WAIT


def test_the_first_matching_mode_rule_wins_and_the_default_applies_otherwise() -> None:
    """Rules match on namespace and labels; order matters; unmatched pods get default_mode."""
    policy = DrainPolicy(
        modes=(
            ModeRule(
                namespace="training", match_labels={"ckpt": "yes"}, mode="delete-after-timeout", timeout_s=60
            ),
            ModeRule(namespace="training", mode="allow-completion", timeout_s=600),
        ),
        default_mode="immediate",
    )
    checkpointing = decide(pod(namespace="training", labels={"ckpt": "yes"}), policy)
    assert (checkpointing.mode, checkpointing.timeout_s) == (DrainMode.DELETE_AFTER_TIMEOUT, 60)
    assert decide(pod(namespace="training"), policy).mode is DrainMode.ALLOW_COMPLETION
    assert decide(pod(namespace="web"), policy).mode is DrainMode.IMMEDIATE


def test_policy_rejects_unknown_keys_bad_modes_and_nonsense_numbers() -> None:
    """extra=forbid and bounds: a typo or a zero concurrency fails with a message naming the field."""
    with pytest.raises(pydantic.ValidationError, match="delete_empty_dir"):
        DrainPolicy.model_validate({"delete_empty_dir": True})
    with pytest.raises(pydantic.ValidationError, match="max_in_flight"):
        DrainPolicy(max_in_flight=0)
    with pytest.raises(pydantic.ValidationError, match="mode"):
        ModeRule.model_validate({"mode": "gently"})


def test_drain_refuses_a_missing_node_or_a_deadline_that_is_not_positive() -> None:
    """Bad arguments fail at once with our exception, before any request (the client is never used)."""
    drainer = Drainer(client.ApiClient(), policy=DrainPolicy(), clock=ManualClock())
    with pytest.raises(DrainInputError, match="node name"):
        drainer.drain("", incident_id="i", deadline_s=10)
    with pytest.raises(DrainInputError, match="positive"):
        drainer.drain("n", incident_id="i", deadline_s=0)
    assert drainer.api.requests_total == 0


def test_a_pod_kept_for_its_requeue_mode_is_skipped_even_where_it_would_be_refused() -> None:
    """A kept pod (its kind's requeue mode is ``off``) is skipped with the caller's reason, so an emptyDir
    pod of that kind no longer blocks the drain; kubectl's own skips still come first."""
    policy = DrainPolicy()
    reason = "requeue mode off for jobset"
    kept = decide(pod(emptydir=True), policy, kept=reason)
    assert (kept.verdict, kept.reason) == (Verdict.SKIP, reason)
    assert decide(pod(owner="DaemonSet"), policy, kept=reason).reason.startswith("DaemonSet")
    assert decide(pod(), policy).verdict is Verdict.EVICT


def _jobset_pod() -> dict[str, Any]:
    """A pod whose owner chain (Job -> JobSet) would take a request to follow."""
    gang = pod(owner="Job")
    gang["metadata"]["uid"] = "pod-1"
    gang["metadata"]["ownerReferences"][0]["apiVersion"] = "batch/v1"
    return gang


def _unreachable_client() -> client.ApiClient:
    configuration = client.Configuration()
    configuration.host = "http://127.0.0.1:1"  # nothing listens: any request fails at once
    return client.ApiClient(configuration)


def test_without_an_off_kind_the_drain_asks_nothing_about_owners() -> None:
    """The default policy (and any without ``off``) keeps no pod and sends no request for it."""
    for policy in (RequeuePolicy(), RequeuePolicy(jobset=KindMode.EVICT_ONLY)):
        requeuer = Requeuer(_unreachable_client(), policy=policy, clock=ManualClock())
        assert requeuer.kept_pods([_jobset_pod()]) == {}
        assert requeuer.api.requests_total == 0


def test_with_an_off_kind_owners_that_cannot_be_read_leave_the_pod_to_the_drain() -> None:
    """``jobset: off`` makes the drain follow the owners; when they cannot be read the pod is not kept (a
    faulty node is still drained) and the failure costs no exception."""
    requeuer = Requeuer(_unreachable_client(), policy=RequeuePolicy(jobset=KindMode.OFF), clock=ManualClock())
    assert requeuer.kept_pods([_jobset_pod()]) == {}
    assert requeuer.api.requests_total >= 1
