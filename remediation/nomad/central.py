"""The central remediator's drains on Nomad: the agent's :class:`NomadDrainRunner`, run for any node through
the Nomad servers with the remediator's own ACL token.

The runner does on the named node what the agent's own drain did: records the incident in the node's
dynamic metadata (``gpuhealth.drained``, and ``gpuhealth.ineligible_by`` when the drain makes it
ineligible), drains it with ``IgnoreSystemJobs`` (the agent's system job stays), and stops every allocation
of the batch jobs that ran there so the scheduler places them again. The metadata goes through the servers
(``/v1/client/metadata?node_id=``), which forward it to the node's client.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from core.aggregator_api import DrainPhase
from remediation.executor.background_drain import DrainState, DrainUpdate
from remediation.nomad.api import NomadApi
from remediation.nomad.drain import NomadDrainRunner, NomadDrainSetup
from remediation.nomad.retry import NomadRetry
from remediation.nomad.settings import NomadSettings, nomad_token


class NomadCentralDrains:
    """Builds the drain of any node by its name; :meth:`close` closes the connections."""

    def __init__(
        self, settings: NomadSettings, setup: NomadDrainSetup, *, environ: dict[str, str] | None = None
    ) -> None:
        self._api = NomadApi(settings, nomad_token(settings, environ))
        self._setup = setup
        self._retry = NomadRetry(settings.retry, sleep=setup.sleep, monotonic=setup.monotonic)

    def drain_for(self, node: str) -> NomadDrainRunner | UnknownNode:
        """A runner that drains the node called ``node``; a stand-in that fails at once when Nomad knows
        no such node (or cannot say)."""
        node_id = self._retried(lambda: self._api.node_id_named(node), "find the node")
        if node_id is None:
            return UnknownNode(f"drain failed: Nomad knows no node named {node}")

        def write_meta(changes: Mapping[str, str | None]) -> None:
            self._retried(lambda: self._api.write_metadata(node_id, changes), "metadata")

        return NomadDrainRunner(self._api, node_id, self._setup, write_meta=write_meta, retried=self._retried)

    def close(self) -> None:
        self._api.close()

    def _retried(self, operation: Any, name: str) -> Any:
        outcome = self._retry.call(operation, step=name)
        if outcome.error is not None:
            raise outcome.error
        return outcome.value


class UnknownNode:
    """The drain of a node Nomad does not know: failed from the start, with why."""

    def __init__(self, detail: str) -> None:
        self._detail = detail
        self.state: DrainState | None = None
        self._news: list[DrainUpdate] = []

    def start(self, incident_id: str, deadline_s: float) -> str:
        assert deadline_s > 0
        self.state = DrainState(incident_id, DrainPhase.FAILED)
        self._news = [DrainUpdate(incident_id, ok=False, detail=self._detail)]
        return self._detail

    def updates(self) -> list[DrainUpdate]:
        taken, self._news = self._news, []
        return taken

    def wait(self, timeout_s: float) -> bool:
        assert timeout_s >= 0
        return True
