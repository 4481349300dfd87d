"""A kubeconfig for the emulator that the official Python client and ``kubectl`` both accept.

Plain HTTP on 127.0.0.1 with a dummy bearer token (the emulator does no authentication; the token only
keeps clients from asking for credentials). Format: "Organizing Cluster Access Using kubeconfig Files"
(https://kubernetes.io/docs/concepts/configuration/organize-cluster-access-kubeconfig/).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

DUMMY_TOKEN = "gpuhealth-sim-token"  # noqa: S105 - not a secret: the emulator authenticates nobody
CONTEXT_NAME = "gpuhealth-sim"


def kubeconfig_document(
    url: str, *, namespace: str = "default", context: str = CONTEXT_NAME
) -> dict[str, Any]:
    """The kubeconfig as data: one cluster, one user, one current context."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {},
        "clusters": [{"name": context, "cluster": {"server": url}}],
        "users": [{"name": context, "user": {"token": DUMMY_TOKEN}}],
        "contexts": [
            {"name": context, "context": {"cluster": context, "user": context, "namespace": namespace}}
        ],
        "current-context": context,
    }


def write_kubeconfig(path: str | Path, url: str, *, namespace: str = "default") -> Path:
    """Write the kubeconfig for ``url`` to ``path`` (parents created, mode 0600 like kubectl's own)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(yaml.safe_dump(kubeconfig_document(url, namespace=namespace), sort_keys=False))
    target.chmod(0o600)
    return target
