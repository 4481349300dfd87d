"""The requeue's RBAC in the Helm chart: nothing unless enabled, and per kind exactly what docs/requeue.md lists.

Rendered with Helm's own engine (helm-python-sdk), as tests/helm does; the calls each kind makes are those of
``remediation.kubernetes.requeue.api.RequeueApi``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import helm_python as helm
import pytest
import yaml
from repo_paths import REPO_ROOT

CHART_DIR = REPO_ROOT / "helm" / "gpuhealth"
Grants = set[tuple[str, str, str]]

BASE: Grants = {("batch", "jobs", "get")}
PER_KIND: dict[str, Grants] = {
    "jobset": {("jobset.x-k8s.io", "jobsets", "get"), ("jobset.x-k8s.io", "jobsets", "patch")},
    "trainjob": {
        ("trainer.kubeflow.org", "trainjobs", "get"),
        ("trainer.kubeflow.org", "trainjobs", "patch"),
        ("jobset.x-k8s.io", "jobsets", "get"),
    },
    "pytorchjob": {
        ("kubeflow.org", "pytorchjobs", "get"),
        ("kubeflow.org", "pytorchjobs", "patch"),
        ("", "pods", "list"),
        ("", "pods", "delete"),
    },
    "volcano": {
        ("batch.volcano.sh", "jobs", "get"),
        ("batch.volcano.sh", "jobs", "patch"),
        ("bus.volcano.sh", "commands", "create"),
    },
    "kueue": {
        ("kueue.x-k8s.io", "workloads", "list"),
        ("kueue.x-k8s.io", "workloads", "patch"),
        ("batch", "jobs", "patch"),
        ("jobset.x-k8s.io", "jobsets", "get"),
        ("jobset.x-k8s.io", "jobsets", "patch"),
    },
}


@pytest.fixture(scope="module")
def grants() -> Iterator[Callable[[dict[str, Any]], Grants]]:
    """(apiGroup, resource, verb) granted by the chart's ClusterRoles for the given values."""
    with helm.Chart.load(CHART_DIR) as chart:

        def render(values: dict[str, Any]) -> Grants:
            files = chart.render(values, name="gpuhealth", namespace="gpuhealth-system", is_install=True)
            found: Grants = set()
            for path, text in files.items():
                if path.endswith("NOTES.txt"):
                    continue
                for doc in yaml.safe_load_all(text):
                    if doc and doc["kind"] == "ClusterRole":
                        for rule in doc["rules"]:
                            found.update(
                                (group, resource, verb)
                                for group in rule["apiGroups"]
                                for resource in rule["resources"]
                                for verb in rule["verbs"]
                            )
            return found

        yield render


def test_requeue_grants_nothing_unless_enabled(grants: Callable[[dict[str, Any]], Grants]) -> None:
    """A kind switched on without requeue.enabled is a contradiction the render refuses, naming it (rather
    than silently granting nothing); enabled alone adds only reading Jobs, to whoever drains; without a
    drain nothing is requeued, so nothing is granted."""
    default = grants({})
    for kind in PER_KIND:
        with pytest.raises(helm.errors.HelmRenderError, match=f"requeue.{kind} needs requeue.enabled"):
            grants({"requeue": {kind: True}})
    assert grants({"requeue": {"enabled": True}}) == default
    drain = {"drain": {"enabled": True}}
    assert grants({**drain, "requeue": {"enabled": True}}) == grants(drain) | BASE


@pytest.mark.parametrize("by", ["aggregator", "agent"])
@pytest.mark.parametrize("kind", PER_KIND)
def test_each_kind_adds_exactly_its_rules(
    grants: Callable[[dict[str, Any]], Grants], kind: str, by: str
) -> None:
    """requeue.<kind>: the calls the Requeuer makes for that kind, nothing else, in the role of whoever
    drains (the aggregator's remediator by default, or the agents)."""
    drain = {"drain": {"enabled": True, "by": by}}
    default = grants(drain) | BASE
    assert grants({**drain, "requeue": {"enabled": True, kind: True}}) - default == PER_KIND[kind] - default
