"""The executor's own exceptions, and what a 403 from the API server means.

Configuration problems raise :class:`KubeExecutorError`; API errors end up in ``StepResult``. A 403 is
either RBAC (the agent's service account lacks a verb on a resource) or an admission policy that denied
this one change (the chart's ValidatingAdmissionPolicy, or a webhook). Both hold the executor's writes, but
they need different fixes, so :class:`Refusal` keeps them apart.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from kubernetes.client.exceptions import ApiException

from remediation.executor.contract import ExecutorSetupError

HTTP_FORBIDDEN = 403
# A ValidatingAdmissionPolicy whose validation sets no ``reason`` denies with 422 Invalid, not 403.
HTTP_UNPROCESSABLE = 422
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
    status: int = HTTP_FORBIDDEN

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


class KubeForbidden(ApiException):
    """A 403 on a request the executor made, with the verb and resource it was for."""

    def __init__(self, error: ApiException, refusal: Refusal) -> None:
        super().__init__(status=error.status, reason=error.reason, body=error.body)
        self.headers = error.headers
        self.refusal = refusal


def is_refusal(error: ApiException) -> bool:
    """A 403, or a ValidatingAdmissionPolicy's denial answered as 422 (a validation without ``reason``)."""
    if error.status == HTTP_FORBIDDEN:
        return True
    message = _status_message(error)
    return error.status == HTTP_UNPROCESSABLE and POLICY_DENIAL in message and "denied request" in message


def refusal_of(error: ApiException, *, verb: str, resource: str) -> Refusal:
    """Read a refusal's Status body: an admission denial carries the policy's message, RBAC only the verb."""
    message = _status_message(error)
    status = int(error.status or HTTP_FORBIDDEN)
    marker = next((marker for marker in ADMISSION_MARKERS if marker in message), None)
    if marker is None:
        return Refusal(verb=verb, resource=resource, by_admission=False, status=status)
    # "... denied request: <the policy's message>": what follows the marker is what the policy says.
    said = message.split(marker, 1)[1].lstrip(" :")
    policy_message = " ".join(said.split())[:POLICY_MESSAGE_CHARS] or "no message"
    return Refusal(
        verb=verb, resource=resource, by_admission=True, policy_message=policy_message, status=status
    )


def _status_message(error: ApiException) -> str:
    try:
        body = json.loads(error.body or "{}")
    except (TypeError, ValueError):
        return ""
    message = body.get("message") if isinstance(body, dict) else None
    return str(message) if message is not None else ""
