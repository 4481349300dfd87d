"""The Helm chart `helm/gpuhealth`, rendered by Helm's own engine (helm-python-sdk), linted, validated against
the Kubernetes schemas (kubernetes-validate, strict), and checked for what docs/helm.md promises: an
agent DaemonSet with only the privileges NVML and /dev/kmsg need, least-privilege RBAC, and admission policies
that confine the agent to its own node.
"""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cel
import helm_python as helm
import kubernetes_validate  # type: ignore[import-untyped]  # ships no type information
import pytest
import yaml
from repo_paths import REPO_ROOT

from agent.settings import load_settings
from tests.helm.conftest import (
    AGENT_USER,
    CHART_DIR,
    NAMESPACE,
    NODE_NAME_EXTRA,
    Manifest,
    PolicyUnderTest,
    Render,
    admission_request,
    by_kind,
    component_of,
    one,
)

KUBERNETES_VERSION = kubernetes_validate.latest_version()
PROMETHEUS_OPERATOR_KINDS = {"ServiceMonitor", "PodMonitor"}

VARIATIONS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "cordon-on": {"config": {"policy": {"cordon": True}}},
    "dry-run": {"config": {"dry_run": True}},
    "noexecute-taint": {"config": {"policy": {"taint_effect": "NoExecute"}}},
    "kernel-log-kmsg": {"config": {"kernel_log": {"enabled": True, "source": "kmsg"}}},
    "kernel-log-journal": {"config": {"kernel_log": {"enabled": True, "source": "journal"}}},
    "custom-tolerations": {
        "extraTolerations": [
            {"key": "dedicated", "operator": "Equal", "value": "training", "effect": "NoSchedule"}
        ]
    },
    "runtime-class": {"nvidia": {"runtimeClassName": "nvidia"}},
    "monitoring-on": {
        "metrics": {
            "service": {"enabled": True},
            "serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}},
            "podMonitor": {"enabled": True},
        }
    },
    "tuned-checks": {
        "config": {"interval_s": 5, "debounce": {"polled_bad_readings": 2}, "checks": {}},
        "metricsPort": 9500,
        "updateStrategy": {"maxUnavailable": "10%"},
    },
    "existing-account-no-policy": {
        "serviceAccount": {"create": False, "name": "gpu-agent"},
        "admissionPolicy": {"enabled": False},
    },
    "drain-on": {"drain": {"enabled": True}},
    # The aggregator over HTTPS from an existing Secret (cert-manager's Certificate is a CRD: its own test),
    # with people's hashed tokens; and the deprecated shared-token mode.
    "tls-secret": {
        "aggregator": {
            "tls": {"enabled": True, "secretName": "agg-tls"},
            "identitiesSecret": {"name": "people"},
        }
    },
    "shared-token": {"aggregator": {"agentAuth": {"mode": "sharedToken"}}},
    "drain-by-agent": {"drain": {"enabled": True, "by": "agent"}},
}

MINIMAL_GRANTS = {
    ("", "nodes", "get"),
    ("", "nodes", "list"),
    ("", "nodes", "watch"),
    ("", "nodes", "patch"),
    ("", "nodes/status", "patch"),
    ("", "events", "create"),
    ("", "events", "patch"),
    ("events.k8s.io", "events", "create"),
    ("events.k8s.io", "events", "patch"),
}

# What the agent's own drain adds (drain.by agent): list the node's pods, evict them, read DaemonSets and
# budgets. With the central remediator (drain.by aggregator, the default) the agent gets none of it.
DRAIN_GRANTS = {
    ("", "pods", "list"),
    ("", "pods", "watch"),
    ("", "pods/eviction", "create"),
    ("apps", "daemonsets", "get"),
    ("policy", "poddisruptionbudgets", "get"),
    ("policy", "poddisruptionbudgets", "list"),
}


