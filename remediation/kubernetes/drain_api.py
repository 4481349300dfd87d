"""The three requests a drain makes, raw JSON through ``ApiClient.call_api`` (the style of ``api.py``).

Not ``CoreV1Api``: importing the generated module costs about 20 MiB of resident memory for three endpoints.
Answers are parsed JSON dicts; a non-2xx answer raises the client's ``ApiException`` (with headers, so
``Retry-After`` can be read), and transport failures surface as urllib3 errors.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

JsonObject = dict[str, Any]

NODE_PATH = "/api/v1/nodes/{name}"
PODS_PATH = "/api/v1/pods"
EVICTION_PATH = "/api/v1/namespaces/{namespace}/pods/{name}/eviction"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON = "application/json"


class DrainApi:
    """Cordon a node, list its pods, evict one pod; ``requests_total`` counts what was sent (thread-safe)."""

    def __init__(self, api_client: client.ApiClient, *, field_manager: str, request_timeout_s: float) -> None:
        self._client: Any = api_client  # untyped in the client
        self._field_manager = field_manager
        self._timeout = request_timeout_s
        self._lock = threading.Lock()
        self.requests_total = 0

    def patch_node(self, node: str, body: JsonObject) -> None:
        """Strategic merge patch of ``node`` (the cordon)."""
        query = [("fieldManager", self._field_manager)]
        self._send("PATCH", NODE_PATH, {"name": node}, query=query, body=body, content=STRATEGIC_MERGE_PATCH)

    def list_node_pods(self, node: str) -> list[JsonObject]:
        """Every pod bound to ``node`` (``fieldSelector=spec.nodeName=NODE``, as kubectl drain lists them)."""
        answer = self._send("GET", PODS_PATH, {}, query=[("fieldSelector", f"spec.nodeName={node}")])
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
        self._send("POST", EVICTION_PATH, {"namespace": namespace, "name": name}, body=body, content=JSON)

    def _send(
        self,
        method: str,
        path: str,
        path_params: dict[str, str],
        *,
        query: Sequence[tuple[str, str]] = (),
        body: JsonObject | None = None,
        content: str | None = None,
    ) -> JsonObject:
        with self._lock:
            self.requests_total += 1
        headers = {"Accept": JSON} | ({"Content-Type": content} if content else {})
        request = self._client.param_serialize(
            method=method,
            resource_path=path,
            path_params=path_params,
            query_params=list(query),
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        response = self._client.call_api(*request, _request_timeout=self._timeout)
        response.read()
        if not 200 <= response.status <= 299:
            raise ApiException.from_response(http_resp=response, body=None, data=None)
        data = response.data
        parsed: JsonObject = json.loads(data) if data else {}
        return parsed
