"""The disruption controller writes PodDisruptionBudget status as "Specifying a Disruption Budget" →
"Check the status of the PDB" shows it."""

from __future__ import annotations

from core.clock import ManualClock
from sim.kube.controllers import DisruptionController
from sim.kube.store import MemoryStore


def test_pdb_status_reports_healthy_desired_expected_and_allowed() -> None:
    store = MemoryStore(clock=ManualClock())
    store.create("namespaces", {"metadata": {"name": "ml"}})
    for index, ready in enumerate(["True", "True", "False"]):
        store.create(
            "pods",
            {
                "metadata": {"name": f"p{index}", "namespace": "ml", "labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "i"}]},
                "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": ready}]},
            },
        )
    store.create(
        "poddisruptionbudgets.policy",
        {
            "metadata": {"name": "web", "namespace": "ml"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
        },
    )
    controller = DisruptionController()
    controller.reconcile(store)
    status = store.get("poddisruptionbudgets.policy", "ml", "web")["status"]
    assert (status["currentHealthy"], status["desiredHealthy"], status["expectedPods"]) == (2, 1, 3)
    assert status["disruptionsAllowed"] == 1
    allowed = next(c for c in status["conditions"] if c["type"] == "DisruptionAllowed")
    assert (allowed["status"], allowed["reason"]) == ("True", "SufficientPods")
    version = store.get("poddisruptionbudgets.policy", "ml", "web")["metadata"]["resourceVersion"]
    controller.reconcile(store)
    again = store.get("poddisruptionbudgets.policy", "ml", "web")["metadata"]["resourceVersion"]
    assert again == version, "an unchanged budget is not rewritten (the controller manager must settle)"