def agent_container(objects: list[Manifest]) -> Manifest:
    """The agent container of the DaemonSet."""
    containers = one(objects, "DaemonSet")["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["agent"]
    container: Manifest = containers[0]
    return container


def pod_spec(objects: list[Manifest]) -> Manifest:
    """The DaemonSet's pod spec."""
    spec: Manifest = one(objects, "DaemonSet")["spec"]["template"]["spec"]
    return spec


def rendered_config(objects: list[Manifest]) -> dict[str, Any]:
    """The agent's configuration file as the ConfigMap carries it."""
    config: dict[str, Any] = yaml.safe_load(one(objects, "ConfigMap")["data"]["config.yaml"])
    return config


def host_path_mounts(objects: list[Manifest]) -> dict[str, tuple[str, str, bool]]:
    """Mount path -> (host path, hostPath type, read-only) for every hostPath volume of the agent."""
    volumes = {v["name"]: v["hostPath"] for v in pod_spec(objects)["volumes"] if "hostPath" in v}
    return {
        m["mountPath"]: (
            volumes[m["name"]]["path"],
            volumes[m["name"]].get("type", ""),
            m.get("readOnly", False),
        )
        for m in agent_container(objects)["volumeMounts"]
        if m["name"] in volumes
    }


def walk(node: Any) -> Iterator[tuple[str, Any]]:
    """Every (key, value) pair anywhere in a nested manifest."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield key, value
            yield from walk(value)
    elif isinstance(node, list):
        for item in node:
            yield from walk(item)


# --- rendering, lint, schemas -------------------------------------------------------------------------------


@pytest.mark.parametrize("variation", VARIATIONS)
def test_every_rendered_manifest_is_valid_against_the_kubernetes_schemas(
    render: Render, variation: str
) -> None:
    """Each object of each main variation validates (strict: no unknown fields) against the newest Kubernetes
    schemas kubernetes-validate ships; only prometheus-operator kinds (CRDs, no schema there) are exempt."""
    objects = render(VARIATIONS[variation])
    assert objects
    for obj in objects:
        if obj["kind"] in PROMETHEUS_OPERATOR_KINDS:
            assert obj["apiVersion"] == "monitoring.coreos.com/v1"
            continue
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("variation", VARIATIONS)
def test_chart_lints_clean_in_strict_mode(variation: str) -> None:
    """Helm's linter (through the SDK, strict: warnings count) reports no warning or error for any variation."""
    report = helm.lint(
        CHART_DIR, VARIATIONS[variation], strict=True, namespace=NAMESPACE, kube_version="v1.30.0"
    )
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert report["total_charts_linted"] == 1
    assert problems == []
    assert report["errors"] == []


def test_default_render_contains_the_agent_and_its_aggregator(render: Render) -> None:
    """Defaults: the agents (DaemonSet, ConfigMap, ServiceAccount, RBAC, the admission policies) and the
    aggregator they report to (Deployment, Service, ServiceAccount and its TokenReview grant, ConfigMap,
    token Secrets, SQLite volume, disruption budget, network policy) with its `helm test` pod; no monitoring objects and no agent Service
    (both are opt-in)."""
    objects = render()
    agent = sorted(obj["kind"] for obj in objects if component_of(obj) == "agent")
    aggregator = sorted(obj["kind"] for obj in objects if component_of(obj) == "aggregator")
    assert agent == sorted(
        [
            "ClusterRole",
            "ClusterRoleBinding",
            "ConfigMap",
            "DaemonSet",
            "ServiceAccount",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
            "ValidatingAdmissionPolicyBinding",
        ]
    )
    assert aggregator == sorted(
        [
            "ClusterRoleBinding",  # system:auth-delegator: TokenReviews of the agents' tokens
            "ConfigMap",
            "Deployment",
            "NetworkPolicy",
            "PersistentVolumeClaim",
            "PodDisruptionBudget",
            "Secret",  # the API token
            "Secret",  # the scraper's token
            "Service",
            "ServiceAccount",
        ]
    )
    tests = [obj["kind"] for obj in objects if component_of(obj) == "test"]
    assert tests == ["Pod"]  # the `helm test` hook
    assert len(objects) == len(agent) + len(aggregator) + len(tests)


def test_without_the_aggregator_the_render_is_exactly_the_agent_objects(render: Render) -> None:
    """aggregator.enabled=false: nothing of the aggregator is rendered."""
    objects = render({"aggregator": {"enabled": False}})
    assert {component_of(obj) for obj in objects} == {"agent"}


# --- values.schema.json ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "pointer"),
    [
        ({"config": {"policy": {"taint_effect": "Sometimes"}}}, "/config/policy/taint_effect"),
        ({"config": {"policy": {"taint_efect": "NoSchedule"}}}, "/config/policy"),
        ({"config": {"kernel_log": {"enabled": True, "source": "dmesg"}}}, "/config/kernel_log/source"),
        ({"config": {"state_dir": "/tmp/elsewhere"}}, "/config"),
        ({"config": {"interval_s": 0}}, "/config/interval_s"),
        ({"metricsPort": 70000}, "/metricsPort"),
        ({"updateStrategy": {"maxUnavailable": "all"}}, "/updateStrategy/maxUnavailable"),
        ({"stateDir": {"hostPath": "relative/dir"}}, "/stateDir/hostPath"),
        ({"aggregator": {"replica": 2}}, "/aggregator"),
        ({"aggregator": {"settings": {"budget_max_node": 3}}}, "/aggregator/settings"),
        ({"aggregator": {"settings": {"token": "inline"}}}, "/aggregator/settings"),
        ({"aggregator": {"database": {"type": "mysql"}}}, "/aggregator/database/type"),
    ],
)
def test_a_bad_value_fails_the_render_with_a_message_naming_it(
    render: Render, values: dict[str, Any], pointer: str
) -> None:
    """values.schema.json refuses the value; Helm's error names the chart and the offending key."""
    with pytest.raises(helm.HelmValuesError) as caught:
        render(values)
    message = str(caught.value)
    assert "gpuhealth" in message
    assert f"at '{pointer}'" in message


# --- the DaemonSet ---------------------------------------------------------------------------------------------


