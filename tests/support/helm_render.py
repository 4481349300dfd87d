"""The chart rendered by Helm's own engine (helm-python-sdk), as ``tests/helm/conftest.py`` renders it,
for suites outside ``tests/helm`` (the real control plane's RBAC, admission and dry-run tests)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import helm_python as helm
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART_DIR = REPO_ROOT / "helm" / "gpuhealth"
RELEASE = "gpuhealth"
NAMESPACE = "gpuhealth-system"
AGENT_ACCOUNT = RELEASE
AGENT_USER = f"system:serviceaccount:{NAMESPACE}:{AGENT_ACCOUNT}"

Manifest = dict[str, Any]


def render(values: dict[str, Any] | None = None) -> list[Manifest]:
    """The chart's objects for ``values`` (merged over values.yaml), NOTES.txt left out."""
    with helm.Chart.load(CHART_DIR) as chart:
        files = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    objects: list[Manifest] = []
    for path, text in sorted(files.items()):
        if path.endswith("NOTES.txt"):
            continue
        objects.extend(doc for doc in yaml.safe_load_all(text) if doc)
    return objects
