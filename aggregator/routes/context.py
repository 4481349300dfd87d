"""What every route module needs: the store, the settings, the metrics, the clock, who may call what, and
the shapes the routes share (path parameters, documented refusals, the ``since`` parameter)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any

from fastapi import Path
from fastapi.exceptions import RequestValidationError

from aggregator.auth.chain import Caller
from aggregator.auth.dependencies import Access
from aggregator.batching import ReportWriter
from aggregator.metrics import AggregatorMetrics
from aggregator.peers.fleet import PeerView
from aggregator.remediator import Remediator
from aggregator.settings import AggregatorSettings
from aggregator.store import audit
from aggregator.store.engine import Database
from aggregator.timespec import TimeSpecError, parse_since
from core.aggregator_api import NODE_NAME_PATTERN, ProblemDetail

NodePath = Annotated[str, Path(pattern=NODE_NAME_PATTERN, max_length=253, description="Node name.")]
IdPath = Annotated[int, Path(ge=1, le=2**63 - 1)]
ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ProblemDetail, "description": "Missing or wrong bearer token."},
    403: {"model": ProblemDetail, "description": "The caller may not do this; the detail names the rule."},
    413: {"model": ProblemDetail, "description": "Request body larger than max_report_bytes."},
}
NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"model": ProblemDetail, "description": "No such object."}}
CONFLICT: dict[int | str, dict[str, Any]] = {409: {"model": ProblemDetail}}
BAD_TOKEN: dict[int | str, dict[str, Any]] = {
    400: {"model": ProblemDetail, "description": "A continue token that is not one of ours."}
}


@dataclass(frozen=True)
class AppContext:
    """The aggregator's parts a route may use; one per app, handed to each router's builder."""

    db: Database
    settings: AggregatorSettings
    metrics: AggregatorMetrics
    now: Callable[[], datetime]
    access: Access
    writer: ReportWriter
    remediator: Remediator | None
    peers: PeerView | None = None

    def audit(
        self,
        conn: Any,
        caller: Caller,
        action: str,
        target: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        """Record a mutating call in the audit log, in the transaction of the change."""
        principal = caller.principal
        audit.record(
            conn,
            at=self.now(),
            actor=principal.name,
            role=principal.role.value,
            method=principal.method.value,
            client=caller.client,
            action=action,
            target=target,
            details=details,
        )

    def since(self, spec: str | None) -> datetime | None:
        """The time a ``since`` query parameter names (1h, 30m, 2d or an ISO time); 422 when it names none."""
        if spec is None:
            return None
        try:
            return parse_since(spec, self.now())
        except TimeSpecError as exc:
            # Shaped like FastAPI's own 422, so the documented error schema holds.
            error = {"type": "value_error", "loc": ("query", "since"), "msg": str(exc), "input": spec}
            raise RequestValidationError([error]) from exc