def test_node_name_comes_from_the_downward_api(render: Render) -> None:
    """NODE_NAME is the pod's spec.nodeName: the node the agent may act on."""
    env = {e["name"]: e for e in agent_container(render())["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}


def test_nvml_comes_from_the_host_through_the_nvidia_runtime(render: Render) -> None:
    """Utility capability only (NVML), all GPUs visible; no runtime class unless one is configured."""
    objects = render()
    env = {e["name"]: e.get("value") for e in agent_container(objects)["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == "utility"
    assert "runtimeClassName" not in pod_spec(objects)
    assert pod_spec(render(VARIATIONS["runtime-class"]))["runtimeClassName"] == "nvidia"


def test_agent_tolerates_its_own_taint_the_gpu_taint_and_cordons(render: Render) -> None:
    """Without these it would be evicted from (NoExecute) or never scheduled on the nodes it must release."""
    tolerations = pod_spec(render())["tolerations"]
    assert {"key": "gpuhealth.io/unhealthy", "operator": "Exists"} in tolerations
    assert {"key": "nvidia.com/gpu", "operator": "Exists"} in tolerations
    assert {
        "key": "node.kubernetes.io/unschedulable",
        "operator": "Exists",
        "effect": "NoSchedule",
    } in tolerations
    assert len(tolerations) == 3


def test_extra_tolerations_are_added_to_the_built_in_ones(render: Render) -> None:
    """Custom tolerations never replace the three the agent needs."""
    tolerations = pod_spec(render(VARIATIONS["custom-tolerations"]))["tolerations"]
    assert {"key": "gpuhealth.io/unhealthy", "operator": "Exists"} in tolerations
    assert VARIATIONS["custom-tolerations"]["extraTolerations"][0] in tolerations
    assert len(tolerations) == 4


def test_agent_runs_only_on_gpu_nodes(render: Render) -> None:
    """nodeSelector nvidia.com/gpu.present=true (set by GPU feature discovery)."""
    assert pod_spec(render())["nodeSelector"] == {"nvidia.com/gpu.present": "true"}


@pytest.mark.parametrize("variation", VARIATIONS)
def test_agent_is_never_privileged_and_never_shares_host_namespaces(render: Render, variation: str) -> None:
    """No privileged container, no privilege escalation, no host PID/network/IPC, in any variation."""
    objects = render(VARIATIONS[variation])
    for key, value in walk(one(objects, "DaemonSet")):
        assert not (key == "privileged" and value is True)
        assert not (key == "allowPrivilegeEscalation" and value is True)
        assert key not in {"hostPID", "hostNetwork", "hostIPC"}
    security = agent_container(objects)["securityContext"]
    assert security["privileged"] is False
    assert security["allowPrivilegeEscalation"] is False
    assert security["readOnlyRootFilesystem"] is True
    assert pod_spec(objects)["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}


def test_every_capability_is_dropped_when_the_kernel_log_is_off(render: Render) -> None:
    """Default: NVML only, which needs no capability at all."""
    capabilities = agent_container(render())["securityContext"]["capabilities"]
    assert capabilities == {"drop": ["ALL"]}


def test_reading_kmsg_adds_only_cap_syslog_and_a_read_only_char_device(render: Render) -> None:
    """kernel_log source kmsg: CAP_SYSLOG (dmesg_restrict=1) and /dev/kmsg as a read-only CharDevice hostPath."""
    objects = render(VARIATIONS["kernel-log-kmsg"])
    capabilities = agent_container(objects)["securityContext"]["capabilities"]
    assert capabilities == {"drop": ["ALL"], "add": ["SYSLOG"]}
    assert host_path_mounts(objects)["/dev/kmsg"] == ("/dev/kmsg", "CharDevice", True)


def test_reading_the_journal_mounts_it_read_only_without_capabilities(render: Render) -> None:
    """kernel_log source journal: the host's journal directories and machine-id, read-only; no capability."""
    objects = render(VARIATIONS["kernel-log-journal"])
    mounts = host_path_mounts(objects)
    assert agent_container(objects)["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert mounts["/var/log/journal"] == ("/var/log/journal", "DirectoryOrCreate", True)
    assert mounts["/run/log/journal"] == ("/run/log/journal", "DirectoryOrCreate", True)
    assert mounts["/etc/machine-id"] == ("/etc/machine-id", "File", True)
    assert "/dev/kmsg" not in mounts


def test_state_dir_is_the_only_writable_host_path_by_default(render: Render) -> None:
    """The state directory survives agent restarts; it is created on the node if missing."""
    mounts = host_path_mounts(render())
    assert mounts == {"/var/lib/gpuhealth": ("/var/lib/gpuhealth", "DirectoryOrCreate", False)}


def test_resources_have_requests_and_limits(render: Render) -> None:
    """Requests 50m / 64Mi, limits 200m / 128Mi (the agent's RSS target is 80 MiB)."""
    resources = agent_container(render())["resources"]
    assert resources == {
        "requests": {"cpu": "50m", "memory": "64Mi"},
        "limits": {"cpu": "200m", "memory": "128Mi"},
    }


def test_probes_and_port_follow_the_metrics_port(render: Render) -> None:
    """Liveness /healthz and readiness /readyz on the named metrics port, which the config file also names."""
    for values, port in (({}, 9477), (VARIATIONS["tuned-checks"], 9500)):
        objects = render(values)
        container = agent_container(objects)
        assert container["ports"] == [{"name": "metrics", "containerPort": port, "protocol": "TCP"}]
        assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
        assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
        assert rendered_config(objects)["http"]["port"] == port


def test_rollout_and_scheduling_settings(render: Render) -> None:
    """RollingUpdate with maxUnavailable, node-critical priority, `gpuhealth agent --config` as the command."""
    objects = render()
    daemonset = one(objects, "DaemonSet")
    assert daemonset["spec"]["updateStrategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 1},
    }
    assert pod_spec(objects)["priorityClassName"] == "system-node-critical"
    assert agent_container(objects)["args"] == ["agent", "--config", "/etc/gpuhealth/config.yaml"]
    percent = one(render(VARIATIONS["tuned-checks"]), "DaemonSet")["spec"]["updateStrategy"]["rollingUpdate"]
    assert percent == {"maxUnavailable": "10%"}


def test_a_config_change_rolls_the_agents(render: Render) -> None:
    """The pod template carries a checksum of the config file, so `helm upgrade` with new config restarts pods."""

    def checksum(values: dict[str, Any]) -> str:
        annotations = one(render(values), "DaemonSet")["spec"]["template"]["metadata"]["annotations"]
        return str(annotations["checksum/config"])

    assert checksum({}) == checksum({})
    assert checksum({}) != checksum(VARIATIONS["cordon-on"])


# --- the agent's configuration file ------------------------------------------------------------------------------


def test_default_config_is_safe_mark_and_taint_on_cordon_and_dry_run_off(render: Render) -> None:
    """Safe defaults: condition + label + NoSchedule taint; no cordon; really acts (not dry run)."""
    config = rendered_config(render())
    assert config["policy"] == {
        "mark": True,
        "taint": True,
        "taint_effect": "NoSchedule",
        "cordon": False,
        "events": True,
    }
    assert config["dry_run"] is False
    assert config["kernel_log"] == {"enabled": False, "source": "kmsg"}
    assert config["interval_s"] == 10
    assert config["state_dir"] == "/var/lib/gpuhealth"
    assert config["http"] == {"enabled": True, "host": "0.0.0.0", "port": 9477}
    assert "drain" not in json.dumps(config)


@pytest.mark.parametrize(
    ("variation", "path", "expected"),
    [
        ("cordon-on", ("policy", "cordon"), True),
        ("dry-run", ("dry_run",), True),
        ("noexecute-taint", ("policy", "taint_effect"), "NoExecute"),
        ("kernel-log-journal", ("kernel_log", "source"), "journal"),
        ("kernel-log-journal", ("kernel_log", "enabled"), True),
        ("tuned-checks", ("debounce", "polled_bad_readings"), 2),
        ("tuned-checks", ("interval_s",), 5),
    ],
)
def test_config_file_says_what_the_values_say(
    render: Render, variation: str, path: tuple[str, ...], expected: object
) -> None:
    """Each value under `config` reaches the agent's file unchanged; the other defaults stay."""
    config: Any = rendered_config(render(VARIATIONS[variation]))
    for key in path:
        config = config[key]
    assert config == expected


@pytest.mark.parametrize("variation", VARIATIONS)
def test_config_file_loads_into_the_agents_settings(
    render: Render, variation: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ConfigMap is a valid `gpuhealth agent --config` file (the agent forbids unknown keys), and what it
    says is what the agent will do, in every variation."""
    monkeypatch.setenv("NODE_NAME", "gpu-node-1")
    objects = render(VARIATIONS[variation])
    path = tmp_path / "config.yaml"
    path.write_text(one(objects, "ConfigMap")["data"]["config.yaml"])
    settings = load_settings(path)
    values = VARIATIONS[variation].get("config", {})
    assert settings.node_name == "gpu-node-1"
    assert settings.state_dir == Path("/var/lib/gpuhealth")
    assert settings.http.port == agent_container(objects)["ports"][0]["containerPort"]
    assert settings.dry_run is values.get("dry_run", False)
    assert settings.policy.cordon is values.get("policy", {}).get("cordon", False)
    assert settings.policy.taint_effect == values.get("policy", {}).get("taint_effect", "NoSchedule")
    assert settings.kernel_log.enabled is values.get("kernel_log", {}).get("enabled", False)


def test_notes_warn_about_dry_run_and_a_missing_admission_policy(render_notes: Any) -> None:
    """After install Helm prints what the agent will do, and loudly when it will do nothing or is unconfined."""
    assert "DRY RUN" not in render_notes()
    assert "DRY RUN" in render_notes(VARIATIONS["dry-run"])
    assert "WARNING" in render_notes(VARIATIONS["existing-account-no-policy"])


# --- RBAC --------------------------------------------------------------------------------------------------------


def granted(objects: list[Manifest], component: str = "agent") -> set[tuple[str, str, str]]:
    """(apiGroup, resource, verb) for every rule of every Role and ClusterRole of ``component`` (the agent's,
    or the aggregator's remediator)."""
    grants: set[tuple[str, str, str]] = set()
    roles = by_kind(objects, "ClusterRole") + by_kind(objects, "Role")
    for role in [r for r in roles if component_of(r) == component]:
        for rule in role["rules"]:
            assert "resourceNames" not in rule
            assert "nonResourceURLs" not in rule
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    grants.update((group, resource, verb) for verb in rule["verbs"])
    return grants


@pytest.mark.parametrize("variation", VARIATIONS)
def test_cluster_role_grants_exactly_the_minimal_set(render: Render, variation: str) -> None:
    """The agent: nodes get/list/watch/patch, nodes/status patch, events create/patch (core and events.k8s.io):
    nothing else, no wildcard, in any variation (a new grant must be a deliberate change of this test); the
    drain's grants only where the agent drains itself (drain.by agent)."""
    values = VARIATIONS[variation]
    drain = values.get("drain", {})
    agent_drains = drain.get("enabled") and drain.get("by") == "agent"
    expected = MINIMAL_GRANTS | (DRAIN_GRANTS if agent_drains else set())
    assert granted(render(values)) == expected


def test_drain_grants_go_to_the_aggregators_remediator_not_the_agents(render: Render) -> None:
    """Default: no pod, eviction, DaemonSet or budget permission anywhere. Drain on (central, the default):
    the agent's role is unchanged, the aggregator's remediator role holds the drain's grants plus the node
    patch of its cordon and the Events of the requeue, bound to the aggregator's ServiceAccount, whose token
    the aggregator's pod then mounts. drain.by agent: the agent's role grows by exactly the drain's grants
    and the aggregator gets none."""
    assert not granted(render()) & DRAIN_GRANTS and not granted(render(), "aggregator")
    central = render({"drain": {"enabled": True}})
    assert granted(central) == MINIMAL_GRANTS
    remediator = {
        ("", "nodes", "get"),
        ("", "nodes", "patch"),
        ("", "events", "create"),
        ("", "events", "patch"),
        ("events.k8s.io", "events", "create"),
        ("events.k8s.io", "events", "patch"),
    }
    assert granted(central, "aggregator") == remediator | (DRAIN_GRANTS - {("", "pods", "watch")})
    [binding] = [
        b
        for b in by_kind(central, "ClusterRoleBinding")
        if component_of(b) == "aggregator" and b["roleRef"]["name"] != "system:auth-delegator"
    ]
    account = [a for a in by_kind(central, "ServiceAccount") if component_of(a) == "aggregator"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account[0]["metadata"]["name"], "namespace": NAMESPACE}
    ]
    [deployment] = by_kind(central, "Deployment")
    assert deployment["spec"]["template"]["spec"]["automountServiceAccountToken"] is True
    by_agent = render({"drain": {"enabled": True, "by": "agent"}})
    assert granted(by_agent) - MINIMAL_GRANTS == DRAIN_GRANTS
    assert not granted(by_agent, "aggregator")
    # The aggregator's token is still mounted, for the TokenReview of the agents' tokens only.
    assert [
        b["roleRef"]["name"]
        for b in by_kind(by_agent, "ClusterRoleBinding")
        if component_of(b) == "aggregator"
    ] == ["system:auth-delegator"]


def test_cluster_role_is_bound_to_the_agent_service_account(render: Render) -> None:
    """The binding names the chart's ClusterRole and the account the DaemonSet runs as."""
    objects = render()
    binding = one(objects, "ClusterRoleBinding")
    account = one(objects, "ServiceAccount")["metadata"]["name"]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": one(objects, "ClusterRole")["metadata"]["name"],  # the agent's: the only one by default
    }
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}]
    assert pod_spec(objects)["serviceAccountName"] == account
    assert f"system:serviceaccount:{NAMESPACE}:{account}" == AGENT_USER


def test_an_existing_service_account_is_used_everywhere(render: Render) -> None:
    """serviceAccount.create=false: no ServiceAccount rendered; pods, binding and policy all name the given one."""
    objects = render({"serviceAccount": {"create": False, "name": "gpu-agent"}})
    assert [component_of(account) for account in by_kind(objects, "ServiceAccount")] == ["aggregator"]
    assert pod_spec(objects)["serviceAccountName"] == "gpu-agent"
    assert one(objects, "ClusterRoleBinding")["subjects"][0]["name"] == "gpu-agent"
    for policy in by_kind(objects, "ValidatingAdmissionPolicy"):
        condition = policy["spec"]["matchConditions"][0]["expression"]
        assert condition == f"request.userInfo.username == 'system:serviceaccount:{NAMESPACE}:gpu-agent'"


def test_an_existing_service_account_must_be_named(render: Render) -> None:
    """serviceAccount.create=false without a name is a render error saying what is missing."""
    with pytest.raises(helm.HelmRenderError, match=r"serviceAccount\.name is required"):
        render({"serviceAccount": {"create": False}})


# --- ValidatingAdmissionPolicy -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def policies(render: Render) -> dict[str, PolicyUnderTest]:
    """The rendered admission policies, by what they guard ("nodes" or "events")."""
    found = {}
    for manifest in by_kind(render(), "ValidatingAdmissionPolicy"):
        resources = manifest["spec"]["matchConstraints"]["resourceRules"][0]["resources"]
        found["events" if resources == ["events"] else "nodes"] = PolicyUnderTest(manifest)
    assert set(found) == {"nodes", "events"}
    return found


def node(name: str = "gpu-node-1", **changes: Any) -> Manifest:
    """A GPU node as the API server stores it, with someone else's label, annotation, taint and condition."""
    base: Manifest = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "nvidia.com/gpu.present": "true"},
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]},
    }
    for dotted, value in changes.items():
        section, key = dotted.split("__")
        key = {"gpuhealth_release": "gpuhealth.io/manual-release"}.get(key, key)
        target = base["metadata"][section] if section in {"labels", "annotations"} else base[section]
        target[key] = value
    return base


