"""Every rendered chart manifest passes a server-side dry-run apply against kube-apiserver 1.37.

Defaults and every values variation the chart tests use (``tests/helm``): the API server's own defaulting,
strict field validation (an unknown field is an error, not a warning) and admission run on each object,
and nothing is stored (``dryRun=All``). ServiceMonitor and PodMonitor are validated against the
prometheus-operator CRDs that ``tools/build-control-plane.sh`` fetches from the Go module proxy.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from control_plane import ControlPlane
from helm_render import NAMESPACE, render
from kube_apply import Applier, ensure_namespace
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from waiting import wait_until

import tests.helm.test_chart as chart_tests
import tests.helm.test_chart_features as feature_tests
import tests.helm.test_recovery_chart as recovery_tests

VARIATIONS: dict[str, dict[str, Any]] = {
    **{f"chart/{k}": v for k, v in chart_tests.VARIATIONS.items()},
    **{f"features/{k}": v for k, v in feature_tests.VARIATIONS.items()},
    **{f"recovery/{k}": v for k, v in recovery_tests.VARIATIONS.items()},
}


@pytest.fixture(scope="module")
def applier(control_plane: ControlPlane) -> Any:
    """An admin applier; the chart's namespace and the prometheus-operator CRDs exist."""
    api_client = control_plane.api_client()
    ensure_namespace(api_client, NAMESPACE)
    made = Applier(api_client)
    crds = sorted(Path(control_plane.binaries.crd_dir).glob("*.yaml"))
    assert crds, f"no CRDs in {control_plane.binaries.crd_dir} (tools/build-control-plane.sh fetches them)"
    for path in crds:
        made.apply(yaml.safe_load(path.read_text()))
    extensions = client.ApiextensionsV1Api(api_client)

    def established() -> bool:
        for item in extensions.list_custom_resource_definition().items:
            if item.spec.group == "monitoring.coreos.com":
                conditions = {c.type: c.status for c in item.status.conditions or []}
                if conditions.get("Established") != "True":
                    return False
        return True

    assert wait_until(established), "the CRDs were never established"
    yield made
    api_client.close()


@pytest.mark.parametrize("variation", VARIATIONS)
def test_every_rendered_manifest_passes_a_server_side_dry_run(applier: Applier, variation: str) -> None:
    """Each object of the render: accepted by dryRun=All with strict field validation, answered as the kind
    it was sent as (nothing stored)."""
    failures: list[str] = []
    objects = render(VARIATIONS[variation])
    for obj in objects:
        what = f"{obj['kind']}/{obj['metadata']['name']}"
        try:
            answer = applier.apply(obj, namespace=NAMESPACE, dry_run=True)
        except ApiException as exc:
            failures.append(f"{what}: {exc.status} {json.loads(exc.body).get('message')}")
            continue
        assert (answer["kind"], answer["metadata"]["name"]) == (obj["kind"], obj["metadata"]["name"])
    assert failures == [], "\n".join(failures)
    assert objects
