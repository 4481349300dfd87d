"""API errors as the Kubernetes API server reports them: a ``Status`` object with an HTTP code.

The shapes follow "API Conventions", section "Response Status Kind"
(https://github.com/kubernetes/community/blob/master/contributors/devel/sig-architecture/api-conventions.md#response-status-kind):
``kind: Status``, ``apiVersion: v1``, ``status: Failure``, a human ``message``, a machine ``reason``,
``details`` naming the object (``name``, ``group``, ``kind``, ``causes``) and the HTTP ``code``.
The message texts copy the API server's wording so that clients which match on them behave alike.
"""

from __future__ import annotations

from typing import Any

from sim.kube.protocols import KubeObject


class ApiError(Exception):
    """A request the emulated API server refuses; rendered as a ``Status`` body with ``code``."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        details: dict[str, Any] | None = None,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.retry_after = retry_after

    def to_status(self) -> KubeObject:
        """The ``Status`` object the API server sends for this error."""
        status: KubeObject = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "code": self.code,
        }
        if self.reason:  # some errors (storage, a pod under two budgets) carry no reason
            status["reason"] = self.reason
        if self.details is not None:
            status["details"] = self.details
        return status


def _details(name: str | None, group: str, kind: str, **extra: Any) -> dict[str, Any]:
    details: dict[str, Any] = {"kind": kind}
    if name:
        details["name"] = name
    if group:
        details["group"] = group
    details.update(extra)
    return details


def qualified(plural: str, group: str) -> str:
    """``pods`` for the core group, ``jobs.batch`` otherwise (the form the server's messages use)."""
    return f"{plural}.{group}" if group else plural


def not_found(plural: str, group: str, name: str) -> ApiError:
    """404: ``pods "x" not found``."""
    return ApiError(
        404,
        "NotFound",
        f'{qualified(plural, group)} "{name}" not found',
        details=_details(name, group, plural),
    )


def already_exists(plural: str, group: str, name: str) -> ApiError:
    """409 AlreadyExists for a create whose name is taken."""
    return ApiError(
        409,
        "AlreadyExists",
        f'{qualified(plural, group)} "{name}" already exists',
        details=_details(name, group, plural),
    )


def conflict(plural: str, group: str, name: str, detail: str) -> ApiError:
    """409 Conflict: an optimistic-concurrency or precondition failure."""
    message = f'Operation cannot be fulfilled on {qualified(plural, group)} "{name}": {detail}'
    return ApiError(409, "Conflict", message, details=_details(name, group, plural))


STALE_OBJECT = "the object has been modified; please apply your changes to the latest version and try again"


def invalid(kind: str, group: str, name: str, causes: list[dict[str, str]]) -> ApiError:
    """422 Invalid with one cause per field error, in the server's ``Kind.group "name" is invalid`` form."""
    summary = ", ".join(f"{cause['field']}: {cause['message']}" for cause in causes)
    qualified_kind = f"{kind}.{group}" if group else kind
    return ApiError(
        422,
        "Invalid",
        f'{qualified_kind} "{name}" is invalid: {summary}',
        details=_details(name, group, kind, causes=causes),
    )


def field_error(kind_of_error: str, field: str, message: str) -> dict[str, str]:
    """One ``details.causes`` entry (``FieldValueInvalid``, ``FieldValueRequired``, ...)."""
    return {"reason": kind_of_error, "message": message, "field": field}


def bad_request(message: str) -> ApiError:
    """400 BadRequest (malformed body, bad selector, mismatched namespace)."""
    return ApiError(400, "BadRequest", message)


def method_not_allowed(
    message: str = "the server does not allow this method on the requested resource",
) -> ApiError:
    """405 MethodNotAllowed."""
    return ApiError(405, "MethodNotAllowed", message)


def expired(message: str) -> ApiError:
    """410 Expired (a watch or continue token older than the server's history)."""
    return ApiError(410, "Expired", message)


def internal(message: str) -> ApiError:
    """500 InternalError."""
    return ApiError(
        500,
        "InternalError",
        f"Internal error occurred: {message}",
        details={"causes": [{"message": message}]},
    )


def success_status(code: int = 200, details: dict[str, Any] | None = None) -> KubeObject:
    """A ``Status`` with ``status: Success`` (the answer to an eviction or a binding)."""
    status: KubeObject = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "code": code,
    }
    if details is not None:
        status["details"] = details
    return status