def marked(name: str = "gpu-node-1") -> Manifest:
    """The same node after the agent marked it: our label, annotation, taint and condition added."""
    after = node(name)
    after["metadata"]["labels"]["gpuhealth.io/state"] = "unhealthy"
    after["metadata"]["annotations"]["gpuhealth.io/incident"] = "inc-1"
    after["spec"]["taints"] = [
        *after["spec"]["taints"],
        {"key": "gpuhealth.io/unhealthy", "value": "reboot", "effect": "NoSchedule"},
    ]
    after["status"]["conditions"] = [
        *after["status"]["conditions"],
        {"type": "GPUHealthy", "status": "False", "reason": "XID_79"},
    ]
    return after


def test_policy_expressions_compile_and_use_the_token_node_name(policies: dict[str, PolicyUnderTest]) -> None:
    """Every CEL expression parses; the policies compare the token's node-name extra with the object's name."""
    for policy in policies.values():
        for expression in policy.expressions():
            cel.compile(expression)
        text = "\n".join(policy.expressions())
        assert f"request.userInfo.extra['{NODE_NAME_EXTRA}']" in text
        assert policy.spec["matchConditions"] == [
            {"name": "is-gpuhealth-agent", "expression": f"request.userInfo.username == '{AGENT_USER}'"}
        ]
        assert policy.spec["failurePolicy"] == "Fail"
    assert "object.metadata.name == variables.nodeName" in "\n".join(policies["nodes"].expressions())
    assert policies["nodes"].spec["matchConstraints"]["resourceRules"][0]["resources"] == [
        "nodes",
        "nodes/status",
    ]


