"""The reliability report against a day with known incidents, on SQLite and PostgreSQL: the API, the
Prometheus gauges and ``gpuhealth report`` give the figures worked out by hand below."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from core.aggregator_api import ReliabilityReport
from core.clock import ManualClock
from gpuhealth.cli.report_cmd import run_report
from tests.aggregator.builders import AUTH, report
from tests.aggregator.conftest import MakeClient

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _day(client: object, clock: ManualClock) -> None:
    """Four 8-GPU nodes from T0. node-a: XID 79, reboot, 1 h -> 3 h and 10 h -> 11 h; node-b: an
    application fault (restart_app), 5 h -> 6 h; node-c and node-d healthy. The report is read at 24 h."""
    seqs = dict.fromkeys(("node-a", "node-b", "node-c", "node-d"), 0)

    def send(name: str, state: str = "healthy", incident: str | None = None) -> None:
        seqs[name] += 1
        body = report(name, seqs[name], state, incident=incident, sent_at=clock.now())
        assert client.post("/v1/reports", json=body, headers=AUTH).status_code == 200  # type: ignore[attr-defined]

    def at(hours: float) -> None:
        clock.advance((T0 + timedelta(hours=hours) - clock.now()).total_seconds())

    for name in seqs:
        send(name)
    for start, end, name, state, incident in (
        (1, 3, "node-a", "unhealthy", "a-1"),
        (5, 6, "node-b", "degraded", "b-1"),
        (10, 11, "node-a", "unhealthy", "a-2"),
    ):
        at(start)
        send(name, state, incident)
        at(end)
        send(name)
    at(24)
    for name in seqs:
        send(name)  # every node still reporting: none goes stale


def test_the_report_matches_a_day_of_known_incidents(
    make_client: MakeClient,
    clock: ManualClock,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert clock.now() == T0
    client = make_client(repeat_offender_incidents=2)
    _day(client, clock)

    answer = ReliabilityReport.model_validate(client.get("/v1/reliability?since=30d", headers=AUTH).json())
    assert answer.incidents == 3
    [group] = answer.groups
    assert (group.key, group.nodes, group.gpus) == ("NVIDIA H200", 4, 32)
    assert group.mtbi_hours == 32.0  # 4 nodes x 24 h / 3 incidents
    assert group.mttr_hours == 1.33  # (2 + 1 + 1) h / 3
    assert group.gpu_hours_out == 24.0  # the two reboots: (2 + 1) h x 8 GPUs; restart_app takes none
    assert group.gpu_hours_out_by_class == {"xid": 24.0}
    assert group.gpu_hours_out_by_action == {"reboot": 24.0}
    assert (group.reset_share, group.reboot_share, group.replace_share) == (0.0, 0.6667, 0.0)
    assert answer.gpu_hours_observed == 768.0
    assert answer.fleet_health_ratio == 0.96875  # 1 - 24 / 768
    assert answer.repeat_offenders == {"node-a": 2}
    assert [day["incidents"] for day in answer.incidents_per_day][-2:] == [3, 0]

    by_node = client.get("/v1/reliability?since=30d&by=node", headers=AUTH).json()
    assert {g["key"]: g["incidents"] for g in by_node["groups"]} == {
        "node-a": 2,
        "node-b": 1,
        "node-c": 0,
        "node-d": 0,
    }
    assert client.get("/v1/reliability?by=rack", headers=AUTH).status_code == 422

    metrics = client.get("/metrics", headers=AUTH).text
    assert "gpuhealth_fleet_health_ratio 0.96875" in metrics
    assert 'gpuhealth_reliability_mtbi_hours{model="NVIDIA H200"} 32.0' in metrics
    assert (
        'gpuhealth_reliability_gpu_hours_out{action="reboot",fault_class="",model="NVIDIA H200"} 24.0'
        in metrics
    )

    class _Client:
        def __enter__(self) -> _Client:
            return self

        def __exit__(self, *_: object) -> None:
            return None

        def reliability(self, *, since: str | None, by: str) -> ReliabilityReport:
            return ReliabilityReport.model_validate(
                client.get("/v1/reliability", params={"since": since, "by": by}, headers=AUTH).json()
            )

    monkeypatch.setattr("gpuhealth.cli.report_cmd._client", lambda _args: _Client())
    import argparse

    assert run_report(argparse.Namespace(since="30d", by="model", json=False)) == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert "3 incidents, 24.0 of 768 GPU-hours out of service; fleet health 96.875 %" in shown
    assert "repeat offenders: node-a (2)" in shown
    assert "GPU-hours out by fault class: xid 24.0" in shown
