"""The Kubernetes error tree, the executor's own exceptions, and what a 403 from the API server means.

Every non-2xx answer is mapped once, by :func:`api_error` (``rest.RestClient`` raises what it returns), to a
typed error: not found, conflict, gone, too many requests (with ``retry_after_s``), forbidden, invalid,
server error. Callers catch the class, never compare ``status`` integers.

Configuration problems raise :class:`KubeExecutorError`; API errors end up in ``StepResult``. A 403 is
either RBAC (the agent's service account lacks a verb on a resource) or an admission policy that denied
this one change (the chart's ValidatingAdmissionPolicy, or a webhook). Both hold the executor's writes, but
they need different fixes, so :class:`Refusal` keeps them apart.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from kubernetes.client.exceptions import ApiException

from remediation.executor.contract import ExecutorSetupError

POLICY_DENIAL = "ValidatingAdmissionPolicy"
# How the API server words an admission denial (ValidatingAdmissionPolicy, then admission webhooks).
ADMISSION_MARKERS = ("denied request", "denied the request", "admission webhook")
POLICY_MESSAGE_CHARS = 200  # the policy's own message, shortened: one log line, one finding message


class KubeExecutorError(ExecutorSetupError):
    """The executor cannot be set up: no kubeconfig, not in a cluster, no node name."""


@dataclass(frozen=True)
class Refusal:
    """A 403: which request was refused, and whether an admission policy (not RBAC) refused it."""

    verb: str
    resource: str
    by_admission: bool
    policy_message: str = ""
    status: int = HTTPStatus.FORBIDDEN

    @property
    def cause(self) -> str:
        """``admission`` or ``rbac``, for log fields."""
        return "admission" if self.by_admission else "rbac"

    def describe(self) -> str:
        """One line for the log, the step result and the ``EXECUTOR_FORBIDDEN`` finding (no credential)."""
        if self.by_admission:
            return (
                f"{self.verb} {self.resource} refused by admission policy (HTTP {self.status}): "
                f"{self.policy_message}"
            )
        return (
            f"Kubernetes RBAC refused the agent's service account (HTTP 403): it may not "
            f"{self.verb} {self.resource}; its ClusterRole needs that verb"
        )


class KubeApiError(ApiException):
    """A non-2xx answer of the API server, typed by its status (the one mapping is :func:`api_error`).

    Subclasses ``ApiException``, so code that only needs "the API said no" keeps catching that; code that
    cares which "no" catches the subclass instead of comparing integers.
    """

    def __init__(self, status: int, reason: str | None, body: str | None = None, headers: Any = None) -> None:
        super().__init__(status=status, reason=reason)
        self.body = body
        self.headers = headers

    @property
    def status_reason(self) -> str | None:
        """The ``reason`` of the Status body (``AlreadyExists`` and ``Conflict`` share 409)."""
        reason = _status_body(self).get("reason")
        return str(reason) if reason is not None else None

    @property
    def message(self) -> str:
        """The server's first message line, else the HTTP reason phrase."""
        message = _status_message(self)
        return message.splitlines()[0] if message else str(self.reason or "error")

    @property
    def retry_after_s(self) -> float | None:
        """``Retry-After`` in seconds (None when absent or in the HTTP-date form: our own backoff then)."""
        headers = self.headers or {}
        raw = headers.get("Retry-After") if hasattr(headers, "get") else None
        try:
            return max(float(raw), 0.0) if raw is not None else None
        except ValueError:
            return None

    def one_line(self) -> str:
        """``HTTP <status> <reason>`` for logs and step details (never the body: it may quote a request)."""
        return f"HTTP {self.status} {self.reason}"


class KubeBadRequest(KubeApiError):
    """400: the request itself is wrong (asking again gets the same answer)."""


class KubeUnauthorized(KubeApiError):
    """401: the credential was not accepted."""


class KubeForbidden(KubeApiError):
    """403: RBAC, or an admission webhook that answers 403."""