def test_bindings_deny_through_the_policies(render: Render) -> None:
    """Each policy has a binding with validationActions Deny (not just Warn or Audit)."""
    objects = render()
    names = {p["metadata"]["name"] for p in by_kind(objects, "ValidatingAdmissionPolicy")}
    bindings = by_kind(objects, "ValidatingAdmissionPolicyBinding")
    assert {b["spec"]["policyName"] for b in bindings} == names
    assert all(b["spec"]["validationActions"] == ["Deny"] for b in bindings)


@pytest.mark.parametrize("values", [{}, {"requeue": {"enabled": True}, "drain": {"enabled": True}}])
def test_every_validation_denies_with_reason_forbidden(render: Render, values: dict[str, Any]) -> None:
    """reason Forbidden on every validation: kube-apiserver then answers 403, not its default 422 Invalid
    (tests/realkube/test_least_privilege.py asserts the status for real)."""
    for policy in by_kind(render(values), "ValidatingAdmissionPolicy"):
        assert {v.get("reason") for v in policy["spec"]["validations"]} == {"Forbidden"}, policy["metadata"][
            "name"
        ]


def test_agent_may_mark_taint_and_annotate_its_own_node(policies: dict[str, PolicyUnderTest]) -> None:
    """The agent's normal work on its own node is allowed: node patch and status patch."""
    nodes = policies["nodes"]
    assert nodes.review(admission_request("UPDATE"), marked(), node()).allowed
    assert nodes.review(admission_request("UPDATE", sub_resource="status"), marked(), node()).allowed
    assert nodes.review(admission_request("UPDATE"), node(), marked()).allowed  # release: ours removed again
    cordoned = node(spec__unschedulable=True)
    assert nodes.review(admission_request("UPDATE"), cordoned, node()).allowed


