"""Raw JSON requests through the official client's ``ApiClient``, counted: the one place they are sent.

The executor, the drain and the requeue each need a handful of endpoints. Going through
``ApiClient.param_serialize`` / ``call_api`` on the REST paths, rather than the generated ``CoreV1Api`` and
``CustomObjectsApi`` classes, keeps about 20 MiB of generated code out of the agent's memory, while the client
still supplies what matters: configuration, authentication, TLS, the connection pool and ``ApiException``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from remediation.kubernetes.errors import api_error

JsonObject = dict[str, Any]
Timeout = float | tuple[float, float]

JSON = "application/json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
MERGE_PATCH = "application/merge-patch+json"


class RestClient:
    """Sends JSON requests (thread-safe); ``requests_total`` and ``writes_total`` count them."""

    def __init__(self, api_client: client.ApiClient, *, request_timeout_s: float) -> None:
        self._client: Any = api_client  # untyped in the client
        self._timeout = request_timeout_s
        self._lock = threading.Lock()
        self.requests_total = 0
        self.writes_total = 0

    def request(
        self,
        method: str,
        path: str,
        *,
        path_params: Mapping[str, str] | None = None,
        query: Sequence[tuple[str, str]] = (),
        body: JsonObject | None = None,
        content_type: str | None = None,
        timeout: Timeout | None = None,
    ) -> Any:
        """The unread urllib3 response on 2xx, else the typed ``KubeApiError`` for the status (with the
        server's Status body and headers, so ``Retry-After`` can be read). Transport failures surface as
        urllib3 errors."""
        with self._lock:
            self.requests_total += 1
            self.writes_total += int(method != "GET")
        headers = {"Accept": JSON} | ({"Content-Type": content_type} if content_type else {})
        serialized = self._client.param_serialize(
            method=method,
            resource_path=path,
            path_params=dict(path_params or {}),
            query_params=list(query),
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        response = self._client.call_api(*serialized, _request_timeout=timeout or self._timeout)
        if not 200 <= response.status <= 299:
            response.read()
            raise api_error(ApiException(http_resp=response))
        return response.response

    def json(self, method: str, path: str, **kwargs: Any) -> JsonObject:
        """:meth:`request`, with the answer read and parsed (``{}`` for an empty body)."""
        return parse_json(self.request(method, path, **kwargs))


def parse_json(response: Any) -> JsonObject:
    """Read a whole urllib3 response as a JSON object."""
    data = response.data
    parsed: JsonObject = json.loads(data) if data else {}
    return parsed
