"""The OpenAPI v3 documents of the emulator (sim/kube/openapi.py): what kubectl reads before an apply.

OpenAPI V3 = https://kubernetes.io/docs/concepts/overview/kubernetes-api/#openapi-v3
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client

from sim.kube.harness import KubeSim
from sim.kube.resources import CustomResource


def get(sim: KubeSim, path: str) -> tuple[int, Any]:
    api_client = sim.api_client()
    try:
        response = api_client.call_api(
            "GET", f"{sim.url}{path}", header_params={"Accept": "application/json"}
        )
        data = response.read()
        return response.status, json.loads(data) if response.status == 200 else None
    finally:
        api_client.close()


def patch_operation(document: dict[str, Any], group: str, version: str, kind: str) -> dict[str, Any]:
    """The PATCH operation tagged with the kind, as cli-runtime's QueryParamVerifierV3 looks it up."""
    for item in document["paths"].values():
        operation = item.get("patch")
        if operation and operation["x-kubernetes-group-version-kind"] == {
            "group": group,
            "version": version,
            "kind": kind,
        }:
            return operation  # type: ignore[no-any-return]
    raise AssertionError(f"no PATCH operation for {group}/{version} {kind}")


def test_the_index_names_every_served_group_version_with_a_hash(bare_kube_sim: KubeSim) -> None:
    status, index = get(bare_kube_sim, "/openapi/v3")
    assert status == 200
    assert {"api/v1", "apis/batch/v1", "apis/apps/v1", "apis/policy/v1"} <= set(index["paths"])
    url = index["paths"]["apis/batch/v1"]["serverRelativeURL"]
    assert url.startswith("/openapi/v3/apis/batch/v1?hash=")


@pytest.mark.parametrize(
    ("path", "group", "version", "kind"),
    [
        ("/openapi/v3/api/v1", "", "v1", "Node"),
        ("/openapi/v3/api/v1", "", "v1", "Pod"),
        ("/openapi/v3/apis/batch/v1", "batch", "v1", "Job"),
        ("/openapi/v3/apis/policy/v1", "policy", "v1", "PodDisruptionBudget"),
    ],
)
def test_each_kinds_patch_takes_field_validation(
    bare_kube_sim: KubeSim, path: str, group: str, version: str, kind: str
) -> None:
    """What kubectl needs to validate on the server: the kind's PATCH with a fieldValidation query param."""
    status, document = get(bare_kube_sim, path)
    assert status == 200 and document["openapi"].startswith("3.")
    names = {(p["name"], p["in"]) for p in patch_operation(document, group, version, kind)["parameters"]}
    assert ("fieldValidation", "query") in names and ("fieldManager", "query") in names


def test_custom_resources_are_documented_too() -> None:
    from sim.kube.harness import running_kube_sim

    jobset = CustomResource("jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets")
    with running_kube_sim(controllers=False, custom_resources=[jobset]) as sim:
        status, document = get(sim, "/openapi/v3/apis/jobset.x-k8s.io/v1alpha2")
    assert status == 200
    patch_operation(document, "jobset.x-k8s.io", "v1alpha2", "JobSet")


@pytest.mark.parametrize("path", ["/openapi/v2", "/openapi/v3/apis/nope/v1", "/openapi/v3/api/v2"])
def test_what_is_not_served_is_404(bare_kube_sim: KubeSim, path: str) -> None:
    assert get(bare_kube_sim, path)[0] == 404


def test_the_official_client_still_reads_the_version(bare_kube_sim: KubeSim) -> None:
    """The new paths sit beside the fixed ones: /version is unchanged."""
    api_client = bare_kube_sim.api_client()
    try:
        assert client.VersionApi(api_client).get_code().git_version.startswith("v1.37")
    finally:
        api_client.close()
