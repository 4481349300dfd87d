"""``gpuhealth evidence``: one archive for a hardware return, built from a real aggregator's records (SQLite
and PostgreSQL) of a GPU that raised XID 79, was quarantined by a person, diagnosed and released."""

from __future__ import annotations

import argparse
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest

from core.aggregator_api import Event, IncidentDetail, IncidentSummary, NodeDetail
from core.clock import ManualClock
from gpuhealth.cli.errors import CliError
from gpuhealth.cli.evidence_cmd import run_evidence
from sim.fakes.fleet import LoadedFleet
from tests.aggregator.builders import AUTH, TOKEN, report
from tests.aggregator.conftest import MakeClient

SECRET_IN_A_MESSAGE = "Bearer abcdefghijklmnop0123456789"
DIAG_OUTPUT = {"DCGM GPU Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [
    {"name": "Memory", "results": [{"gpu_id": "3", "status": "Fail", "warnings": [{"warning": "DBE"}]}]}]}]}}  # fmt: skip


# What an agent sends with a diagnostic's result: dcgmi's raw output (here with a credential in it, as a
# misconfigured plugin might print, which neither the agent's copy nor the archive may keep).
AGENT_DIAG_OUTPUT = json.dumps(
    {**DIAG_OUTPUT, "host": {"password": "hunter2-very-secret"}, "note": "Bearer zyxwvutsrq9876543210"}
)


class _ApiClient:
    """The CLI's client calls, answered by the in-process app."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def __enter__(self) -> _ApiClient:
        return self

    def __exit__(self, *_: object) -> None:
        return None

    def _get(self, path: str, **params: Any) -> Any:
        answer = self.client.get(path, params=params, headers=AUTH)
        assert answer.status_code == 200, answer.text
        return answer.json()

    def node(self, name: str) -> NodeDetail:
        return NodeDetail.model_validate(self._get(f"/v1/nodes/{name}"))

    def events(self, *, node: str, limit: int, all_pages: bool) -> list[Event]:
        return [Event.model_validate(e) for e in self._get("/v1/events", node=node, limit=limit)]

    def incidents(self, *, node: str) -> list[IncidentSummary]:
        return [IncidentSummary.model_validate(i) for i in self._get("/v1/incidents", node=node)]

    def incident(self, incident_id: str) -> IncidentDetail:
        return IncidentDetail.model_validate(self._get(f"/v1/incidents/{incident_id}"))


def _history(client: Any, clock: ManualClock) -> str:
    """gpu-0000 reports under load; GPU 3 raises XID 79 (reboot); olga quarantines it; a diagnostic runs;
    the agent reboots it (its message carries a credential by mistake) and releases it. Returns GPU 3's UUID."""
    fleet = LoadedFleet(1, seed="evidence", idle_share=0.0)
    fleet.step(0)
    [(name, gpus)] = list(fleet.stored())
    uuid = gpus[3]["uuid"]
    fleet.close()

    def send(
        seq: int, state: str, *, incident: str | None = None, actions: list[dict[str, Any]] | None = None
    ) -> None:
        body = report(name, seq, state, incident=incident, actions=actions, gpus=8, sent_at=clock.now())
        body["gpus"] = [
            {**gpu, "status": "fail" if incident and gpu["uuid"] == uuid else "ok"} for gpu in gpus
        ]
        for finding in body["verdict"]["findings"]:
            finding["gpu"] = uuid
        assert client.post("/v1/reports", json=body, headers=AUTH).status_code == 200
        clock.advance(60)

    send(1, "healthy")
    send(2, "unhealthy", incident="inc-79")
    assert (
        client.post(
            f"/v1/nodes/{name}/quarantine", json={"reason": "XID 79 twice this week"}, headers=AUTH
        ).status_code
        == 201
    )
    assert (
        client.post(f"/v1/nodes/{name}/diag", json={"level": 2, "force": True}, headers=AUTH).status_code
        == 201
    )
    at = clock.now().isoformat()
    send(3, "unhealthy", incident="inc-79", actions=[
        {"at": at, "action": "diag", "result": "failed", "message": "dcgmi diag -r 2: Memory failed on GPU 3",
         "output": AGENT_DIAG_OUTPUT},
        {"at": at, "action": "reboot", "result": "ok", "message": f"reboot requested with {SECRET_IN_A_MESSAGE}"},
    ])  # fmt: skip
    send(4, "healthy", actions=[{"at": clock.now().isoformat(), "action": "release", "result": "ok"}])
    clock.advance(300)  # the next sample of the node's readings ring: after the release
    send(5, "healthy")
    return str(uuid)