class KubeNotFound(KubeApiError):
    """404: no such object (or no such resource: the API group is not served)."""


class KubeConflict(KubeApiError):
    """409: the object changed since it was read, or (``already_exists``) it is already there."""

    @property
    def already_exists(self) -> bool:
        """A create of a name that exists, not a lost compare-and-set."""
        return self.status_reason == "AlreadyExists"


class KubeGone(KubeApiError):
    """410: the resourceVersion a watch or list continued from has been compacted away."""


class KubeInvalid(KubeApiError):
    """422: the object was refused by validation (a ValidatingAdmissionPolicy without a reason too)."""


class KubeTooManyRequests(KubeApiError):
    """429: throttled (API priority and fairness) or an eviction blocked by a PodDisruptionBudget."""


class KubeServerError(KubeApiError):
    """5xx: the server failed or is unavailable."""


ERROR_BY_STATUS: dict[int, type[KubeApiError]] = {
    HTTPStatus.BAD_REQUEST: KubeBadRequest,
    HTTPStatus.UNAUTHORIZED: KubeUnauthorized,
    HTTPStatus.FORBIDDEN: KubeForbidden,
    HTTPStatus.NOT_FOUND: KubeNotFound,
    HTTPStatus.CONFLICT: KubeConflict,
    HTTPStatus.GONE: KubeGone,
    HTTPStatus.UNPROCESSABLE_ENTITY: KubeInvalid,
    HTTPStatus.TOO_MANY_REQUESTS: KubeTooManyRequests,
}


def api_error(error: ApiException) -> KubeApiError:
    """The typed error for ``error`` (itself when it already is one): the one mapping from status to class."""
    if isinstance(error, KubeApiError):
        return error
    status = int(error.status or 0)
    kind = ERROR_BY_STATUS.get(status) or (KubeServerError if status >= 500 else KubeApiError)
    return kind(status, error.reason, error.body, error.headers)


class KubeRefused(KubeApiError):
    """A refusal (a 403, or an admission policy's 422) of a request the executor made, with the verb and
    resource it was for."""

    def __init__(self, error: ApiException, refusal: Refusal) -> None:
        super().__init__(int(error.status or HTTPStatus.FORBIDDEN), error.reason, error.body, error.headers)
        self.refusal = refusal


def is_refusal(error: ApiException) -> bool:
    """A 403, or a ValidatingAdmissionPolicy's denial answered as 422 (a validation without ``reason``)."""
    if error.status == HTTPStatus.FORBIDDEN:
        return True
    message = _status_message(error)
    # A ValidatingAdmissionPolicy whose validation sets no ``reason`` denies with 422 Invalid, not 403.
    return (
        error.status == HTTPStatus.UNPROCESSABLE_ENTITY
        and POLICY_DENIAL in message
        and "denied request" in message
    )


def refusal_of(error: ApiException, *, verb: str, resource: str) -> Refusal:
    """Read a refusal's Status body: an admission denial carries the policy's message, RBAC only the verb."""
    message = _status_message(error)
    status = int(error.status or HTTPStatus.FORBIDDEN)
    marker = next((marker for marker in ADMISSION_MARKERS if marker in message), None)
    if marker is None:
        return Refusal(verb=verb, resource=resource, by_admission=False, status=status)
    # "... denied request: <the policy's message>": what follows the marker is what the policy says.
    said = message.split(marker, 1)[1].lstrip(" :")
    policy_message = " ".join(said.split())[:POLICY_MESSAGE_CHARS] or "no message"
    return Refusal(
        verb=verb, resource=resource, by_admission=True, policy_message=policy_message, status=status
    )


def _status_body(error: ApiException) -> dict[str, Any]:
    try:
        body = json.loads(error.body or "{}")
    except (TypeError, ValueError):
        return {}
    return body if isinstance(body, dict) else {}


def _status_message(error: ApiException) -> str:
    message = _status_body(error).get("message")
    return str(message) if message is not None else ""
