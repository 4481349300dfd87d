"""Runbook on Kubernetes: RBAC takes the agent's right to patch its node away, and a wrong role must not hurt."""

from __future__ import annotations

from scenario_rig import KubeGpuNode
from structlog.testing import capture_logs

from core.findings import Status
from sim.kube.harness import KubeSim

HOLD_S = 300.0  # kubernetes.forbidden_hold_s, the default
RBAC_MESSAGE = (
    'nodes "gpu-node-0" is forbidden: User "system:serviceaccount:gpuhealth:gpuhealth-agent" cannot patch '
    'resource "nodes" in API group "" at the cluster scope'
)


def test_a_role_without_patch_nodes_is_one_clear_error_an_unknown_report_and_recovery_not_a_crash_loop(
    gpu_node: KubeGpuNode, sim: KubeSim
) -> None:
    """The ClusterRole lost ``patch nodes``: one error line naming it, the verdict carries an unknown
    EXECUTOR_FORBIDDEN finding, the node is reported unknown after the usual blind readings, every pass
    completes, writes are not retried pass after pass; once the role is fixed, the first pass after the hold
    marks the node and the finding is gone."""
    sim.faults.inject(verb="patch", resource="nodes", status=403, seconds=86_400, message=RBAC_MESSAGE)

    with capture_logs() as logs:
        first = gpu_node.tick()
        later = gpu_node.ticks(10)  # 100 s: within the hold

    assert not any(result.ok for result in first.report.results)
    errors = [entry for entry in logs if entry["log_level"] == "error"]
    assert [entry["event"] for entry in errors] == ["kubernetes_forbidden"]
    assert (errors[0]["verb"], errors[0]["resource"]) == ("patch", "nodes/status")
    assert later[0].verdict.status is Status.UNKNOWN
    assert any(f.code == "EXECUTOR_FORBIDDEN" for f in later[0].verdict.findings)
    assert later[-1].health.state.value == "unknown"
    assert gpu_node.agent.tick_errors == 0
    assert gpu_node.writes() == 1  # the refused write; the hold keeps the others from being sent
    assert gpu_node.label() is None and gpu_node.condition() is None

    sim.faults.clear()  # the role is fixed
    recovered = gpu_node.ticks(int(HOLD_S // 10) + 1)

    assert gpu_node.condition() is not None and gpu_node.label() is not None
    assert not any(f.code == "EXECUTOR_FORBIDDEN" for f in recovered[-1].verdict.findings)
    assert recovered[-1].verdict.status is Status.OK
    assert gpu_node.agent.tick_errors == 0
