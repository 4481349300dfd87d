"""The three requests a drain makes, raw JSON through ``rest.RestClient`` (not ``CoreV1Api``; see ``rest``).

Answers are parsed JSON dicts; a non-2xx answer raises the client's ``ApiException`` (with headers, so
``Retry-After`` can be read), and transport failures surface as urllib3 errors.
"""

from __future__ import annotations

from kubernetes import client

from remediation.kubernetes.rest import JSON, STRATEGIC_MERGE_PATCH, JsonObject, RestClient

NODE_PATH = "/api/v1/nodes/{name}"
PODS_PATH = "/api/v1/pods"
EVICTION_PATH = "/api/v1/namespaces/{namespace}/pods/{name}/eviction"


class DrainApi:
    """Cordon a node, list its pods, evict one pod; ``requests_total`` counts what was sent (thread-safe)."""

    def __init__(self, api_client: client.ApiClient, *, field_manager: str, request_timeout_s: float) -> None:
        self._rest = RestClient(api_client, request_timeout_s=request_timeout_s)
        self._field_manager = field_manager

    @property
    def requests_total(self) -> int:
        """Every request sent."""
        return self._rest.requests_total

    def patch_node(self, node: str, body: JsonObject) -> None:
        """Strategic merge patch of ``node`` (the cordon)."""
        query = [("fieldManager", self._field_manager)]
        self._rest.json(
            "PATCH",
            NODE_PATH,
            path_params={"name": node},
            query=query,
            body=body,
            content_type=STRATEGIC_MERGE_PATCH,
        )

    def node_annotations(self, node: str) -> dict[str, str]:
        """The node's annotations (empty when it has none)."""
        answer = self._rest.json("GET", NODE_PATH, path_params={"name": node})
        annotations: dict[str, str] = (answer.get("metadata") or {}).get("annotations") or {}
        return annotations

    def list_node_pods(self, node: str) -> list[JsonObject]:
        """Every pod bound to ``node`` (``fieldSelector=spec.nodeName=NODE``, as kubectl drain lists them)."""
        answer = self._rest.json("GET", PODS_PATH, query=[("fieldSelector", f"spec.nodeName={node}")])
        items: list[JsonObject] = answer.get("items") or []
        return items

    def evict(self, namespace: str, name: str, *, uid: str | None, grace_period_s: int | None) -> None:
        """POST a policy/v1 Eviction for the pod; the UID precondition never evicts a same-named successor."""
        options: JsonObject = {}
        if uid:
            options["preconditions"] = {"uid": uid}
        if grace_period_s is not None:
            options["gracePeriodSeconds"] = grace_period_s
        body: JsonObject = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        }
        if options:
            body["deleteOptions"] = options
        path_params = {"namespace": namespace, "name": name}
        self._rest.json("POST", EVICTION_PATH, path_params=path_params, body=body, content_type=JSON)