def test_agent_may_not_modify_another_node(policies: dict[str, PolicyUnderTest]) -> None:
    """A token bound to gpu-node-1 cannot patch gpu-node-2."""
    result = policies["nodes"].review(admission_request("UPDATE"), marked("gpu-node-2"), node("gpu-node-2"))
    assert not result.allowed
    assert "the gpuhealth agent on node gpu-node-1 may not modify node gpu-node-2" in result.denials


@pytest.mark.parametrize(
    ("after", "denial"),
    [
        (node(labels__team="other"), "label"),
        (node(annotations__owner="me"), "annotations"),
        (node(spec__taints=[]), "taint"),
        (
            node(status__conditions=[{"type": "Ready", "status": "False", "reason": "KubeletReady"}]),
            "condition",
        ),
    ],
    ids=["foreign-label", "foreign-annotation", "foreign-taint-removed", "ready-condition-changed"],
)
def test_agent_may_not_touch_what_it_does_not_own_on_its_node(
    policies: dict[str, PolicyUnderTest], after: Manifest, denial: str
) -> None:
    """Only gpuhealth.io/state, gpuhealth.io/ annotations, our taint and the GPUHealthy condition may change."""
    result = policies["nodes"].review(admission_request("UPDATE"), after, node())
    assert not result.allowed
    assert any(denial in message for message in result.denials)


