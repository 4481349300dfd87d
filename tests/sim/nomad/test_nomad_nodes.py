"""Nodes, eligibility, client metadata and the local client agent, through python-nomad over HTTP.

Pages cited: developer.hashicorp.com/nomad/api-docs/nodes, /api-docs/client, /api-docs/agent.
"""

from __future__ import annotations

import httpx
import nomad
import pytest
from nomad.api.exceptions import BadRequestNomadException, URLNotFoundNomadException

from sim.nomad.harness import NomadSim, running_nomad_sim


def test_list_nodes_returns_stubs_named_like_the_kube_fleet(api: nomad.Nomad) -> None:
    """api-docs/nodes "List Nodes": stubs with ID, Name, Status, SchedulingEligibility, no NodeResources
    unless ``resources=true``; names follow sim.kube.fleet (gpu-node-N, zero-padded past 10 nodes)."""
    nodes = api.nodes.get_nodes()
    assert [n["Name"] for n in nodes] == ["gpu-node-0", "gpu-node-1", "gpu-node-2", "gpu-node-3"]
    assert {n["Status"] for n in nodes} == {"ready"}
    assert {n["SchedulingEligibility"] for n in nodes} == {"eligible"}
    assert "NodeResources" not in nodes[0]
    with_resources = api.nodes.get_nodes(resources=True)
    assert with_resources[0]["NodeResources"]["Devices"][0]["Vendor"] == "nvidia"


def test_sixteen_node_fleet_is_zero_padded() -> None:
    """16 nodes are gpu-node-00 .. gpu-node-15, exactly as the Kubernetes emulator names them."""
    with running_nomad_sim(nodes=16, controllers=False) as sim:
        names = [n["Name"] for n in sim.client().nodes.get_nodes()]
    assert names[0] == "gpu-node-00"
    assert names[-1] == "gpu-node-15"


def test_read_node_shows_gpu_devices_as_the_nvidia_plugin_fingerprints_them(
    api: nomad.Nomad, nomad_sim: NomadSim
) -> None:
    """api-docs/nodes "Read Node": NodeResources.Devices[] with Vendor nvidia, Type gpu, a model Name,
    typed Attributes and one healthy Instance per GPU whose ID is the GPU UUID."""
    node = api.node.get_node(nomad_sim.node_id("gpu-node-1"))
    device = node["NodeResources"]["Devices"][0]
    assert (device["Vendor"], device["Type"]) == ("nvidia", "gpu")
    assert device["Attributes"]["memory"] == {"Int": 81559, "Unit": "MiB"}
    assert len(device["Instances"]) == 8
    assert all(i["Healthy"] and i["ID"].startswith("GPU-") for i in device["Instances"])
    assert node["DrainStrategy"] is None
    assert node["Events"][0]["Message"] == "Node registered"


def test_gpu_instance_ids_match_the_fake_nvml_uuids() -> None:
    """Instance IDs equal FakeNvml's UUIDs for the same seed and node name, so agent and orchestrator agree."""
    from sim.fakes.gpu import fake_uuid

    with running_nomad_sim(nodes=1, gpus_per_node=2, controllers=False, gpu_seed=7) as sim:
        instances = sim.state.node("gpu-node-0")["NodeResources"]["Devices"][0]["Instances"]
    assert [i["ID"] for i in instances] == [fake_uuid(7, "gpu-node-0", slot) for slot in range(2)]


def test_unknown_node_is_404_and_names_are_not_ids(api: nomad.Nomad) -> None:
    """api-docs/nodes "Read Node": ``:node_id`` is the node's ID; anything else is 404 "node not found"."""
    with pytest.raises(URLNotFoundNomadException) as raised:
        api.node.get_node("gpu-node-1")
    assert raised.value.nomad_resp.text == "node not found"


