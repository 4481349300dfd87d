"""Fixtures for the Helm chart tests: Helm's own engine (helm-python-sdk, no helm binary) and a small
evaluator of ValidatingAdmissionPolicies that runs their CEL with the `cel` package the way the API server
does: match conditions, then variables, then every validation; an evaluation error denies (failurePolicy Fail).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import cel
import helm_python as helm
import pytest
import yaml
from repo_paths import REPO_ROOT

CHART_DIR = REPO_ROOT / "helm" / "gpuhealth"
RELEASE = "gpuhealth"
NAMESPACE = "gpuhealth-system"
AGENT_USER = f"system:serviceaccount:{NAMESPACE}:{RELEASE}"
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"

Manifest = dict[str, Any]
Render = Callable[..., list[Manifest]]


@pytest.fixture(scope="session")
def chart() -> Iterator[helm.Chart]:
    """The chart, loaded once by Helm's Go engine through its C ABI."""
    with helm.Chart.load(CHART_DIR) as loaded:
        yield loaded


@pytest.fixture(scope="session")
def render(chart: helm.Chart) -> Render:
    """Render the chart with the given values (merged over values.yaml) into a list of Kubernetes objects."""

    def _render(values: dict[str, Any] | None = None) -> list[Manifest]:
        files = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
        objects: list[Manifest] = []
        for path, text in sorted(files.items()):
            if path.endswith("NOTES.txt"):
                continue
            objects.extend(doc for doc in yaml.safe_load_all(text) if doc)
        return objects

    return _render


@pytest.fixture(scope="session")
def render_notes(chart: helm.Chart) -> Callable[..., str]:
    """Render only NOTES.txt, the text Helm prints after an install."""

    def _notes(values: dict[str, Any] | None = None) -> str:
        files = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
        return next(text for path, text in files.items() if path.endswith("NOTES.txt"))

    return _notes


def by_kind(objects: list[Manifest], kind: str) -> list[Manifest]:
    """Objects of one kind."""
    return [obj for obj in objects if obj["kind"] == kind]


def component_of(obj: Manifest) -> str | None:
    """Which part of gpuhealth an object belongs to (``agent``, ``aggregator``, ``test``), by its label."""
    labels: dict[str, str] = (obj.get("metadata") or {}).get("labels") or {}
    return labels.get("app.kubernetes.io/component")


def one(objects: list[Manifest], kind: str, component: str = "agent") -> Manifest:
    """The single object of a kind that belongs to ``component`` (the agent unless said otherwise); fails
    the test when there is not exactly one."""
    found = [obj for obj in by_kind(objects, kind) if component_of(obj) == component]
    assert len(found) == 1, f"expected one {component} {kind}, found {len(found)}"
    return found[0]


@dataclass(frozen=True)
class AdmissionResult:
    """Outcome of one request against one policy."""

    applies: bool
    denials: list[str] = field(default_factory=list)

    @property
    def allowed(self) -> bool:
        """Allowed when the policy does not apply or no validation denied."""
        return not self.applies or not self.denials


@dataclass(frozen=True)
class PolicyUnderTest:
    """One rendered ValidatingAdmissionPolicy, evaluated like the API server evaluates it."""

    manifest: Manifest

    @property
    def spec(self) -> dict[str, Any]:
        """The policy's spec."""
        spec: dict[str, Any] = self.manifest["spec"]
        return spec

    def expressions(self) -> list[str]:
        """Every CEL expression in the policy (match conditions, variables, validations, messages)."""
        found = [c["expression"] for c in self.spec.get("matchConditions", [])]
        found += [v["expression"] for v in self.spec.get("variables", [])]
        for validation in self.spec["validations"]:
            found.append(validation["expression"])
            if "messageExpression" in validation:
                found.append(validation["messageExpression"])
        return found

    def review(self, request: dict[str, Any], obj: Manifest | None, old: Manifest | None) -> AdmissionResult:
        """Evaluate the policy for one admission request (request, object, oldObject)."""
        context: dict[str, Any] = {"request": request, "object": obj, "oldObject": old}
        for condition in self.spec.get("matchConditions", []):
            if cel.evaluate(condition["expression"], context) is not True:
                return AdmissionResult(applies=False)
        variables: dict[str, Any] = {}
        for variable in self.spec.get("variables", []):
            # A variable that cannot be evaluated for this request stays undefined; a validation using it
            # then errors, which denies under failurePolicy Fail (the API server evaluates lazily).
            try:
                variables[variable["name"]] = cel.evaluate(
                    variable["expression"], {**context, "variables": variables}
                )
            except (RuntimeError, ValueError, TypeError):
                continue
        context["variables"] = variables
        denials = [message for v in self.spec["validations"] if (message := self._denial(v, context))]
        return AdmissionResult(applies=True, denials=denials)

    @staticmethod
    def _denial(validation: dict[str, Any], context: dict[str, Any]) -> str | None:
        try:
            passed = cel.evaluate(validation["expression"], context)
        except (RuntimeError, ValueError, TypeError) as exc:
            return f"evaluation error: {exc}"
        if passed is True:
            return None
        if "messageExpression" in validation:
            return str(cel.evaluate(validation["messageExpression"], context))
        return str(validation.get("message", validation["expression"]))


def admission_request(
    operation: str,
    *,
    resource: str = "nodes",
    group: str = "",
    sub_resource: str = "",
    username: str = AGENT_USER,
    node_name: str | None = "gpu-node-1",
) -> dict[str, Any]:
    """An admission request as CEL sees it; node_name None means a token without node information."""
    extra = {} if node_name is None else {NODE_NAME_EXTRA: [node_name]}
    return {
        "operation": operation,
        "resource": {"group": group, "version": "v1", "resource": resource},
        "subResource": sub_resource,
        "userInfo": {"username": username, "extra": extra},
    }
