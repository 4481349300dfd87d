"""The agent reads its Node's labels once at start-up to choose its behaviour profile: through the official
client against the emulated API server, and one line when it cannot."""

from __future__ import annotations

import pytest
from kubernetes import client

from core.settings import SettingsError
from remediation.kubernetes.node_labels import read_node_labels
from remediation.plan.profiles import NodeGroup, ProfilesSettings, select
from sim.kube.harness import KubeSim

NODE = "gpu-node-0"


def test_the_nodes_labels_choose_its_profile(sim: KubeSim, human: client.CoreV1Api) -> None:
    human.patch_node(NODE, {"metadata": {"labels": {"gpuhealth.io/group": "canary"}}})
    api_client = sim.api_client()
    try:
        labels = read_node_labels(api_client, None, NODE)
    finally:
        api_client.close()
    assert labels["gpuhealth.io/group"] == "canary"
    assert labels["kubernetes.io/hostname"] == NODE
    profiles = ProfilesSettings.model_validate(
        {"definitions": {"canary": {"mode": "drain", "match": {"labels": {"gpuhealth.io/group": "canary"}}}}}
    )
    assert select(profiles, NodeGroup(labels=labels)) == "canary"


def test_a_node_that_cannot_be_read_is_one_line(sim: KubeSim) -> None:
    api_client = sim.api_client()
    try:
        with pytest.raises(
            SettingsError, match=r"^profiles: cannot read node no-such-node's labels"
        ) as caught:
            read_node_labels(api_client, None, "no-such-node")
    finally:
        api_client.close()
    assert "\n" not in str(caught.value)
