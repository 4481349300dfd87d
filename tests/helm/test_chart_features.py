"""The chart's feature switches (docs/helm.md): drain, requeue, aggregator, DCGM sources and deep diagnostics.

One value per feature turns on both what the agent does (its config file, loaded here with the agent's own
settings loader, plus the environment the pod gives it) and what it may do (the ClusterRole, which grows by
exactly the rules that feature uses). Values that contradict each other fail the render with one line.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate  # type: ignore[import-untyped]  # ships no type information
import pytest
import yaml
from pydantic import BaseModel

from agent.diagnostics.settings import DiagnosticsSettings
from agent.recovery.settings import RecoverySettings
from agent.settings import AgentSettings, AggregatorLinkSettings, aggregator_token, load_settings
from remediation.kubernetes.drain.policy import DrainPolicy
from remediation.kubernetes.requeue.decisions import RequeuePolicy
from remediation.plan.planner import RemediationPolicy
from tests.helm.conftest import CHART_DIR, NAMESPACE, Manifest, Render, one
from tests.helm.test_chart import DRAIN_GRANTS, MINIMAL_GRANTS, granted

KUBERNETES_VERSION = kubernetes_validate.latest_version()
NODE_IP = "10.1.2.3"
TOKEN = "s3cr3t-t0ken-value-0123456789abcdef0123456789"  # the Secret's content as the kubelet would read it (a test value)
# An aggregator run elsewhere (not by this release), with its token in a Secret of the user's.
AGGREGATOR = {
    "enabled": False,
    "url": "http://gpuhealth-aggregator:8080",
    "tokenSecret": {"name": "agg-token", "key": "tok"},
}
DIAG_POD_LIST = {("", "pods", "list")}

VARIATIONS: dict[str, dict[str, Any]] = {
    "drain-with-aggregator": {
        "drain": {
            "enabled": True,
            "by": "agent",
            "deadlineSeconds": 600,
            "config": {"force": True, "max_in_flight": 4},
        },
        "aggregator": AGGREGATOR,
    },
    "requeue-some-kinds": {
        "drain": {"enabled": True, "by": "agent"},
        "requeue": {
            "enabled": True,
            "jobset": True,
            "pytorchjob": True,
            "config": {"same_fault_window_s": 60},
        },
        "aggregator": {"enabled": False, "url": "http://agg:8080"},
    },
    "exporter-at-node-ip": {"dcgm": {"exporter": {"enabled": True, "port": 9500}}},
    "exporter-explicit-url-and-dcgmi": {
        "dcgm": {
            "exporter": {"enabled": True, "url": "http://dcgm-exporter.gpu-operator:9400/metrics"},
            "dcgmi": {"enabled": True, "path": "/usr/bin/dcgmi"},
        }
    },
    "diagnostics-on": {"diagnostics": {"enabled": True, "config": {"level": 2, "every_s": 86400}}},
    "diagnostics-on-demand-only": {"diagnostics": {"enabled": True, "scheduled": False}},
    "gpu-quarantine": {
        "drain": {"enabled": True, "by": "agent"},
        "aggregator": AGGREGATOR,
        "gpuQuarantine": {"deviceTaint": "before", "effect": "NoExecute", "partialDrain": True},
    },
    "everything": {
        "drain": {"enabled": True},
        "requeue": {"enabled": True, "trainjob": True, "kueue": True, "volcano": True},
        "aggregator": AGGREGATOR,
        "dcgm": {"exporter": {"enabled": True}, "dcgmi": {"enabled": True}},
        "diagnostics": {"enabled": True},
        "recovery": {"enabled": True},
    },
}


def agent_container(objects: list[Manifest]) -> Manifest:
    """The agent container of the DaemonSet."""
    container: Manifest = one(objects, "DaemonSet")["spec"]["template"]["spec"]["containers"][0]
    return container


def pod_environment(objects: list[Manifest]) -> dict[str, str]:
    """The agent's environment as the kubelet builds it: downward-API fields and Secret keys resolved (to
    NODE_IP and TOKEN), and `$(VAR)` references to earlier variables expanded, as Kubernetes does."""
    env: dict[str, str] = {}
    for var in agent_container(objects)["env"]:
        source = var.get("valueFrom", {})
        if "fieldRef" in source:
            fields = {"spec.nodeName": "gpu-node-1", "status.hostIP": NODE_IP}
            env[var["name"]] = fields[source["fieldRef"]["fieldPath"]]
        elif "secretKeyRef" in source:
            env[var["name"]] = TOKEN
        else:
            env[var["name"]] = re.sub(
                r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env[m.group(1)], var["value"]
            )
    return env


def config_text(objects: list[Manifest]) -> str:
    """The agent's config file as the ConfigMap carries it."""
    text: str = one(objects, "ConfigMap")["data"]["config.yaml"]
    return text


