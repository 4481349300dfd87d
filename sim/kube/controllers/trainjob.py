"""The Kubeflow Trainer v2 TrainJob controller (``trainer.kubeflow.org/v1alpha1``), through its JobSet.

Follows the Kubeflow Trainer docs (https://www.kubeflow.org/docs/components/trainer/overview/ and the
TrainJob / TrainingRuntime API reference): a TrainJob names a runtime in ``spec.runtimeRef`` (``kind``
ClusterTrainingRuntime, the default, or a namespaced TrainingRuntime); the runtime's ``spec.template`` is
a JobSet template, and the TrainJob owns one JobSet of the same name built from it.
``spec.trainer.numNodes`` sets ``parallelism`` and ``completions`` of the replicated job ``node`` (the v2
runtimes' trainer job; ``trainer-node`` in early runtimes), ``spec.trainer.resourcesPerNode`` the resources
and ``spec.trainer.image`` the image of its trainer container (``node``; ``trainer`` in early runtimes).
``spec.suspend`` is propagated to the JobSet, with condition ``Suspended`` (``Suspended`` / ``Resumed``);
the JobSet's ``Completed`` / ``Failed`` become the TrainJob's ``Complete`` / ``Failed``.

Not emulated: ML policies (torch, MPI) and their environment, the trainer's ``command``, ``args`` and
``env``, initializers, ``podSpecOverrides``, ``managedBy``, status ``jobsStatus``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from sim.kube.controllers.cache import cache_for
from sim.kube.controllers.common import (
    condition,
    format_time,
    is_terminating,
    name_of,
    namespace_of,
    owner_reference,
    set_condition,
    try_update,
    writable,
)
from sim.kube.controllers.jobset import API_VERSION as JOBSET_API_VERSION
from sim.kube.controllers.jobset import RESOURCE as JOBSET_RESOURCE
from sim.kube.controllers.workload_common import serves
from sim.kube.protocols import KubeObject, ObjectStore

RESOURCE = "trainjobs.trainer.kubeflow.org"
API_VERSION = "trainer.kubeflow.org/v1alpha1"
CLUSTER_RUNTIMES = "clustertrainingruntimes.trainer.kubeflow.org"
RUNTIMES = "trainingruntimes.trainer.kubeflow.org"
TRAINER_JOB_NAMES = ("node", "trainer-node")
TRAINER_CONTAINERS = ("node", "trainer")


class TrainJobController:
    """Creates and steers the JobSet of each TrainJob."""

    name = "trainjob"

    def reconcile(self, store: ObjectStore) -> None:
        """Reconcile every TrainJob with its JobSet."""
        if not serves(store, RESOURCE, CLUSTER_RUNTIMES, RUNTIMES, JOBSET_RESOURCE):
            return
        cache = cache_for(store)
        for trainjob in cache.list(RESOURCE):
            if not is_terminating(trainjob):
                _sync(store, trainjob)


def _runtime(store: ObjectStore, trainjob: Mapping[str, Any]) -> Mapping[str, Any] | None:
    ref = (trainjob.get("spec") or {}).get("runtimeRef") or {}
    cache = cache_for(store)
    if (ref.get("kind") or "ClusterTrainingRuntime") == "TrainingRuntime":
        return cache.get(RUNTIMES, namespace_of(trainjob), str(ref.get("name")))
    return cache.get(CLUSTER_RUNTIMES, None, str(ref.get("name")))


def _jobset_for(trainjob: Mapping[str, Any], runtime: Mapping[str, Any]) -> KubeObject:
    template = copy.deepcopy((runtime.get("spec") or {}).get("template") or {})
    spec: dict[str, Any] = template.get("spec") or {}
    trainer = (trainjob.get("spec") or {}).get("trainer") or {}
    num_nodes = trainer.get("numNodes")
    for replicated in spec.get("replicatedJobs") or []:
        if replicated.get("name") not in TRAINER_JOB_NAMES:
            continue
        job_spec = replicated.setdefault("template", {}).setdefault("spec", {})
        if num_nodes is not None:
            job_spec["parallelism"] = job_spec["completions"] = int(num_nodes)
        _override_trainer_container(job_spec, trainer)
    spec["suspend"] = bool((trainjob.get("spec") or {}).get("suspend"))
    metadata = template.get("metadata") or {}
    return {
        "apiVersion": JOBSET_API_VERSION,
        "kind": "JobSet",
        "metadata": {
            "name": name_of(trainjob),
            "namespace": namespace_of(trainjob),
            "labels": dict(metadata.get("labels") or {}),
            "annotations": dict(metadata.get("annotations") or {}),
            "ownerReferences": [owner_reference(trainjob, API_VERSION, "TrainJob")],
        },
        "spec": spec,
    }


def _override_trainer_container(job_spec: dict[str, Any], trainer: Mapping[str, Any]) -> None:
    """The TrainJob's ``trainer.image`` and ``trainer.resourcesPerNode`` on the trainer container (named
    ``node``, ``trainer`` in early runtimes), as the real Trainer builds its JobSet."""
    pod_spec = job_spec.setdefault("template", {}).setdefault("spec", {})
    containers = pod_spec.get("containers") or []
    container = next((c for c in containers if c.get("name") in TRAINER_CONTAINERS), None)
    if container is None:
        return
    if trainer.get("image"):
        container["image"] = trainer["image"]
    if trainer.get("resourcesPerNode") is not None:
        container["resources"] = copy.deepcopy(trainer["resourcesPerNode"])


def _sync(store: ObjectStore, trainjob: KubeObject) -> None:
    suspend = bool((trainjob.get("spec") or {}).get("suspend"))
    jobset = cache_for(store).get(JOBSET_RESOURCE, namespace_of(trainjob), name_of(trainjob))
    if jobset is None:
        runtime = _runtime(store, trainjob)
        if runtime is None:
            return  # the runtime does not exist (yet): Trainer's webhook would have refused the TrainJob
        try:
            jobset = store.create(JOBSET_RESOURCE, _jobset_for(trainjob, runtime))
        except KeyError:
            return
    elif bool((jobset.get("spec") or {}).get("suspend")) != suspend:
        updated = writable(jobset)
        updated["spec"]["suspend"] = suspend
        try_update(store, JOBSET_RESOURCE, updated)
    _write_status(store, trainjob, jobset, suspend)


def _write_status(store: ObjectStore, trainjob: KubeObject, jobset: Mapping[str, Any], suspend: bool) -> None:
    now = format_time(store)
    status: dict[str, Any] = copy.deepcopy(trainjob.get("status") or {})
    previous = condition(trainjob, "Suspended")
    if suspend:
        new = {
            "type": "Suspended",
            "status": "True",
            "reason": "Suspended",
            "message": "TrainJob is suspended",
        }
        set_condition(status, new, now)
    elif previous is not None and previous.get("status") == "True":
        new = {"type": "Suspended", "status": "False", "reason": "Resumed", "message": "TrainJob is resumed"}
        set_condition(status, new, now)
    for source, target in (("Completed", "Complete"), ("Failed", "Failed")):
        found = condition(jobset, source)
        if found is not None and found.get("status") == "True":
            mirrored = {"type": target, "status": "True", "reason": found.get("reason") or "JobSet"}
            set_condition(status, {**mirrored, "message": found.get("message") or ""}, now)
    if status != (trainjob.get("status") or {}):
        updated = writable(trainjob)
        updated["status"] = status
        try_update(store, RESOURCE, updated)
