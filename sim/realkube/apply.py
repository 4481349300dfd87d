"""Server-side apply of rendered manifests, the way ``kubectl apply --server-side`` sends them.

The REST path of each object comes from the server's discovery documents (``/api/v1``,
``/apis/<group>/<version>``), so any served kind works, built-in or custom; a kind the server does not
serve is :class:`NotServed`. ``dry_run=True`` adds ``dryRun=All``: the server runs defaulting, validation
(``fieldValidation=Strict``: an unknown or duplicate field is an error) and admission, and stores nothing.
"""

from __future__ import annotations

from typing import Any

from kubernetes import client

from remediation.kubernetes.rest import RestClient

APPLY_PATCH = "application/apply-patch+yaml"
FIELD_MANAGER = "gpuhealth-tests"


class NotServed(LookupError):
    """The API server serves no resource of this apiVersion and kind."""


class Applier:
    """Applies objects through one client, with discovery cached per group/version."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self.rest = RestClient(api_client, request_timeout_s=30.0)
        self._resources: dict[str, dict[str, tuple[str, bool]]] = {}

    def _discover(self, api_version: str) -> dict[str, tuple[str, bool]]:
        if api_version not in self._resources:
            path = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            try:
                listed = self.rest.json("GET", path)
            except client.ApiException as exc:
                if exc.status == 404:
                    raise NotServed(api_version) from exc
                raise
            self._resources[api_version] = {
                r["kind"]: (r["name"], bool(r["namespaced"]))
                for r in listed.get("resources", [])
                if "/" not in r["name"]
            }
        return self._resources[api_version]

    def path(self, obj: dict[str, Any], namespace: str | None = None) -> str:
        """The object's REST path (its own namespace, else ``namespace``)."""
        api_version, kind = obj["apiVersion"], obj["kind"]
        found = self._discover(api_version).get(kind)
        if found is None:
            raise NotServed(f"{api_version} {kind}")
        plural, namespaced = found
        base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        name = obj["metadata"]["name"]
        if not namespaced:
            return f"{base}/{plural}/{name}"
        ns = obj["metadata"].get("namespace") or namespace or "default"
        return f"{base}/namespaces/{ns}/{plural}/{name}"

    def apply(
        self, obj: dict[str, Any], *, namespace: str | None = None, dry_run: bool = False
    ) -> dict[str, Any]:
        """Server-side apply (force, strict field validation); the object the server answers with."""
        query = [("fieldManager", FIELD_MANAGER), ("force", "true"), ("fieldValidation", "Strict")]
        if dry_run:
            query.append(("dryRun", "All"))
        return self.rest.json(
            "PATCH", self.path(obj, namespace), query=query, body=obj, content_type=APPLY_PATCH
        )
