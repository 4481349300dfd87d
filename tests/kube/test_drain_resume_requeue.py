"""A drain interrupted between its evictions and its requeue, then run again for the same incident (the
central remediator resumes its drains from the start after a crash), still restarts the job: the pods the
first run evicted are recorded on the node before the first eviction (``gpuhealth.io/requeue-pending``), so
the second run, which finds them gone, requeues their jobs; the record is removed once the requeue ended.
Found by the fault suite (tests/faults/test_kill.py: the aggregator killed mid-drain left a JobSet running
with a replaced worker, never restarted)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from waiting import HANG_GUARD_S, wait_until

from core.clock import RealClock
from remediation.kubernetes.drain.policy import DrainPolicy
from remediation.kubernetes.drain.runner import DrainRunner, DrainSetup
from remediation.kubernetes.names import REQUEUE_PENDING_ANNOTATION
from remediation.kubernetes.requeue.decisions import REQUEUED_ANNOTATION, RequeuePolicy
from sim.kube.harness import KubeSim, running_kube_sim

NS = "train"
INCIDENT = "inc-gpu-node-0-20261205T010000Z-resume1"
JOBSET_KEY = "jobsets.jobset.x-k8s.io"
FAST = DrainPolicy(poll_interval_s=0.05, retry_initial_s=0.05, retry_max_s=0.2, pod_timeout_s=10.0)
SETUP = DrainSetup(
    drain_policy=FAST, requeue_policy=RequeuePolicy(), sleep=lambda _s: None, requeue_observe_timeout_s=5.0
)


@pytest.fixture
def kube() -> Iterator[KubeSim]:
    with running_kube_sim(clock=RealClock(), nodes=4, workloads=True, bookmark_interval_s=0.2) as sim:
        sim.store.create("namespaces", {"metadata": {"name": NS}})
        yield sim


def running(kube: KubeSim) -> list[dict[str, Any]]:
    return [
        p
        for p in kube.store.list("pods", NS)
        if p["status"].get("phase") == "Running" and "deletionTimestamp" not in p["metadata"]
    ]


def start_jobset(kube: KubeSim) -> None:
    container = {"name": "t", "image": "t", "resources": {"limits": {"nvidia.com/gpu": "8"}}}
    pod = {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0, "containers": [container]}
    job = {"spec": {"parallelism": 1, "completions": 1, "backoffLimit": 3, "template": {"spec": pod}}}
    kube.store.create(
        JOBSET_KEY,
        {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": "llm", "namespace": NS},
            "spec": {"replicatedJobs": [{"name": "workers", "replicas": 2, "template": job}]},
        },
    )
    wait_until(lambda: len(running(kube)) == 2, message="the JobSet's 2 pods to run")


def drain(kube: KubeSim, node: str) -> None:
    """One run of the drain of INCIDENT, as a freshly started remediator (or agent) runs it."""
    api_client = kube.api_client()
    try:
        runner = DrainRunner(api_client, node, SETUP, RealClock())
        runner.start(INCIDENT, 30.0)
        assert runner.wait(HANG_GUARD_S), "the drain did not end"
    finally:
        api_client.close()


def annotations_of(kube: KubeSim, kind: str, namespace: str | None, name: str) -> dict[str, str]:
    obj = kube.store.get(kind, namespace, name)
    assert obj is not None
    return dict(obj["metadata"].get("annotations") or {})


def test_a_drain_run_again_after_its_evictions_still_restarts_the_jobset(kube: KubeSim) -> None:
    start_jobset(kube)
    bad = str(running(kube)[0]["spec"]["nodeName"])
    evicted_uid = next(p["metadata"]["uid"] for p in running(kube) if p["spec"]["nodeName"] == bad)

    # The first run evicts, and its requeue cannot write the JobSet: it ends as if killed before the requeue.
    kube.faults.inject(verb="patch", resource=JOBSET_KEY, status=500, times=1000)
    drain(kube, bad)
    record = json.loads(annotations_of(kube, "nodes", None, bad)[REQUEUE_PENDING_ANNOTATION])
    assert record["incident"] == INCIDENT
    assert [p["metadata"]["uid"] for p in record["pods"]] == [evicted_uid]
    assert REQUEUED_ANNOTATION not in annotations_of(kube, JOBSET_KEY, NS, "llm")
    kube.faults.clear()

    drain(kube, bad)  # the resumed run: the evicted pod is gone from the node
    assert annotations_of(kube, JOBSET_KEY, NS, "llm").get(REQUEUED_ANNOTATION) == INCIDENT
    assert REQUEUE_PENDING_ANNOTATION not in annotations_of(kube, "nodes", None, bad)
    wait_until(
        lambda: len(running(kube)) == 2 and all(p["spec"]["nodeName"] != bad for p in running(kube)),
        message="the restarted JobSet's pods running off the bad node",
    )


def test_a_drain_that_requeued_leaves_no_record_behind(kube: KubeSim) -> None:
    start_jobset(kube)
    bad = str(running(kube)[0]["spec"]["nodeName"])
    drain(kube, bad)
    assert annotations_of(kube, JOBSET_KEY, NS, "llm").get(REQUEUED_ANNOTATION) == INCIDENT
    assert REQUEUE_PENDING_ANNOTATION not in annotations_of(kube, "nodes", None, bad)
