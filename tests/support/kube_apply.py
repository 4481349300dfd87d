"""Server-side apply of rendered manifests through discovery (``sim.realkube.apply``, under the plain name the
tests import), and the tests' namespaces to apply into."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kubernetes import client

from sim.realkube.apply import Applier, NotServed

__all__ = ["Applier", "NotServed", "apply_in_namespace", "ensure_namespace"]


def ensure_namespace(api_client: client.ApiClient, name: str) -> None:
    """Create the namespace unless it exists (tests of one module share it)."""
    try:
        client.CoreV1Api(api_client).create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name=name))
        )
    except client.ApiException as exc:
        if exc.status != 409:
            raise


def apply_in_namespace(
    api_client: client.ApiClient, objects: Iterable[dict[str, Any]], namespace: str
) -> None:
    """Server-side apply each object (namespaced ones into ``namespace``, made first if need be)."""
    ensure_namespace(api_client, namespace)
    applier = Applier(api_client)
    for obj in objects:
        applier.apply(obj, namespace=namespace)
