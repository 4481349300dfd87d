"""Refusals as the Nomad HTTP API sends them: a status code and a plain-text body."""

from __future__ import annotations

PERMISSION_DENIED = "Permission denied"


class NomadApiError(Exception):
    """An HTTP error answer; ``message`` is the whole plain-text body, as Nomad writes it."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def not_found(what: str) -> NomadApiError:
    """404 with Nomad's ``<thing> not found`` body."""
    return NomadApiError(404, f"{what} not found")


def bad_request(message: str) -> NomadApiError:
    """400 with the validation message."""
    return NomadApiError(400, message)


def permission_denied() -> NomadApiError:
    """403, the body every ACL refusal has."""
    return NomadApiError(403, PERMISSION_DENIED)
