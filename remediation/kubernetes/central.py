"""The central remediator's drains on Kubernetes: the agent's :class:`DrainRunner`, run for any node with
the remediator's own credentials (the aggregator's ServiceAccount, or a kubeconfig).

One API client serves every node's drain; each drain gets its own runner (cordon, Eviction API, requeue),
so the drains of several nodes run side by side, each on its own thread.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.config.config_exception import ConfigException

from core.clock import Clock, RealClock
from remediation.kubernetes.drain.policy import DrainPolicy
from remediation.kubernetes.drain.runner import DrainRunner, DrainSetup
from remediation.kubernetes.errors import KubeExecutorError
from remediation.kubernetes.requeue.decisions import RequeuePolicy

POOL_CONNECTIONS = 64
"""Connections the remediator's one client keeps: many nodes drain at once, each evicting several pods in
parallel (the client's default, five per CPU, would open and drop connections all the time)."""


class CentralDrains:
    """Builds the drain of any node; :meth:`close` closes the client when it made it."""

    def __init__(
        self,
        api_client: client.ApiClient,
        drain: DrainPolicy,
        requeue: RequeuePolicy,
        *,
        clock: Clock | None = None,
        owns_client: bool = False,
    ) -> None:
        self._api_client = api_client
        self._setup = DrainSetup(drain_policy=drain, requeue_policy=requeue, clock=clock)
        self._clock = clock or RealClock()
        self._owns_client = owns_client

    def drain_for(self, node: str) -> DrainRunner:
        """A runner that drains ``node`` (start it with the incident and the deadline)."""
        return DrainRunner(self._api_client, node, self._setup, self._clock)

    def close(self) -> None:
        if self._owns_client:
            self._api_client.close()


def central_drains(kubeconfig: Path | None, drain: DrainPolicy, requeue: RequeuePolicy) -> CentralDrains:
    """Drains with the credentials of ``kubeconfig``, or of the pod's ServiceAccount when None.

    Raises KubeExecutorError with one line when the configuration cannot be loaded."""
    configuration = client.Configuration()
    configuration.connection_pool_maxsize = POOL_CONNECTIONS
    loader: Any = config  # the config helpers are untyped
    try:
        if kubeconfig is None:
            loader.load_incluster_config(client_configuration=configuration)
        else:
            loader.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    except (ConfigException, OSError, ValueError) as error:
        where = "in-cluster configuration" if kubeconfig is None else f"kubeconfig {kubeconfig}"
        raise KubeExecutorError(f"remediator: cannot load {where}: {error}") from error
    return CentralDrains(client.ApiClient(configuration), drain, requeue, owns_client=True)