def with_status(name: str = "gpu-node-1", **fields: Any) -> Manifest:
    """The node with what the kubelet reports (resources, addresses) and ``fields`` put over its status."""
    after = node(name)
    after["status"].update(
        {
            "allocatable": {"nvidia.com/gpu": "8", "cpu": "190"},
            "capacity": {"nvidia.com/gpu": "8", "cpu": "192"},
            "addresses": [{"type": "InternalIP", "address": "10.0.0.7"}],
        }
    )
    after["status"].update(fields)
    return after


def with_metadata(**fields: Any) -> Manifest:
    """The node with ``fields`` put over its metadata."""
    after = node()
    after["metadata"].update(fields)
    return after


@pytest.mark.parametrize(
    ("after", "before", "denial"),
    [
        (with_status(allocatable={"nvidia.com/gpu": "0"}), with_status(), "allocatable or capacity"),
        (with_status(capacity={"nvidia.com/gpu": "1000"}), with_status(), "allocatable or capacity"),
        (with_status(addresses=[]), with_status(), "addresses"),
        (
            with_metadata(
                ownerReferences=[{"apiVersion": "v1", "kind": "Namespace", "name": "x", "uid": "u"}]
            ),
            node(),
            "ownerReferences or finalizers",
        ),
        (with_metadata(finalizers=["example.com/keep"]), node(), "ownerReferences or finalizers"),
        (node(annotations__gpuhealth_release="inc-1"), node(), "manual-release"),
        (node(), node(annotations__gpuhealth_release="inc-1"), "manual-release"),
        (
            node(annotations__gpuhealth_release="inc-2"),
            node(annotations__gpuhealth_release="inc-1"),
            "manual-release",
        ),
    ],
    ids=[
        "allocatable",
        "capacity",
        "addresses",
        "owner-references",
        "finalizers",
        "release-added",
        "release-removed",
        "release-changed",
    ],
)
def test_agent_may_not_touch_what_the_kubelet_and_humans_own(
    policies: dict[str, PolicyUnderTest], after: Manifest, before: Manifest, denial: str
) -> None:
    """Resources, addresses, ownership and a human's release stay as they were, on both the node and its
    status (tests/realkube/test_least_privilege.py shows the same refusals from kube-apiserver)."""
    for sub_resource in ("", "status"):
        result = policies["nodes"].review(
            admission_request("UPDATE", sub_resource=sub_resource), after, before
        )
        assert not result.allowed, sub_resource
        assert any(denial in message for message in result.denials), result.denials


def test_agent_may_mark_a_node_that_reports_resources_and_addresses(
    policies: dict[str, PolicyUnderTest],
) -> None:
    """Unchanged resources and addresses (and a human's release left as it is) do not stand in the way."""
    before = with_status()
    before["metadata"]["annotations"]["gpuhealth.io/manual-release"] = "inc-1"
    after = marked()
    after["status"].update({k: v for k, v in before["status"].items() if k != "conditions"})
    after["metadata"]["annotations"]["gpuhealth.io/manual-release"] = "inc-1"
    assert policies["nodes"].review(admission_request("UPDATE"), after, before).allowed


def test_agent_may_not_create_or_delete_nodes(policies: dict[str, PolicyUnderTest]) -> None:
    """Create and delete are denied outright (RBAC does not grant them either)."""
    nodes = policies["nodes"]
    assert not nodes.review(admission_request("DELETE"), None, node()).allowed
    assert not nodes.review(admission_request("CREATE"), node(), None).allowed


def test_a_token_without_node_name_is_denied(policies: dict[str, PolicyUnderTest]) -> None:
    """Old-style (unbound) tokens carry no node: the agent's account then can change nothing."""
    result = policies["nodes"].review(admission_request("UPDATE", node_name=None), marked(), node())
    assert not result.allowed
    assert any("carries no node name" in message for message in result.denials)


def test_other_users_are_not_affected(policies: dict[str, PolicyUnderTest]) -> None:
    """The kubelet or a human is outside the policy (match condition on the agent's username)."""
    request = admission_request("UPDATE", username="system:node:gpu-node-2", node_name=None)
    result = policies["nodes"].review(request, node("gpu-node-2", labels__team="x"), node("gpu-node-2"))
    assert not result.applies


@pytest.mark.parametrize(
    ("group", "subject_field", "node_name", "allowed"),
    [
        ("", "involvedObject", "gpu-node-1", True),
        ("", "involvedObject", "gpu-node-2", False),
        ("events.k8s.io", "regarding", "gpu-node-1", True),
        ("events.k8s.io", "regarding", "gpu-node-2", False),
    ],
)
def test_agent_records_events_only_about_its_own_node(
    policies: dict[str, PolicyUnderTest], group: str, subject_field: str, node_name: str, allowed: bool
) -> None:
    """Core Events (involvedObject) and events.k8s.io Events (regarding) must name the agent's node."""
    event = {
        "metadata": {"name": "e1", "namespace": "default"},
        subject_field: {"kind": "Node", "name": node_name},
    }
    request = admission_request("CREATE", resource="events", group=group)
    assert policies["events"].review(request, event, None).allowed is allowed


