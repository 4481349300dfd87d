"""The Kubernetes error tree: every non-2xx answer leaves ``RestClient`` as its typed error, mapped once.

Status codes and their meaning: https://kubernetes.io/docs/reference/using-api/api-concepts/#http-status-codes
(the Status body's ``reason``: AlreadyExists and Conflict share 409; 410 Expired ends a watch or a list).
"""

from __future__ import annotations

from http import HTTPStatus

import pytest
from kubernetes.client.exceptions import ApiException

from remediation.kubernetes.errors import (
    KubeApiError,
    KubeBadRequest,
    KubeConflict,
    KubeForbidden,
    KubeGone,
    KubeInvalid,
    KubeNotFound,
    KubeServerError,
    KubeTooManyRequests,
    KubeUnauthorized,
    api_error,
)
from remediation.kubernetes.rest import JSON, RestClient
from sim.kube.harness import KubeSim

NODE_PATH = "/api/v1/nodes/gpu-node-0"

INJECTED = [
    (HTTPStatus.BAD_REQUEST, KubeBadRequest),
    (HTTPStatus.FORBIDDEN, KubeForbidden),
    (HTTPStatus.CONFLICT, KubeConflict),
    (HTTPStatus.GONE, KubeGone),
    (HTTPStatus.UNPROCESSABLE_ENTITY, KubeInvalid),
    (HTTPStatus.TOO_MANY_REQUESTS, KubeTooManyRequests),
    (HTTPStatus.INTERNAL_SERVER_ERROR, KubeServerError),
    (HTTPStatus.SERVICE_UNAVAILABLE, KubeServerError),
]


@pytest.fixture
def rest(sim: KubeSim) -> RestClient:
    return RestClient(sim.api_client(), request_timeout_s=5.0)


@pytest.mark.parametrize(("status", "kind"), INJECTED, ids=[str(int(s)) for s, _ in INJECTED])
def test_each_status_the_server_answers_is_its_own_class(
    sim: KubeSim, rest: RestClient, status: HTTPStatus, kind: type[KubeApiError]
) -> None:
    sim.faults.inject(verb="patch", resource="nodes", status=int(status), retry_after=3, times=1)
    with pytest.raises(kind) as caught:
        rest.json("PATCH", NODE_PATH, body={"metadata": {"labels": {"a": "b"}}}, content_type=JSON)
    error = caught.value
    assert isinstance(error, ApiException)  # still what code that only needs "the API said no" catches
    assert error.status == status
    assert error.retry_after_s == 3.0
    assert error.one_line() == f"HTTP {int(status)} {error.reason}"


def test_a_missing_object_is_not_found_and_a_repeated_create_already_exists(
    sim: KubeSim, rest: RestClient
) -> None:
    with pytest.raises(KubeNotFound):
        rest.json("GET", "/api/v1/nodes/no-such-node")
    event = {"metadata": {"name": "once", "namespace": "default"}, "involvedObject": {"kind": "Node"}}
    rest.json("POST", "/api/v1/namespaces/default/events", body=event, content_type=JSON)
    with pytest.raises(KubeConflict) as caught:
        rest.json("POST", "/api/v1/namespaces/default/events", body=event, content_type=JSON)
    assert caught.value.already_exists
    assert caught.value.status_reason == "AlreadyExists"


def test_a_stale_compare_and_set_is_a_conflict_that_does_not_already_exist(
    sim: KubeSim, rest: RestClient
) -> None:
    body = {"metadata": {"resourceVersion": "1", "labels": {"a": "b"}}}
    with pytest.raises(KubeConflict) as caught:
        rest.json("PATCH", NODE_PATH, body=body, content_type="application/merge-patch+json")
    assert not caught.value.already_exists
    assert "modified" in caught.value.message  # the server's own message, first line


def test_the_mapping_keeps_the_answer_and_is_idempotent() -> None:
    raw = ApiException(status=401, reason="Unauthorized")
    raw.body = '{"kind":"Status","message":"Unauthorized","reason":"Unauthorized","code":401}'
    raw.headers = {"Retry-After": "Fri, 04 Dec 2026 22:00:00 GMT"}
    typed = api_error(raw)
    assert isinstance(typed, KubeUnauthorized)
    assert (typed.status, typed.reason, typed.body) == (401, "Unauthorized", raw.body)
    assert typed.retry_after_s is None  # the HTTP-date form: our own backoff decides
    assert api_error(typed) is typed
    teapot = api_error(ApiException(status=418, reason="I'm a teapot"))
    assert type(teapot) is KubeApiError  # an unexpected status is still typed as an API error
