"""Agents authenticated by Nomad workload identity (the emulated servers sign the JWTs and serve their
JWKS): the node comes from the claimed allocation, never from the agent; a forged signature, a wrong
audience, an expired token or another job's task are not agents."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from live_aggregator import LiveAggregator

from agent.uplink.client import AggregatorClient, Forbidden, Unauthorized
from core.aggregator_api import Report
from core.clock import ManualClock
from sim.nomad.harness import NomadSim, running_nomad_sim
from tests.aggregator.builders import report

AUDIENCE = "gpuhealth-aggregator"


def _system_job(job_id: str) -> dict[str, Any]:
    task = {"Name": "agent", "Driver": "docker", "Config": {"image": "gpuhealth"}}
    group = {"Name": "group", "Count": 1, "Tasks": [task]}
    return {"ID": job_id, "Name": job_id, "Type": "system", "Datacenters": ["dc1"], "TaskGroups": [group]}


@pytest.fixture(scope="module")
def nomad() -> Iterator[NomadSim]:
    with running_nomad_sim(nodes=2, acl=True) as sim:
        sim.register_job(_system_job("gpuhealth-agent"))
        sim.register_job(_system_job("log-shipper"))
        sim.wait_placed("gpuhealth-agent", 2)
        sim.wait_placed("log-shipper", 2)
        yield sim


@pytest.fixture(scope="module")
def aggregator(nomad: NomadSim, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveAggregator]:
    root = tmp_path_factory.mktemp("nomad-identity")
    token_file = root / "nomad-token"
    token_file.write_text(nomad.management_token or "")
    live = LiveAggregator(
        root / "aggregator.db",
        ManualClock(start=datetime(2026, 1, 1, tzinfo=UTC)),
        None,
        nomad_address=nomad.address,
        nomad_audience=AUDIENCE,
        nomad_token_file=token_file,
    ).start()
    yield live
    live.stop()


def _client(live: LiveAggregator, token: str) -> AggregatorClient:
    return AggregatorClient(live.url, token, timeout_s=5.0, retries=1)


def test_an_agent_task_acts_for_the_node_its_allocation_runs_on_and_no_other(
    nomad: NomadSim, aggregator: LiveAggregator
) -> None:
    allocations = sorted(nomad.live_allocations("gpuhealth-agent"), key=lambda alloc: str(alloc["NodeName"]))
    mine, theirs = str(allocations[0]["NodeName"]), str(allocations[1]["NodeName"])
    token = nomad.workload_identities.issue(allocations[0], task="agent", audience=AUDIENCE)
    with _client(aggregator, token) as agent:
        assert agent.report(Report.model_validate(report(mine, 1))).accepted
        with pytest.raises(Forbidden) as refused:
            agent.report(Report.model_validate(report(theirs, 1)))
    assert str(refused.value) == (
        f"the aggregator refused (HTTP 403): agent {mine} may only report for its own node, not {theirs}"
    )


def _forged(nomad: NomadSim, allocation: dict[str, Any]) -> str:
    return nomad.workload_identities.issue(
        allocation, task="agent", audience=AUDIENCE, key=ec.generate_private_key(ec.SECP256R1())
    )


@pytest.mark.parametrize("case", ["forged signature", "wrong audience", "expired", "another job's task"])
def test_identities_that_are_not_an_agents_are_refused_with_401(
    nomad: NomadSim, aggregator: LiveAggregator, case: str
) -> None:
    agent_alloc = nomad.live_allocations("gpuhealth-agent")[0]
    identities = nomad.workload_identities
    token = {
        "forged signature": lambda: _forged(nomad, agent_alloc),
        "wrong audience": lambda: identities.issue(agent_alloc, task="agent", audience="vault.io"),
        "expired": lambda: identities.issue(
            agent_alloc, task="agent", audience=AUDIENCE, now=1_000_000, ttl_s=60
        ),
        "another job's task": lambda: identities.issue(
            nomad.live_allocations("log-shipper")[0], task="agent", audience=AUDIENCE
        ),
    }[case]()
    node = str(agent_alloc["NodeName"])
    with _client(aggregator, token) as caller, pytest.raises(Unauthorized) as refused:
        caller.report(Report.model_validate(report(node, 1)))
    assert "HTTP 401" in str(refused.value)


def test_the_jwks_is_public_and_holds_no_private_key(nomad: NomadSim) -> None:
    keys = httpx.get(f"{nomad.address}/.well-known/jwks.json").json()["keys"]
    assert [key["alg"] for key in keys] == ["ES256"]
    assert all("d" not in key for key in keys)


def test_a_tenants_job_named_like_the_agent_in_another_namespace_is_no_agent(tmp_path: Path) -> None:
    """On a cluster where tenants submit jobs in a namespace the aggregator may read (to requeue them), a
    tenant's job named like the agent, with an identity for the aggregator, is not its node's agent: the
    agent identity is bound to the configured namespace, whatever namespace the token names."""
    with running_nomad_sim(nodes=1, acl=True) as sim:
        sim.register_job({**_system_job("gpuhealth-agent"), "Namespace": "tenant-a"})
        (tenant_alloc,) = sim.wait_placed("gpuhealth-agent", 1)
        assert tenant_alloc["Namespace"] == "tenant-a"
        token_file = tmp_path / "nomad-token"
        token_file.write_text(sim.management_token or "")
        live = LiveAggregator(
            tmp_path / "aggregator.db",
            ManualClock(start=datetime(2026, 1, 1, tzinfo=UTC)),
            None,
            nomad_address=sim.address,
            nomad_audience=AUDIENCE,
            nomad_token_file=token_file,
        ).start()
        try:
            token = sim.workload_identities.issue(tenant_alloc, task="agent", audience=AUDIENCE)
            node = str(tenant_alloc["NodeName"])
            with _client(live, token) as tenant, pytest.raises(Unauthorized) as refused:
                tenant.report(Report.model_validate(report(node, 1)))
        finally:
            live.stop()
    assert "HTTP 401" in str(refused.value)