def test_the_archive_holds_what_a_vendor_asks_for_and_no_secret(
    make_client: MakeClient, clock: ManualClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = make_client()
    uuid = _history(client, clock)
    monkeypatch.setattr("gpuhealth.cli.evidence_cmd._client", lambda _args: _ApiClient(client))
    diag = tmp_path / "diag.json"
    diag.write_text(json.dumps(DIAG_OUTPUT), encoding="utf-8")
    output = tmp_path / "gpu3.tar.gz"
    args = argparse.Namespace(
        name="gpu-0000", gpu=3, output=str(output), dcgmi_diag=[str(diag)], json=False, token=TOKEN
    )
    assert run_evidence(args) == 0

    with tarfile.open(output) as archive:
        members = {m.name.split("/", 1)[1]: archive.extractfile(m).read() for m in archive.getmembers()}  # type: ignore[union-attr]
    assert next(iter(members)) == "SUMMARY.txt"
    assert {"identity.json", "xid_timeline.json", "incidents/inc-79.json", "readings_now.json", "memory.json",
            "diagnostics.json", "actions.json", "diagnostics/raw-1.json"} <= set(members)  # fmt: skip
    summary = members["SUMMARY.txt"].decode()
    assert "GPU 3: NVIDIA H100 80GB HBM3, serial 16" in summary
    assert f"UUID {uuid}, PCI 00000000:5D:00.0, VBIOS 96.00.99.00.01, driver 580.95.05" in summary
    assert "inc-79: XID_79; action reboot" in summary and "released" in summary
    assert "XIDs and SXids seen: XID_79 x1" in summary
    assert "remapped_rows_uncorrectable 0" in summary

    [gpu] = json.loads(members["identity.json"])["gpus"]
    assert (gpu["index"], gpu["uuid"]) == (3, uuid)
    incident = json.loads(members["incidents/inc-79.json"])
    assert list(incident["readings_at_open"]) == [uuid]
    assert incident["readings_at_open"][uuid]["pcie_gen"] == 5
    assert list(incident["readings_at_release"]) == [uuid]
    actions = json.loads(members["actions.json"])
    by = {(a["kind"], a["by"]) for a in actions}
    # Who: the person (here the shared token's principal) for requests, the node's agent for its steps.
    assert {("quarantine_requested", "shared-token"), ("diag_requested", "shared-token")} <= by
    assert ("incident_opened", "aggregator") in by
    assert any(a["kind"] == "action" and a["by"] == "agent on gpu-0000" for a in actions)
    diagnostics = json.loads(members["diagnostics.json"])
    assert any("Memory failed on GPU 3" in d["message"] for d in diagnostics)
    assert json.loads(members["diagnostics/raw-1.json"]) == DIAG_OUTPUT
    # The agent's own raw dcgmi output came with its result, through the aggregator, redacted.
    [sent] = [d for d in diagnostics if d["details"].get("output_file")]
    raw = json.loads(members[sent["details"]["output_file"]])
    assert raw["DCGM GPU Diagnostic"] == DIAG_OUTPUT["DCGM GPU Diagnostic"]
    assert raw["host"]["password"] == "[redacted]"
    assert "Diagnostic lines in the history: " in summary and "1 with dcgmi's raw output" in summary
    # The readings around the incident: before it (the ring), at its opening, during, at release, after.
    assert [list(item["readings"]) for item in incident["readings_before"]] == [[uuid]]
    assert incident["readings_before"][0]["incident_id"] is None  # sampled before it opened
    assert [item["incident_id"] for item in incident["readings_during"]] == ["inc-79"]
    assert [list(item["readings"]) for item in incident["readings_after_release"]] == [[uuid]]
    assert incident["readings_after_release"][0]["incident_id"] is None

    everything = b"".join(members.values())
    assert TOKEN.encode() not in everything
    assert b"abcdefghijklmnop0123456789" not in everything
    assert b"hunter2-very-secret" not in everything and b"zyxwvutsrq9876543210" not in everything
    assert b"[redacted]" in everything


def test_an_unknown_gpu_is_one_line(
    make_client: MakeClient, clock: ManualClock, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    client = make_client()
    _history(client, clock)
    monkeypatch.setattr("gpuhealth.cli.evidence_cmd._client", lambda _args: _ApiClient(client))
    args = argparse.Namespace(
        name="gpu-0000", gpu=9, output=str(tmp_path / "x.tgz"), dcgmi_diag=[], json=False
    )
    with pytest.raises(CliError, match=r"gpu-0000 has no GPU 9 \(its GPUs: 0, 1, 2, 3, 4, 5, 6, 7\)"):
        run_evidence(args)
