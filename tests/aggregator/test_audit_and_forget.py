"""The audit log (who, role, what, target, when, from where) for every mutating call, kept across a restart
and shown by ``gpuhealth events --audit``; forgetting a node (admin) takes it out of the fleet, the budget and
the breaker, through the API and ``gpuhealth forget``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from core.aggregator_api import Report
from core.findings import Action
from tests.aggregator.builders import report
from tests.aggregator.identities import (
    AGENT_NODE,
    OTHER_NODE,
    Identities,
    Identity,
    client_as,
    start_with_identities,
)

GPUHEALTH = os.environ.get("GPUHEALTH_CLI") or str(Path(sys.executable).parent / "gpuhealth")


def gpuhealth(*args: str, url: str, who: Identity) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("GPUHEALTH_")}
    env |= {"NO_COLOR": "1", "COLUMNS": "200", "GPUHEALTH_AGGREGATOR_URL": url, "GPUHEALTH_TOKEN": who.token}
    return subprocess.run(
        [GPUHEALTH, *args], capture_output=True, text=True, timeout=60, env=env, check=False
    )


def test_mutating_calls_are_audited_with_who_role_and_address_across_a_restart(tmp_path: Path) -> None:
    identities = Identities()
    live, _clock = start_with_identities(tmp_path, identities, budget_min_nodes=2)
    try:
        with client_as(live, identities.agent) as agent:
            agent.report(Report.model_validate(report(AGENT_NODE, 1, "unhealthy", incident="inc-3")))
            permit = agent.request_permit(AGENT_NODE, Action.REBOOT, incident_id="inc-3")
            agent.release_permit(permit.id)
        with client_as(live, identities.operator) as operator:
            operator.quarantine(AGENT_NODE, reason="flaky NVLink", requested_by="not-me")
        with client_as(live, identities.admin) as admin:
            admin.breaker_reset(reason="drill")

        live.stop()
        live.start()  # the audit log is in the database

        with client_as(live, identities.operator) as operator:
            entries = operator.audit()
        assert [(e.actor, e.role, e.method, e.action, e.target, e.client) for e in entries] == [
            (AGENT_NODE, "agent", "token_file", "permit_request", AGENT_NODE, "127.0.0.1"),
            (AGENT_NODE, "agent", "token_file", "permit_release", AGENT_NODE, "127.0.0.1"),
            ("olga", "operator", "token_file", "quarantine", AGENT_NODE, "127.0.0.1"),
            ("adam", "admin", "token_file", "breaker_reset", None, "127.0.0.1"),
        ]
        assert entries[2].details["reason"] == "flaky NVLink"

        table = gpuhealth("events", "--audit", "--since", "30d", url=live.url, who=identities.operator)
        assert table.returncode == 0, table.stderr
        assert "WHO" in table.stdout
        assert "olga" in table.stdout
        assert "quarantine" in table.stdout
        assert "127.0.0.1" in table.stdout
        as_json = gpuhealth(
            "events", "--audit", "--since", "30d", "--json", url=live.url, who=identities.admin
        )
        assert [entry["action"] for entry in json.loads(as_json.stdout)][-1] == "breaker_reset"

        refused = gpuhealth("events", "--audit", url=live.url, who=identities.viewer)
        assert refused.returncode == 1
        assert refused.stderr.strip() == (
            "gpuhealth: error: the aggregator refused (HTTP 403): viewer ana may not read the audit log: "
            "that needs the operator role"
        )
    finally:
        live.stop()


def test_a_forgotten_node_leaves_the_breaker_and_the_budget_and_may_start_over(tmp_path: Path) -> None:
    identities = Identities()
    live, _clock = start_with_identities(
        tmp_path, identities, breaker_min_nodes=1, breaker_threshold_percent=60
    )
    try:
        with client_as(live, identities.agent) as agent:
            agent.report(Report.model_validate(report(AGENT_NODE, 1)))
        with client_as(live, identities.other_agent) as other:
            other.report(Report.model_validate(report(OTHER_NODE, 1, "unhealthy", incident="inc-7")))
        with client_as(live, identities.viewer) as viewer:
            before = viewer.breaker_status()
        assert (before.gpu_nodes, before.recent_unhealthy, before.state) == (2, 1, "closed")  # 50 % < 60 %

        refused = gpuhealth("forget", OTHER_NODE, "--yes", url=live.url, who=identities.operator)
        assert refused.returncode == 1
        assert "operator olga may not forget a node: that needs the admin role" in refused.stderr

        result = gpuhealth("forget", OTHER_NODE, "--yes", url=live.url, who=identities.admin)
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith(f"node {OTHER_NODE} forgotten (1 incidents, 0 permits, 0 requests")

        with client_as(live, identities.viewer) as viewer:
            after = viewer.breaker_status()
            assert (after.gpu_nodes, after.recent_unhealthy) == (1, 0)
            assert [node.name for node in viewer.nodes()] == [AGENT_NODE]
            assert any(e.kind == "node_forgotten" for e in viewer.events(node=OTHER_NODE, since="30d"))
        missing = gpuhealth("forget", OTHER_NODE, url=live.url, who=identities.admin)
        assert missing.returncode == 1
        assert f"node {OTHER_NODE} is not known" in missing.stderr

        with client_as(live, identities.other_agent) as other:  # it reports again: a new node
            ack = other.report(Report.model_validate(report(OTHER_NODE, 1)))
            assert ack.accepted
        with client_as(live, identities.operator) as operator:
            assert [e.action for e in operator.audit(actor="adam")] == ["forget_node"]
    finally:
        live.stop()
