"""Build the Nomad executor for this machine: connect to the local client agent, find our node.

The agent runs as a Nomad system job, so the local client agent (``nomad.address``, default
``http://127.0.0.1:4646``) knows which node we are: ``/v1/agent/self`` reports its node id, and the node
object its name. Setup problems become one-line :class:`NomadConfigError`; an agent that cannot be reached
at start is retried briefly (the client may start after us), then reported the same way.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import structlog

from remediation.nomad.api import NomadApi
from remediation.nomad.drain import NomadDrainSetup
from remediation.nomad.errors import NomadConfigError, NomadError
from remediation.nomad.executor import NomadExecutor
from remediation.nomad.retry import NomadRetry
from remediation.nomad.settings import NomadSettings, nomad_token

log = structlog.get_logger(__name__)


def connect_nomad_executor(
    settings: NomadSettings,
    *,
    drain: NomadDrainSetup | None = None,
    node_id: str | None = None,
    sleep: Callable[[float], None] = time.sleep,
    monotonic: Callable[[], float] = time.monotonic,
    environ: dict[str, str] | None = None,
    **options: Any,
) -> NomadExecutor:
    """A started executor for the local node (or ``node_id``); raises NomadConfigError with one line."""
    token = nomad_token(settings, environ)
    api = NomadApi(settings, token)
    retry = NomadRetry(settings.retry, sleep=sleep, monotonic=monotonic)
    try:
        found_id = node_id or _call(retry, api.local_node_id, "find the local node")
        node = _call(retry, lambda: api.get_node(found_id), "read the local node")
    except NomadConfigError:
        api.close()
        raise
    name = str(node.get("Name") or found_id)
    log.info(
        "nomad_executor_ready",
        node=name,
        node_id=found_id,
        address=settings.address,
        token_set=token is not None,
    )
    return NomadExecutor(
        api,
        found_id,
        node_name=name,
        retry=settings.retry,
        sleep=sleep,
        monotonic=monotonic,
        watch_wait_s=settings.watch_wait_s,
        forbidden_hold_s=settings.forbidden_hold_s,
        drain=drain,
        **options,
    )


def _call(retry: NomadRetry, operation: Callable[[], Any], what: str) -> Any:
    outcome = retry.call(operation, step=what)
    if outcome.error is not None:
        raise NomadConfigError(_explain(outcome.error, what)) from None
    return outcome.value


def _explain(error: NomadError, what: str) -> str:
    return f"cannot {what} through the Nomad agent: {error.describe()}"
