"""Keeps a namespace in existence (the agent's), as a cluster's installer would have created it."""

from __future__ import annotations

from sim.kube.protocols import ObjectStore


class NamespaceBootstrap:
    """Creates ``namespace`` when it is missing; nothing else."""

    name = "namespace-bootstrap"

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace

    def reconcile(self, store: ObjectStore) -> None:
        """Create the namespace once if it does not exist (a deleted one is recreated on the next pass)."""
        if store.get("namespaces", None, self.namespace) is not None:
            return
        try:
            store.create(
                "namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.namespace}}
            )
        except KeyError:
            return  # created concurrently
