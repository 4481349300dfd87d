"""Simulated Kubernetes controllers: level-triggered ``reconcile(store)`` over the emulator's object store.

Each controller emulates one part of a real cluster (see ``README.md`` in this package for what each one
does and does not do, and the documentation it follows). They touch cluster state only through
:class:`sim.kube.protocols.ObjectStore`, so their writes look like any API client's.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

from sim.kube.controllers.daemonset import DaemonSetController
from sim.kube.controllers.disruption import DisruptionController
from sim.kube.controllers.job import JobController
from sim.kube.controllers.jobset import JobSetController
from sim.kube.controllers.kubelet import Kubelet
from sim.kube.controllers.kueue import KueueController
from sim.kube.controllers.namespace import NamespaceBootstrap
from sim.kube.controllers.pytorchjob import PyTorchJobController
from sim.kube.controllers.scheduler import Scheduler
from sim.kube.controllers.taint_manager import TaintManager
from sim.kube.controllers.trainjob import TrainJobController
from sim.kube.controllers.volcano import VolcanoJobController
from sim.kube.controllers.workload_common import ForegroundDeletion
from sim.kube.protocols import Controller

__all__ = [
    "CONTROLLER_NAMES",
    "WORKLOAD_CONTROLLER_NAMES",
    "DaemonSetController",
    "DisruptionController",
    "ForegroundDeletion",
    "JobController",
    "JobSetController",
    "Kubelet",
    "KueueController",
    "NamespaceBootstrap",
    "PyTorchJobController",
    "Scheduler",
    "TaintManager",
    "TrainJobController",
    "UnknownControllerError",
    "VolcanoJobController",
    "default_controllers",
]

# Run order within one manager pass: placement before start, start before the workload controllers read
# pod states, the training-job operators after the Job controller whose Jobs they read, budgets last so
# they see this pass's pods. The workload controllers do nothing unless their custom resources are served
# (``KubeSim(workloads=True)``).
_FACTORIES: dict[str, Callable[[], Controller]] = {
    "scheduler": Scheduler,
    "kubelet": Kubelet,
    "taint-manager": TaintManager,
    "daemonset": DaemonSetController,
    "job": JobController,
    "trainjob": TrainJobController,
    "kueue": KueueController,
    "jobset": JobSetController,
    "pytorchjob": PyTorchJobController,
    "volcano": VolcanoJobController,
    "foreground-deletion": ForegroundDeletion,
    "disruption": DisruptionController,
}
CONTROLLER_NAMES: tuple[str, ...] = tuple(_FACTORIES)
WORKLOAD_CONTROLLER_NAMES: tuple[str, ...] = (
    "trainjob",
    "kueue",
    "jobset",
    "pytorchjob",
    "volcano",
    "foreground-deletion",
)
"""The training-job operators' controllers (the kinds docs/requeue.md requeues).

Switch them off with ``enabled=`` like any other.
"""


class UnknownControllerError(ValueError):
    """A controller name that :func:`default_controllers` does not know."""


def default_controllers(
    options: Mapping[str, Any] | None = None,
    /,
    *,
    enabled: Collection[str] | None = None,
    agent_namespace: str | None = None,
) -> list[Controller]:
    """The simulated controllers, in run order.

    ``enabled`` picks some by name (default: all of :data:`CONTROLLER_NAMES`); an unknown name raises
    :class:`UnknownControllerError`. ``agent_namespace``, when given, adds a controller that keeps that
    namespace in existence, so the agent's DaemonSet, pods and events always have a home. ``options``
    (positional, optional) is the same two settings as a mapping, for callers that pass one object
    through (``KubeSim(controller_options=...)``); keyword arguments win over it.
    """
    if options:
        enabled = enabled if enabled is not None else options.get("enabled")
        agent_namespace = agent_namespace or options.get("agent_namespace")
    names = list(CONTROLLER_NAMES) if enabled is None else list(enabled)
    unknown = sorted(set(names) - set(_FACTORIES))
    if unknown:
        raise UnknownControllerError(
            f"unknown controller(s) {', '.join(unknown)}; known: {', '.join(CONTROLLER_NAMES)}"
        )
    controllers: list[Controller] = []
    if agent_namespace:
        controllers.append(NamespaceBootstrap(agent_namespace))
    controllers.extend(_FACTORIES[name]() for name in CONTROLLER_NAMES if name in names)
    return controllers