def test_eligibility_toggles_and_records_node_events(api: nomad.Nomad, nomad_sim: NomadSim) -> None:
    """api-docs/nodes "Toggle Node Eligibility": the answer carries NodeModifyIndex; the node shows it."""
    node_id = nomad_sim.node_id("gpu-node-2")
    answer = api.node.eligible_node(node_id, ineligible=True)
    assert answer["NodeModifyIndex"] >= answer["EvalCreateIndex"] > 0
    node = api.node.get_node(node_id)
    assert node["SchedulingEligibility"] == "ineligible"
    assert node["ModifyIndex"] == answer["NodeModifyIndex"]
    api.node.eligible_node(node_id, eligible=True)
    messages = [e["Message"] for e in api.node.get_node(node_id)["Events"]]
    assert messages[-2:] == [
        "Node marked as ineligible for scheduling",
        "Node marked as eligible for scheduling",
    ]


def test_draining_node_cannot_be_made_eligible(api: nomad.Nomad, nomad_sim: NomadSim) -> None:
    """Nomad refuses eligibility while a drain is in progress (cancel the drain with MarkEligible instead)."""
    node_id = nomad_sim.node_id("gpu-node-0")
    nomad_sim.scheduler.stop()  # keep the drain from completing at once on an empty node
    api.node.drain_node_with_spec(node_id, {"Deadline": 3_600_000_000_000, "IgnoreSystemJobs": True})
    with pytest.raises(BadRequestNomadException):
        api.node.eligible_node(node_id, eligible=True)


def test_client_metadata_apply_and_unset_through_the_local_agent(nomad_sim: NomadSim) -> None:
    """api-docs/client "Update Dynamic Node Metadata": {"Meta": {k: v, gone: null}} sets and unsets keys;
    the answer has Meta (merged), Dynamic (with nulls) and Static; the node's Meta shows the change."""
    local = nomad_sim.client_address("gpu-node-3")
    first = httpx.post(
        f"{local}/v1/client/metadata", json={"Meta": {"gpuhealth.state": "unhealthy", "x": "1"}}
    )
    assert first.status_code == 200
    assert first.json()["Meta"] == {"gpuhealth.state": "unhealthy", "x": "1"}
    second = httpx.post(f"{local}/v1/client/metadata", json={"Meta": {"x": None}}).json()
    assert second["Meta"] == {"gpuhealth.state": "unhealthy"}
    assert second["Dynamic"] == {"gpuhealth.state": "unhealthy", "x": None}
    assert second["Static"] == {}
    assert nomad_sim.state.node("gpu-node-3")["Meta"] == {"gpuhealth.state": "unhealthy"}
    read = httpx.get(f"{local}/v1/client/metadata").json()
    assert read["Meta"] == {"gpuhealth.state": "unhealthy"}


def test_client_metadata_on_the_server_needs_node_id(nomad_sim: NomadSim) -> None:
    """api-docs/client: through a server ``node_id`` is required; with it the named node is changed."""
    missing = httpx.post(f"{nomad_sim.address}/v1/client/metadata", json={"Meta": {"a": "b"}})
    assert missing.status_code == 400
    node_id = nomad_sim.node_id("gpu-node-0")
    ok = httpx.post(
        f"{nomad_sim.address}/v1/client/metadata", params={"node_id": node_id}, json={"Meta": {"a": "b"}}
    )
    assert ok.status_code == 200
    assert nomad_sim.state.node(node_id)["Meta"] == {"a": "b"}


def test_agent_self_on_a_local_client_reports_that_node(nomad_sim: NomadSim) -> None:
    """api-docs/agent "Query Self": a client agent reports config.NodeName and stats.client.node_id."""
    local = nomad_sim.client(node="gpu-node-2")
    me = local.agent.get_agent()
    assert me["config"]["NodeName"] == "gpu-node-2"
    assert me["config"]["Client"]["Enabled"] is True
    assert me["stats"]["client"]["node_id"] == nomad_sim.node_id("gpu-node-2")
    server = nomad_sim.client().agent.get_agent()
    assert server["config"]["Server"]["Enabled"] is True


def test_unknown_local_node_and_unknown_path_are_404(nomad_sim: NomadSim) -> None:
    """A /local/<name> prefix for a node that does not exist, and an unserved path, are 404."""
    assert httpx.get(f"{nomad_sim.address}/local/nope/v1/agent/self").status_code == 404
    assert httpx.get(f"{nomad_sim.address}/v1/volumes").status_code == 404
    assert httpx.put(f"{nomad_sim.address}/v1/nodes").status_code == 405
