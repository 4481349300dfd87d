"""The Nomad adapter's own exceptions; ``remediation/nomad/api.py`` maps python-nomad's errors onto these.

Only :class:`NomadUnavailable` is worth retrying (the agent or server is down, restarting, or overloaded);
a 403 or 404 would get the same answer again.
"""

from __future__ import annotations

from remediation.executor.contract import ExecutorSetupError


class NomadError(Exception):
    """A request to Nomad failed; the message is one line and never carries the token."""

    def __init__(self, message: str, *, status: int = 0) -> None:
        super().__init__(message)
        self.status = status  # HTTP status, 0 for transport errors

    def describe(self) -> str:
        """One line for step results and logs."""
        return f"HTTP {self.status}: {self}" if self.status else f"transport error: {self}"


class NomadUnavailable(NomadError):
    """Connection refused or reset, a timeout, or a 5xx/429: asking again later may succeed."""


class NomadForbidden(NomadError):
    """403: the ACL token lacks a capability (``node:write`` for eligibility, drain and metadata)."""


class NomadNotFound(NomadError):
    """404: the node, job or allocation does not exist (or the endpoint does not, on an old Nomad)."""


class NomadRejected(NomadError):
    """Any other refusal (400, 409, ...): the request itself is wrong; retrying would not help."""


class NomadConfigError(NomadError, ExecutorSetupError):
    """The Nomad executor cannot be set up: unreadable token file, no local client, bad address or TLS.

    Raised only while the agent starts, never by a step: ``gpuhealth agent`` catches it by name and exits
    with one line (no traceback); nothing retries it, since the same environment gives the same answer.
    """

    def describe(self) -> str:
        return str(self)
