"""On-demand deep diagnostics through the aggregator: ``POST /v1/nodes/{node}/diag`` stores the request
durably, hands it to the node's agent with its next report's answer, never cancels a quarantine, and the
agent's outcome lands in the node's timeline; ``gpuhealth diag`` drives it from the command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
from fastapi.testclient import TestClient

from tests.aggregator.builders import AUTH, TOKEN, report
from tests.aggregator.conftest import StartAggregator

GPUHEALTH = os.environ.get("GPUHEALTH_CLI") or str(Path(sys.executable).parent / "gpuhealth")


def test_diag_request_reaches_the_agent_with_its_level_and_force(client: TestClient) -> None:
    assert client.post("/v1/reports", json=report("node-1", 1), headers=AUTH).status_code == 200
    body = {"level": 3, "force": True, "reason": "suspect HBM", "requested_by": "alice"}
    created = client.post("/v1/nodes/node-1/diag", json=body, headers=AUTH)
    assert created.status_code == 201, created.text
    request = created.json()
    assert (request["kind"], request["level"], request["force"], request["status"]) == (
        "diag",
        3,
        True,
        "pending",
    )

    ack = client.post("/v1/reports", json=report("node-1", 2), headers=AUTH).json()
    assert [(r["id"], r["kind"], r["level"], r["force"]) for r in ack["pending_requests"]] == [
        (request["id"], "diag", 3, True)
    ]
    assert ack["hold"] is None  # asking for a diagnostic holds nothing

    outcome = {
        "at": "2026-01-01T00:05:00Z",
        "action": "diag",
        "result": "ok",
        "message": "dcgmi diag level 3 (requested by alice, forced) passed in 912 s: memory pass, pcie pass",
    }
    done = report("node-1", 3, acknowledged=[request["id"]], actions=[outcome])
    assert client.post("/v1/reports", json=done, headers=AUTH).json()["pending_requests"] == []
    timeline = client.get("/v1/nodes/node-1", headers=AUTH).json()["timeline"]
    messages = [event["message"] for event in timeline]
    assert "diag requested by shared-token: suspect HBM" in messages  # the caller, not the body's name
    assert any(m.startswith("diag ok: dcgmi diag level 3") and "912 s" in m for m in messages)


def test_diag_request_never_supersedes_a_pending_quarantine_and_a_newer_diag_does(
    client: TestClient,
) -> None:
    assert client.post("/v1/reports", json=report("node-1", 1), headers=AUTH).status_code == 200
    quarantine = {"reason": "flaky NVLink", "requested_by": "bob"}
    assert client.post("/v1/nodes/node-1/quarantine", json=quarantine, headers=AUTH).status_code == 201
    client.post("/v1/nodes/node-1/diag", json={"level": 1}, headers=AUTH)
    client.post("/v1/nodes/node-1/diag", json={"level": 2}, headers=AUTH)
    pending = client.get("/v1/nodes/node-1/requests", headers=AUTH).json()
    assert [(p["kind"], p["level"]) for p in pending] == [("quarantine", None), ("diag", 2)]


def test_diag_request_is_refused_for_an_unknown_node_a_bad_level_or_no_token(client: TestClient) -> None:
    assert client.post("/v1/nodes/ghost/diag", json={}, headers=AUTH).status_code == 404
    assert client.post("/v1/reports", json=report("node-1", 1), headers=AUTH).status_code == 200
    assert client.post("/v1/nodes/node-1/diag", json={"level": 5}, headers=AUTH).status_code == 422
    assert client.post("/v1/nodes/node-1/diag", json={"level": 1}).status_code == 401


def gpuhealth(*args: str, url: str, token: str = TOKEN) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("GPUHEALTH_")}
    env |= {"NO_COLOR": "1", "COLUMNS": "200", "USER": "oncall"}
    env |= {"GPUHEALTH_AGGREGATOR_URL": url, "GPUHEALTH_TOKEN": token}
    return subprocess.run(
        [GPUHEALTH, *args], capture_output=True, text=True, env=env, timeout=60, check=False
    )


def test_gpuhealth_diag_queues_the_request_and_names_where_the_result_shows(
    start_aggregator: StartAggregator, tmp_path: Path
) -> None:
    live = start_aggregator(database_url=f"sqlite:///{tmp_path / 'a.db'}")
    assert httpx.post(f"{live.url}/v1/reports", json=report("node-2", 1), headers=AUTH).status_code == 200

    result = gpuhealth("diag", "node-2", "--level", "2", "--force", url=live.url)
    assert result.returncode == 0, result.stderr
    assert "diag level 2, forced of node-2 requested" in result.stdout
    assert "gpuhealth node node-2" in result.stdout
    pending = httpx.get(f"{live.url}/v1/nodes/node-2/requests", headers=AUTH).json()
    assert [(p["kind"], p["level"], p["force"], p["requested_by"]) for p in pending] == [
        ("diag", 2, True, "shared-token")
    ]

    as_json = json.loads(gpuhealth("diag", "node-2", "--json", url=live.url).stdout)
    assert (as_json["level"], as_json["force"]) == (1, False)

    missing = gpuhealth("diag", "ghost", url=live.url)
    assert (missing.returncode, missing.stderr.count("\n")) == (1, 1)
    assert "ghost has never reported" in missing.stderr
    bad = gpuhealth("diag", "node-2", "--level", "7", url=live.url)
    assert bad.returncode == 2
    assert bad.stderr.count("\n") == 1