@pytest.mark.parametrize(
    ("kind", "reason", "allowed"),
    [("JobSet", "GPUHealthRequeued", True), ("Job", "GPUHealthRequeued", True), ("JobSet", "Other", False)],
)
def test_with_requeue_on_the_agent_may_record_why_it_restarted_a_job(
    render: Render, kind: str, reason: str, allowed: bool
) -> None:
    """The requeue's Event on the job is admitted only with requeue on, and only with its own reason."""
    event = {
        "metadata": {"name": "e1", "namespace": "ml"},
        "involvedObject": {"kind": kind, "name": "train", "namespace": "ml"},
        "reason": reason,
    }
    request = admission_request("CREATE", resource="events", group="")
    for values, expected in (({"requeue": {"enabled": True}}, allowed), ({}, False)):
        manifests = by_kind(render(values), "ValidatingAdmissionPolicy")
        events = next(
            m
            for m in manifests
            if m["spec"]["matchConstraints"]["resourceRules"][0]["resources"] == ["events"]
        )
        assert PolicyUnderTest(events).review(request, event, None).allowed is expected, values


# --- monitoring --------------------------------------------------------------------------------------------------


def test_monitoring_objects_scrape_the_metrics_port_when_enabled(render: Render) -> None:
    """Headless Service, ServiceMonitor and PodMonitor all point at the agent pods' `metrics` port."""
    objects = render(VARIATIONS["monitoring-on"])
    service = one(objects, "Service")
    selector = one(objects, "DaemonSet")["spec"]["selector"]["matchLabels"]
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == selector
    assert service["spec"]["ports"][0]["targetPort"] == "metrics"
    service_monitor = one(objects, "ServiceMonitor")
    assert service_monitor["metadata"]["labels"]["release"] == "prometheus"
    assert service_monitor["spec"]["endpoints"][0]["port"] == "metrics"
    pod_monitor = one(objects, "PodMonitor")
    assert pod_monitor["spec"]["selector"]["matchLabels"] == selector
    assert pod_monitor["spec"]["podMetricsEndpoints"][0]["path"] == "/metrics"


def test_service_monitor_alone_brings_its_service(render: Render) -> None:
    """A ServiceMonitor without a Service would scrape nothing, so enabling it renders the Service too."""
    objects = render({"metrics": {"serviceMonitor": {"enabled": True}}})
    assert one(objects, "Service")["spec"]["clusterIP"] == "None"


# --- docs and the container image -------------------------------------------------------------------------------


def test_every_top_level_value_is_documented() -> None:
    """docs/helm.md and the chart README name every top-level key of values.yaml."""
    values = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
    for doc in (REPO_ROOT / "docs" / "helm.md", CHART_DIR / "README.md"):
        text = doc.read_text()
        missing = [key for key in values if f"`{key}" not in text]
        assert missing == [], f"{doc.name} does not document {missing}"


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined, comments dropped."""
    text = (REPO_ROOT / "Dockerfile").read_text()
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    return [
        (ins.upper(), args.strip())
        for ins, _, args in (ln.strip().partition(" ") for ln in joined.splitlines())
        if ins
    ]


def test_image_is_built_in_two_stages_on_a_pinned_base_and_runs_gpuhealth_unprivileged() -> None:
    """One Python and Debian release pinned by default (a digest may be passed), the wheels built in a
    build stage and installed offline in the image (no source tree, no compiler), a non-root default user,
    entrypoint `gpuhealth`."""
    instructions = dockerfile_instructions()
    [base] = [args for ins, args in instructions if ins == "ARG" and args.startswith("PYTHON_IMAGE=")]
    assert re.fullmatch(r"PYTHON_IMAGE=python:3\.11\.\d+-slim-[a-z]+", base)
    froms = [args for ins, args in instructions if ins == "FROM"]
    assert froms == ["${PYTHON_IMAGE} AS build", "${PYTHON_IMAGE}"]
    runs = [shlex.split(args) for ins, args in instructions if ins == "RUN"]
    assert any(cmd[:2] == ["pip", "wheel"] and "--only-binary=:all:" in cmd for cmd in runs)
    installs = [cmd for cmd in runs if "install" in cmd and "--no-index" in cmd]
    assert installs and installs[0][-1] == "gpuhealth"
    users = [args for ins, args in instructions if ins == "USER"]
    assert users and not users[-1].startswith(("0", "root"))
    entrypoints = [json.loads(args) for ins, args in instructions if ins == "ENTRYPOINT"]
    assert entrypoints == [["gpuhealth"]]


def test_image_copies_every_package_the_wheel_ships() -> None:
    """Each package of pyproject's wheel is copied in and not excluded by .dockerignore."""
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    packages = pyproject["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]
    copied = {args.split()[0] for ins, args in dockerfile_instructions() if ins == "COPY"}
    lines = (REPO_ROOT / ".dockerignore").read_text().splitlines()
    ignored = {line.strip() for line in lines if line.strip() and not line.startswith("#")}
    for needed in [*packages, "pyproject.toml"]:
        assert needed in copied
        assert needed not in ignored
    assert "README.md" not in ignored
    assert {".git", ".venv", "tests"} <= ignored
