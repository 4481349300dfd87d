"""ACL enforcement: tokens, policies in HCL and JSON, 403 "Permission denied".

Pages cited: developer.hashicorp.com/nomad/api-docs (ACLs: ``X-Nomad-Token``), /api-docs/nodes and
/api-docs/client (``node:write``), /api-docs/allocations (``namespace:alloc-lifecycle``),
/api-docs/acl/tokens, /docs/other-specifications/acl-policy.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from nomad.api.exceptions import URLNotAuthorizedNomadException

from sim.nomad.harness import NomadSim, running_nomad_sim

NODE_READ = 'node { policy = "read" }'
NODE_WRITE = 'node {\n  policy = "write"\n}\nagent {\n  policy = "read"\n}'
AGENT_POLICY = """
node { policy = "write" }
agent { policy = "read" }
namespace "default" {
  policy       = "read"
  capabilities = ["alloc-lifecycle"]
}
"""


@pytest.fixture
def acl_sim() -> Iterator[NomadSim]:
    """Two nodes with ACLs enforced."""
    with running_nomad_sim(nodes=2, acl=True) as sim:
        yield sim


def test_requests_without_a_token_are_denied(acl_sim: NomadSim) -> None:
    """api-docs ACLs: a request without X-Nomad-Token runs as anonymous, which has no policy: 403
    with the body "Permission denied"."""
    reply = httpx.get(f"{acl_sim.address}/v1/nodes")
    assert (reply.status_code, reply.text) == (403, "Permission denied")
    with pytest.raises(URLNotAuthorizedNomadException):
        acl_sim.client().nodes.get_nodes()


def test_unknown_token_is_refused(acl_sim: NomadSim) -> None:
    """api-docs ACLs: a secret that names no token is 403 "ACL token not found"."""
    reply = httpx.get(f"{acl_sim.address}/v1/nodes", headers={"X-Nomad-Token": "not-a-token"})
    assert (reply.status_code, reply.text) == (403, "ACL token not found")


def test_eligibility_needs_node_write(acl_sim: NomadSim) -> None:
    """api-docs/nodes "Toggle Node Eligibility": ACL ``node:write``; ``node:read`` only reads."""
    node_id = acl_sim.node_id("gpu-node-0")
    reader = acl_sim.client(acl_sim.create_token("reader", NODE_READ))
    assert len(reader.nodes.get_nodes()) == 2
    with pytest.raises(URLNotAuthorizedNomadException) as raised:
        reader.node.eligible_node(node_id, ineligible=True)
    assert raised.value.nomad_resp.text == "Permission denied"
    writer = acl_sim.client(acl_sim.create_token("writer", NODE_WRITE))
    writer.node.eligible_node(node_id, ineligible=True)
    assert acl_sim.state.node(node_id)["SchedulingEligibility"] == "ineligible"


def test_drain_and_client_metadata_need_node_write(acl_sim: NomadSim) -> None:
    """api-docs/nodes "Drain Node" and api-docs/client "Update Dynamic Node Metadata": ``node:write``;
    reading metadata needs ``node:read``."""
    node_id = acl_sim.node_id("gpu-node-1")
    local = acl_sim.client_address("gpu-node-1")
    reader = {"X-Nomad-Token": acl_sim.create_token("reader", NODE_READ)}
    writer = {"X-Nomad-Token": acl_sim.create_token("writer", NODE_WRITE)}
    body = {"Meta": {"gpuhealth.state": "unhealthy"}}
    assert httpx.post(f"{local}/v1/client/metadata", json=body, headers=reader).status_code == 403
    assert httpx.get(f"{local}/v1/client/metadata", headers=reader).status_code == 200
    assert httpx.post(f"{local}/v1/client/metadata", json=body, headers=writer).status_code == 200
    drain = {"DrainSpec": {"Deadline": 0, "IgnoreSystemJobs": True}}
    url = f"{acl_sim.address}/v1/node/{node_id}/drain"
    assert httpx.post(url, json=drain, headers=reader).status_code == 403
    assert httpx.post(url, json=drain, headers=writer).status_code == 200


def test_alloc_stop_needs_alloc_lifecycle_and_agent_self_needs_agent_read(acl_sim: NomadSim) -> None:
    """api-docs/allocations "Stop Allocation": ``namespace:alloc-lifecycle``; api-docs/agent: ``agent:read``.
    The agent's policy (node write, agent read, namespace read + alloc-lifecycle) covers both."""
    admin = acl_sim.client(acl_sim.management_token)
    job = {"ID": "train", "Type": "batch", "TaskGroups": [{"Name": "g", "Tasks": [{"Name": "t"}]}]}
    admin.jobs.register_job({"Job": job})
    alloc = acl_sim.wait_placed("train", 1)[0]
    nodes_only = acl_sim.client(acl_sim.create_token("nodes", NODE_WRITE))
    with pytest.raises(URLNotAuthorizedNomadException):
        nodes_only.allocation.stop_allocation(alloc["ID"])
    agent_token = acl_sim.create_token("gpuhealth-agent", AGENT_POLICY)
    agent = acl_sim.client(agent_token)
    agent.allocation.stop_allocation(alloc["ID"])
    local = acl_sim.client(agent_token, node="gpu-node-0")
    assert local.agent.get_agent()["config"]["NodeName"] == "gpu-node-0"
    with pytest.raises(URLNotAuthorizedNomadException):
        acl_sim.client(acl_sim.create_token("nodes-read", NODE_READ)).agent.get_agent()


def test_policy_rules_in_json_form_are_accepted(acl_sim: NomadSim) -> None:
    """acl-policy specification: the JSON form of the rules grants the same as the HCL form."""
    token = acl_sim.create_token("json", '{"node": {"policy": "write"}}')
    acl_sim.client(token).node.eligible_node(acl_sim.node_id("gpu-node-0"), ineligible=True)


def test_acl_endpoints_create_tokens_for_the_management_token_only(acl_sim: NomadSim) -> None:
    """api-docs/acl/tokens "Create Token" and api-docs/acl/policies "Create or Update Policy": management
    only; the new token works; ``token/self`` reads the caller's own token."""
    admin = acl_sim.client(acl_sim.management_token)
    admin.acl.create_policy("ops", {"Name": "ops", "Rules": NODE_WRITE})
    created = admin.acl.create_token({"Name": "ops", "Type": "client", "Policies": ["ops"]})
    assert created["Type"] == "client"
    ops = acl_sim.client(created["SecretID"])
    assert ops.acl.get_self_token()["AccessorID"] == created["AccessorID"]
    with pytest.raises(URLNotAuthorizedNomadException):
        ops.acl.create_token({"Name": "escalate", "Type": "management"})
    ops.node.eligible_node(acl_sim.node_id("gpu-node-1"), ineligible=True)


def test_acls_off_means_everything_is_allowed() -> None:
    """Without ACLs (Nomad's default) no token is needed."""
    with running_nomad_sim(nodes=1, controllers=False) as sim:
        assert httpx.get(f"{sim.address}/v1/nodes").status_code == 200
        assert sim.management_token is None