def agent_settings(
    objects: list[Manifest], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[AgentSettings, dict[str, str]]:
    """What the agent in the rendered pod loads: the ConfigMap's file under the pod's environment."""
    env = pod_environment(objects)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    path = tmp_path / "config.yaml"
    path.write_text(config_text(objects))
    return load_settings(path), env


def render_error(render: Render, values: dict[str, Any]) -> str:
    """The one-line reason a render failed (Helm's location prefix stripped)."""
    with pytest.raises(helm.HelmRenderError) as caught:
        render(values)
    return str(caught.value).split("): ", 1)[-1]


# --- every variation is a valid install ---------------------------------------------------------------------


@pytest.mark.parametrize("variation", VARIATIONS)
def test_each_feature_renders_valid_objects_and_lints_clean(render: Render, variation: str) -> None:
    """Every object validates strictly against the Kubernetes schemas and Helm's strict lint is clean."""
    for obj in render(VARIATIONS[variation]):
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    report = helm.lint(
        CHART_DIR, VARIATIONS[variation], strict=True, namespace=NAMESPACE, kube_version="v1.30.0"
    )
    assert [m for m in report["messages"] if m["severity"] >= 2] == [] and report["errors"] == []


@pytest.mark.parametrize("variation", VARIATIONS)
def test_each_feature_renders_a_config_the_agent_loads(
    render: Render, variation: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent's own loader (unknown keys forbidden) accepts the file under the pod's environment."""
    settings, _ = agent_settings(render(VARIATIONS[variation]), tmp_path, monkeypatch)
    assert settings.node_name == "gpu-node-1"


# --- drain and requeue ------------------------------------------------------------------------------------------


def test_drain_enabled_turns_the_agents_drain_on_with_its_deadline_and_settings(
    render: Render, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """drain.enabled is policy.drain, deadlineSeconds is policy.drain_deadline_s, drain.config reaches the
    agent's `drain` section, and the agent's own pods (namespace and labels) are this release's."""
    objects = render(VARIATIONS["drain-with-aggregator"])
    settings, _ = agent_settings(objects, tmp_path, monkeypatch)
    assert settings.policy.drain is True
    assert settings.policy.drain_deadline_s == 600
    assert settings.drain.force is True
    assert settings.drain.max_in_flight == 4
    template = one(objects, "DaemonSet")["spec"]["template"]
    agent_pod = {"metadata": {"namespace": NAMESPACE, "labels": template["metadata"]["labels"]}}
    assert settings.drain.is_agent(agent_pod)
    assert granted(objects) == MINIMAL_GRANTS | DRAIN_GRANTS


def test_drain_off_leaves_the_agents_drain_off(
    render: Render, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """By default the agent never drains and gets no drain or requeue settings at all."""
    objects = render()
    settings, _ = agent_settings(objects, tmp_path, monkeypatch)
    assert settings.policy.drain is False
    config = yaml.safe_load(config_text(objects))
    assert "drain" not in config and "requeue" not in config


def test_requeue_modes_follow_the_granted_kinds(
    render: Render, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kind whose rules are granted is `auto`; every other kind is `evict-only`, so the agent never tries
    a restart it has no permission for. requeue.config reaches the agent."""
    objects = render(VARIATIONS["requeue-some-kinds"])
    requeue = agent_settings(objects, tmp_path, monkeypatch)[0].requeue
    modes = {kind: str(getattr(requeue, kind)) for kind in ("job", "jobset", "pytorchjob")}
    assert modes == {"job": "auto", "jobset": "auto", "pytorchjob": "auto"}
    for kind in ("trainjob", "volcano_job", "kueue"):
        assert str(getattr(requeue, kind)) == "evict-only", kind
    assert requeue.same_fault_window_s == 60
    assert {("jobset.x-k8s.io", "jobsets", "patch"), ("", "pods", "delete")} <= granted(objects)


def test_drain_without_requeue_evicts_every_kind_only(
    render: Render, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Drain on, requeue off: the agent is told to restart nothing (it has no job permission)."""
    objects = render({"drain": {"enabled": True, "by": "agent"}})
    requeue = agent_settings(objects, tmp_path, monkeypatch)[0].requeue
    kinds = ("job", "jobset", "trainjob", "pytorchjob", "volcano_job", "kueue")
    assert {str(getattr(requeue, kind)) for kind in kinds} == {"evict-only"}


def test_central_drain_gives_the_drain_and_requeue_settings_to_the_aggregators_remediator(
    render: Render, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """drain.by aggregator (the default): the agent's config says drain_by aggregator and carries no drain
    or requeue settings; the aggregator's file runs the Kubernetes remediator under one stable name, with
    drain.config (and this release's agent pods kept) and the requeue modes of the granted kinds, and
    loads into the aggregator's settings."""
    from tests.helm.test_aggregator_chart import aggregator_settings_of

    values = {
        "drain": {"enabled": True, "config": {"force": True}},
        "requeue": {"enabled": True, "jobset": True},
    }
    objects = render(values)
    settings, _ = agent_settings(objects, tmp_path, monkeypatch)
    assert settings.policy.drain is True and settings.drain_by == "aggregator"
    config = yaml.safe_load(config_text(objects))
    assert "drain" not in config and "requeue" not in config
    remediator = aggregator_settings_of(objects, tmp_path).remediator
    assert remediator.orchestrator == "kubernetes"
    assert remediator.name == one(objects, "Deployment", "aggregator")["metadata"]["name"]
    assert remediator.drain.force is True
    template = one(objects, "DaemonSet")["spec"]["template"]
    assert remediator.drain.is_agent(
        {"metadata": {"namespace": NAMESPACE, "labels": template["metadata"]["labels"]}}
    )
    assert (str(remediator.requeue.jobset), str(remediator.requeue.kueue)) == ("auto", "evict-only")


# --- aggregator ---------------------------------------------------------------------------------------------------


def test_aggregator_url_is_in_the_config_and_the_token_comes_from_the_secret(
    render: Render, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """aggregator.url is the agent's aggregator.url; the token reaches the agent only as
    GPUHEALTH_AGGREGATOR_TOKEN from the named Secret key, and the agent reads it from there."""
    objects = render(VARIATIONS["drain-with-aggregator"])
    settings, env = agent_settings(objects, tmp_path, monkeypatch)
    assert settings.aggregator.url == AGGREGATOR["url"]
    assert aggregator_token(settings.aggregator, environ=env) == TOKEN
    token_vars = [v for v in agent_container(objects)["env"] if v["name"] == "GPUHEALTH_AGGREGATOR_TOKEN"]
    assert token_vars == [
        {
            "name": "GPUHEALTH_AGGREGATOR_TOKEN",
            "valueFrom": {"secretKeyRef": {"name": "agg-token", "key": "tok"}},
        }
    ]


def test_the_token_never_appears_in_the_config_map(render: Render) -> None:
    """Neither the token variable, a token file, nor the Secret's name is in the ConfigMap."""
    text = json.dumps(one(render(VARIATIONS["everything"]), "ConfigMap"))
    assert "token" not in text.lower()
    assert "agg-token" not in text


@pytest.mark.parametrize(
    ("values", "pointer"),
    [
        ({"aggregator": {"url": "http://a:1", "config": {"token_file": "/t"}}}, "/aggregator/config"),
        ({"aggregator": {"url": "http://a:1", "token": "inline"}}, "/aggregator"),
        ({"aggregator": {"url": "agg:8080"}}, "/aggregator/url"),
        ({"dcgm": {"exporter": {"port": 70000}}}, "/dcgm/exporter/port"),
        ({"diagnostics": {"config": {"level": 5}}}, "/diagnostics/config/level"),
        ({"diagnostics": {"config": {"enabled": True}}}, "/diagnostics/config"),
        ({"drain": {"config": {"agent_namespace": "x"}}}, "/drain/config"),
        ({"drain": {"deadlineSeconds": 0}}, "/drain/deadlineSeconds"),
        ({"requeue": {"config": {"jobset": "auto"}}}, "/requeue/config"),
    ],
)
def test_values_the_chart_owns_or_that_are_malformed_are_refused_by_the_schema(
    render: Render, values: dict[str, Any], pointer: str
) -> None:
    """An inline token, a token file, chart-owned keys inside a pass-through `config`, and bad values stop
    the install with a message naming the key."""
    with pytest.raises(helm.HelmValuesError, match=re.escape(f"at '{pointer}'")):
        render(values)


# --- DCGM sources and diagnostics ------------------------------------------------------------------------------


def test_exporter_defaults_to_the_nodes_own_ip_through_the_environment(
    render: Render, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no url the agent scrapes http://<status.hostIP>:<port>/metrics: the downward API fills NODE_IP
    and Kubernetes expands it into the agent's env override, which wins over the file."""
    objects = render(VARIATIONS["exporter-at-node-ip"])
    settings, _ = agent_settings(objects, tmp_path, monkeypatch)
    assert settings.dcgm.exporter.enabled is True
    assert settings.dcgm.exporter.url == f"http://{NODE_IP}:9500/metrics"
    assert settings.dcgm.dcgmi.enabled is False


def test_an_explicit_exporter_url_goes_to_the_file_and_dcgmi_gets_its_path(
    render: Render, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An explicit URL is written into the config file and no node-IP variable is added."""
    objects = render(VARIATIONS["exporter-explicit-url-and-dcgmi"])
    settings, env = agent_settings(objects, tmp_path, monkeypatch)
    assert settings.dcgm.exporter.url == "http://dcgm-exporter.gpu-operator:9400/metrics"
    assert "NODE_IP" not in env and "GPUHEALTH_DCGM__EXPORTER__URL" not in env
    assert settings.dcgm.dcgmi.enabled is True
    assert settings.dcgm.dcgmi.path == "/usr/bin/dcgmi"


def test_dcgm_sources_add_no_rbac(render: Render) -> None:
    """Scraping the exporter and running dcgmi need no Kubernetes permission."""
    assert granted(render(VARIATIONS["exporter-explicit-url-and-dcgmi"])) == MINIMAL_GRANTS


@pytest.mark.parametrize(
    ("variation", "expected"),
    [("diagnostics-on", (True, True, 2)), ("diagnostics-on-demand-only", (False, True, 1))],
)
def test_diagnostics_values_reach_the_agent(
    render: Render,
    variation: str,
    expected: tuple[bool, bool, int],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """diagnostics.scheduled is the agent's diagnostics.enabled; diagnostics.config passes through
    (expected: scheduled, on demand, level)."""
    diagnostics = agent_settings(render(VARIATIONS[variation]), tmp_path, monkeypatch)[0].diagnostics
    assert (diagnostics.enabled, diagnostics.on_demand, diagnostics.level) == expected


def test_diagnostics_off_turns_off_on_demand_runs_too(
    render: Render, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent allows on-demand runs by default; the chart's off switch means no run at all, in step with
    the missing pods permission of the idle check."""
    diagnostics = agent_settings(render(), tmp_path, monkeypatch)[0].diagnostics
    assert (diagnostics.enabled, diagnostics.on_demand) == (False, False)


def test_diagnostics_grant_pods_list_only(render: Render) -> None:
    """The idle check lists the node's pods: diagnostics add exactly pods list, with drain off."""
    assert granted(render(VARIATIONS["diagnostics-on"])) == MINIMAL_GRANTS | DIAG_POD_LIST


@pytest.mark.parametrize(
    ("values", "verbs"),
    [
        ({"drain": {"enabled": True, "by": "agent"}, "diagnostics": {"enabled": True}}, ["list", "watch"]),
        ({"drain": {"enabled": True}, "diagnostics": {"enabled": True}}, ["list"]),
        (
            {
                "drain": {"enabled": True, "by": "agent"},
                "diagnostics": {"enabled": True},
                "requeue": {"enabled": True, "pytorchjob": True},
            },
            ["list", "watch", "delete"],
        ),
    ],
)
def test_features_that_read_pods_share_one_rule_without_duplicates(
    render: Render, values: dict[str, Any], verbs: list[str]
) -> None:
    """Drain, diagnostics and the PyTorchJob requeue all need pods: one rule holds the union of verbs."""
    rules = one(render(values), "ClusterRole")["rules"]
    pod_rules = [r for r in rules if r["resources"] == ["pods"]]
    assert [r["verbs"] for r in pod_rules] == [verbs]
    assert len({json.dumps(r, sort_keys=True) for r in rules}) == len(rules)


# --- contradictions -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"config": {"policy": {"drain": True}}}, "config.policy.drain is true but drain.enabled is false"),
        (
            {"drain": {"enabled": True}, "config": {"policy": {"drain": False}}},
            "config.policy.drain is false but drain.enabled is true",
        ),
        (
            {"drain": {"enabled": True}, "config": {"policy": {"drain_deadline_s": 60}}},
            "config.policy.drain_deadline_s (60) contradicts drain.deadlineSeconds (900)",
        ),
        ({"requeue": {"jobset": True}}, "requeue.jobset needs requeue.enabled"),
        (
            {"aggregator": {"enabled": False, "tokenSecret": {"name": "agg-token"}}},
            "aggregator.tokenSecret.name is set but",
        ),
        (
            {"aggregator": {"url": "http://elsewhere:8470"}},
            "aggregator.url names an aggregator elsewhere, but aggregator.enabled deploys one",
        ),
        (
            {"aggregator": {"replicas": 2}},
            "aggregator.replicas > 1 needs aggregator.database.type=postgresql",
        ),
        (
            {"aggregator": {"database": {"type": "postgresql"}}},
            "aggregator.database.type=postgresql needs aggregator.database.postgresql.urlSecret.name",
        ),
        (
            {"diagnostics": {"enabled": True, "scheduled": False, "config": {"on_demand": False}}},
            "diagnostics.enabled with scheduled false and config.on_demand false",
        ),
        (
            {"gpuQuarantine": {"partialDrain": True}},
            "gpuQuarantine.partialDrain needs drain.enabled",
        ),
        (
            {"drain": {"enabled": True}, "gpuQuarantine": {"partialDrain": True}},
            "gpuQuarantine.partialDrain needs drain.by=agent",
        ),
        (
            {"config": {"policy": {"gpu_quarantine": "instead"}}},
            "config.policy.gpu_quarantine is instead but gpuQuarantine.deviceTaint is off",
        ),
    ],
)
def test_contradicting_values_fail_the_render_with_one_line(
    render: Render, values: dict[str, Any], message: str
) -> None:
    """Values whose behaviour and permissions would disagree stop the install with one line saying which."""
    reason = render_error(render, values)
    assert reason.startswith(message)
    assert "\n" not in reason.strip()


def test_agreeing_policy_values_are_accepted(render: Render) -> None:
    """config.policy.drain and drain_deadline_s may repeat what drain.* says."""
    values = {"drain": {"enabled": True}, "config": {"policy": {"drain": True, "drain_deadline_s": 900.0}}}
    assert yaml.safe_load(config_text(render(values)))["policy"]["drain"] is True


def test_notes_warn_when_drain_has_no_aggregator_to_grant_permits(render_notes: Any) -> None:
    """Drain without an aggregator is safe (no permit, no drain) but not what was asked: NOTES says so, and
    stays quiet once a URL is given, in aggregator.url or as the agent's env override."""
    warning = "never drain"
    alone = {"enabled": False}
    assert warning in render_notes({"drain": {"enabled": True}, "aggregator": alone})
    elsewhere = {"enabled": False, "url": "http://a:1"}
    assert warning not in render_notes({"drain": {"enabled": True}, "aggregator": elsewhere})
    override = {"name": "GPUHEALTH_AGGREGATOR__URL", "value": "http://a:1"}
    assert warning not in render_notes(
        {"drain": {"enabled": True}, "aggregator": alone, "extraEnv": [override]}
    )
    assert warning not in render_notes({"drain": {"enabled": True}}), (
        "the release's own aggregator grants permits"
    )
    assert "requeue.enabled without drain.enabled" in render_notes({"requeue": {"enabled": True}})


# --- the schema follows the agent ---------------------------------------------------------------------------


def schema_properties(*path: str) -> set[str]:
    """Property names of the values schema at a path of property names."""
    node: dict[str, Any] = json.loads((CHART_DIR / "values.schema.json").read_text())
    for key in path:
        node = node["properties"][key]
    return set(node["properties"])


@pytest.mark.parametrize(
    ("path", "model", "chart_owned"),
    [
        (("config", "policy"), RemediationPolicy, set()),
        (("drain", "config"), DrainPolicy, {"agent_namespace", "agent_labels"}),
        (
            ("requeue", "config"),
            RequeuePolicy,
            {"job", "jobset", "trainjob", "pytorchjob", "volcano_job", "kueue"},
        ),
        (("aggregator", "config"), AggregatorLinkSettings, {"url", "token_file"}),
        (("diagnostics", "config"), DiagnosticsSettings, {"enabled"}),
        (("recovery", "config"), RecoverySettings, {"enabled"}),
    ],
)
def test_pass_through_schemas_name_exactly_the_agents_fields(
    path: tuple[str, ...], model: type[BaseModel], chart_owned: set[str]
) -> None:
    """Each `config` the chart passes through lists the agent's fields but the ones the chart sets, so a
    field added to the agent shows up here instead of failing only when the agent starts."""
    assert schema_properties(*path) == set(model.model_fields) - chart_owned


# --- per-GPU quarantine and the partial drain -------------------------------------------------------------------


def test_gpu_quarantine_values_reach_the_agents_policy_and_socket(
    render: Render, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """deviceTaint, effect, nodeTaintAfterSeconds and partialDrain are the agent's policy; the PodResources
    directory is mounted read-only where the agent's setting points."""
    objects = render(VARIATIONS["gpu-quarantine"])
    settings, _ = agent_settings(objects, tmp_path, monkeypatch)
    policy = settings.policy
    assert (policy.gpu_quarantine, policy.gpu_taint_effect, policy.partial_drain) == (
        "before",
        "NoExecute",
        True,
    )
    assert policy.node_taint_after_s == 3600
    assert settings.kubernetes.pod_resources_socket == "/var/lib/kubelet/pod-resources/kubelet.sock"
    mounts = {m["name"]: m for m in agent_container(objects)["volumeMounts"]}
    assert mounts["pod-resources"] == {
        "name": "pod-resources",
        "mountPath": "/var/lib/kubelet/pod-resources",
        "readOnly": True,
    }


def _dra_rules(objects: list[Manifest]) -> dict[str, list[str]]:
    role = one(objects, "ClusterRole")
    return {
        resource: rule["verbs"]
        for rule in role["rules"]
        if "resource.k8s.io" in rule["apiGroups"]
        for resource in rule["resources"]
    }


def test_device_taints_grant_exactly_their_verbs_and_nothing_when_off(render: Render) -> None:
    assert _dra_rules(render()) == {}
    assert _dra_rules(render({"gpuQuarantine": {"deviceTaint": "instead"}})) == {
        "devicetaintrules": ["list", "create", "patch", "delete"],
        "resourceslices": ["list"],
    }
    partial_only = {"drain": {"enabled": True, "by": "agent"}, "gpuQuarantine": {"partialDrain": True}}
    assert _dra_rules(render(partial_only)) == {"resourceslices": ["list"], "resourceclaims": ["get"]}


def test_notes_do_not_send_people_to_a_registry_gpuhealth_is_not_on(render_notes: Any) -> None:
    notes = render_notes()
    assert "pip install gpuhealth" not in notes
    assert "not on PyPI" in notes and "pip install ." in notes
