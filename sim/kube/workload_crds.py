"""The custom resources of the training-job operators the agent requeues, as installed CRDs would serve them.

API versions are the ones the operators serve today: JobSet ``jobset.x-k8s.io/v1alpha2``
(https://jobset.sigs.k8s.io/docs/reference/jobset.v1alpha2/), Kubeflow Trainer v2
``trainer.kubeflow.org/v1alpha1`` (TrainJob, TrainingRuntime, ClusterTrainingRuntime), the Kubeflow
Training Operator's ``kubeflow.org/v1`` PyTorchJob, Kueue ``kueue.x-k8s.io/v1beta1`` (Workload,
LocalQueue, ClusterQueue, ResourceFlavor) and Volcano ``batch.volcano.sh/v1alpha1`` Job with
``bus.volcano.sh/v1alpha1`` Command. ``KubeSim(workloads=True)`` registers all of them.
"""

from __future__ import annotations

from sim.kube.resources import CustomResource

JOBSET = CustomResource("jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets")
TRAINJOB = CustomResource("trainer.kubeflow.org", "v1alpha1", "TrainJob", "trainjobs")
TRAINING_RUNTIME = CustomResource("trainer.kubeflow.org", "v1alpha1", "TrainingRuntime", "trainingruntimes")
CLUSTER_TRAINING_RUNTIME = CustomResource(
    "trainer.kubeflow.org", "v1alpha1", "ClusterTrainingRuntime", "clustertrainingruntimes", namespaced=False
)
PYTORCHJOB = CustomResource("kubeflow.org", "v1", "PyTorchJob", "pytorchjobs")
KUEUE_WORKLOAD = CustomResource("kueue.x-k8s.io", "v1beta1", "Workload", "workloads", short_names=("wl",))
KUEUE_LOCAL_QUEUE = CustomResource(
    "kueue.x-k8s.io", "v1beta1", "LocalQueue", "localqueues", short_names=("queue", "queues", "lq")
)
KUEUE_CLUSTER_QUEUE = CustomResource(
    "kueue.x-k8s.io", "v1beta1", "ClusterQueue", "clusterqueues", namespaced=False, short_names=("cq",)
)
KUEUE_RESOURCE_FLAVOR = CustomResource(
    "kueue.x-k8s.io", "v1beta1", "ResourceFlavor", "resourceflavors", namespaced=False, short_names=("rf",)
)
VOLCANO_JOB = CustomResource("batch.volcano.sh", "v1alpha1", "Job", "jobs", short_names=("vcjob", "vj"))
VOLCANO_COMMAND = CustomResource(
    "bus.volcano.sh", "v1alpha1", "Command", "commands", status_subresource=False
)

WORKLOAD_CRDS: tuple[CustomResource, ...] = (
    JOBSET,
    TRAINJOB,
    TRAINING_RUNTIME,
    CLUSTER_TRAINING_RUNTIME,
    PYTORCHJOB,
    KUEUE_WORKLOAD,
    KUEUE_LOCAL_QUEUE,
    KUEUE_CLUSTER_QUEUE,
    KUEUE_RESOURCE_FLAVOR,
    VOLCANO_JOB,
    VOLCANO_COMMAND,
)
"""Every workload custom resource, in registration order."""


def store_key(resource: CustomResource) -> str:
    """The store's name for a custom resource: ``jobsets.jobset.x-k8s.io``."""
    return f"{resource.plural}.{resource.group}"
