"""Peer comparison through the aggregator: 64 simulated nodes (fake NVML under a noisy training load, read
by the real NVML backend) report to the app; the one degraded GPU, and no other, gets a warning in the node's
record and in ``/v1/peers``, and one ``peer_outlier`` alert; nothing is drained or quarantined."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import create_engine, select

from aggregator.store.tables import alerts
from core.aggregator_api import NodeDetail
from core.clock import ManualClock
from gpuhealth.cli.fleet_cmd import print_node
from sim.fakes.fleet import LoadedFleet
from tests.aggregator.builders import AUTH, report
from tests.aggregator.conftest import MakeClient


def _post_fleet(client: Any, fleet: LoadedFleet, seq: int) -> None:
    for name, gpus in fleet.stored():
        body = report(name, seq, gpus=len(gpus))
        body["gpus"] = gpus
        assert client.post("/v1/reports", json=body, headers=AUTH).status_code == 200


def test_sixty_four_nodes_flag_the_one_gpu_slow_at_full_power_and_no_other(
    make_client: MakeClient, clock: ManualClock, database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    client = make_client()
    fleet = LoadedFleet(64, seed="peers", idle_share=0.15)
    fleet.nvml["gpu-0042"].slow_at_full_power(5, factor=0.62)
    flagged: set[tuple[str, int, str]] = set()
    for step in range(4):
        fleet.step(step)
        _post_fleet(client, fleet, seq=step + 1)
        client.app.state.peers.run_once()  # type: ignore[attr-defined]
        answer = client.get("/v1/peers", headers=AUTH).json()
        assert answer["groups"][0]["gpus"] == 512
        flagged |= {(o["node"], o["gpu_index"], o["code"]) for o in answer["outliers"]}
        clock.advance(60)
    assert flagged == {("gpu-0042", 5, "PEER_SM_CLOCK")}

    detail = client.get("/v1/nodes/gpu-0042", headers=AUTH).json()
    assert [(f["code"], f["status"], f["action"]) for f in detail["peer_findings"]] == [
        ("PEER_SM_CLOCK", "warn", "none")
    ]
    assert "GPU 5: SM clock" in detail["peer_findings"][0]["message"]
    assert detail["state"] == "healthy"  # a warning only: no incident, no quarantine
    assert client.get("/v1/nodes/gpu-0041", headers=AUTH).json()["peer_findings"] == []
    print_node(NodeDetail.model_validate(detail), clock.now())  # what `gpuhealth node gpu-0042` prints
    shown = " ".join(capsys.readouterr().out.split())
    assert "AGAINST ITS PEERS" in shown
    assert "PEER_SM_CLOCK: GPU 5: SM clock" in shown

    engine = create_engine(database_url)
    with engine.connect() as conn:
        raised = conn.execute(select(alerts.c.kind, alerts.c.severity, alerts.c.node, alerts.c.summary)).all()
    engine.dispose()
    peer_alerts = [row for row in raised if row.kind == "peer_outlier"]
    assert [(row.severity, row.node) for row in peer_alerts] == [("warning", "gpu-0042")]
    assert "SM clock" in peer_alerts[0].summary
    fleet.close()


def test_a_policy_may_quarantine_a_slow_gpus_node_once_until_a_human_releases_it(
    make_client: MakeClient, clock: ManualClock
) -> None:
    client = make_client(peers={"quarantine": ["PEER_SM_CLOCK"]})
    fleet = LoadedFleet(64, seed="peers", idle_share=0.0)
    fleet.nvml["gpu-0042"].slow_at_full_power(5, factor=0.62)
    for step in range(2):
        fleet.step(step)
        _post_fleet(client, fleet, seq=step + 1)
        client.app.state.peers.run_once()  # type: ignore[attr-defined]
        clock.advance(60)
    fleet.close()
    detail = client.get("/v1/nodes/gpu-0042", headers=AUTH).json()
    [request] = detail["pending_requests"]
    assert (request["kind"], request["requested_by"]) == ("quarantine", "aggregator (peer comparison)")
    assert "SM clock" in request["reason"]
    assert detail["hold"].startswith("quarantined by aggregator (peer comparison): peer comparison: GPU 5")
    assert client.get("/v1/nodes/gpu-0041", headers=AUTH).json()["pending_requests"] == []
