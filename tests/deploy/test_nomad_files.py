"""The Nomad deployment files (deploy/nomad) and docs/nomad.md, parsed with python-hcl2 and checked for what
docs/nomad.md promises: an agent system job on GPU nodes that reserves no GPU, reads NVML through the
NVIDIA runtime and the kernel log with CAP_SYSLOG only, and talks to its local Nomad client with its workload
identity; an aggregator service job with its secrets from Nomad variables; a least-privilege ACL policy; and
a training-job example, kept in one file that the documentation includes word for word.

The settings embedded in the jobs are loaded with the project's own settings loaders, and the probe paths
the jobs' checks use are asked of the real agent endpoint and the real aggregator over HTTP.
"""

from __future__ import annotations

import os
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from live_aggregator import LiveAggregator
from prometheus_client import CollectorRegistry
from repo_paths import REPO_ROOT

from agent.http import AgentHttpServer
from agent.settings import AgentSettings, load_settings
from aggregator.settings import AggregatorSettings
from aggregator.settings import load_settings as load_aggregator_settings
from gpuhealth.core.clock import ManualClock
from tests.deploy.nomad_hcl import (
    AGENT_JOB,
    AGENT_POLICY,
    AGGREGATOR_JOB,
    NOMAD_DIR,
    NOMAD_DOC,
    REMEDIATOR_POLICY,
    TRAINING_EXAMPLE,
    Body,
    heredoc_body,
    job,
    labelled,
    load,
    one,
    only_group,
    only_task,
    resolve,
    walk_keys,
    without_template_actions,
)

PROJECT_IMAGE = "ghcr.io/gpuhealth/gpuhealth"
CONTRACT_META_KEYS = ("gpuhealth.state", "gpuhealth.incident", "gpuhealth.unhealthy_gpus")
# Task directories as Nomad's docker driver mounts them in the container.
TASK_DIRS = {"local/": "/local/", "secrets/": "/secrets/"}


def in_container(destination: str) -> str:
    """Where a template's ``destination`` (relative to the task directory) appears inside the container."""
    for prefix, mounted in TASK_DIRS.items():
        if destination.startswith(prefix):
            return mounted + destination.removeprefix(prefix)
    raise AssertionError(f"template destination outside local/ and secrets/: {destination}")


def chart_app_version() -> str:
    chart = yaml.safe_load((REPO_ROOT / "helm" / "gpuhealth" / "Chart.yaml").read_text(encoding="utf-8"))
    return str(chart["appVersion"])


def template_with_destination(task: Body, destination: str) -> Body:
    matches: list[Body] = [block for block in task["template"] if block["destination"] == destination]
    assert len(matches) == 1, f"no single template renders {destination}"
    return matches[0]


def write_rendered(template: Body, tmp_path: Path) -> Path:
    """The template as rendered with its optional actions producing nothing, written to a file."""
    path = tmp_path / Path(template["destination"]).name
    path.write_text(without_template_actions(heredoc_body(template["data"])), encoding="utf-8")
    return path


@pytest.fixture
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No GPUHEALTH_* or NOMAD_* variable of the caller's shell may change what the files say."""
    for name in list(os.environ):
        if name.startswith(("GPUHEALTH_", "NOMAD_")):
            monkeypatch.delenv(name)


# --- the agent's system job ------------------------------------------------------------------------------


class AgentJob:
    """The parsed agent job, with its parts named."""

    def __init__(self) -> None:
        self.parsed = load(AGENT_JOB)
        self.name, self.job = job(self.parsed)
        self.group_name, self.group = only_group(self.job)
        self.task_name, self.task = only_task(self.group)
        self.config = one(self.task["config"])
        self.env = one(self.task["env"])


@pytest.fixture(scope="module")
def agent() -> AgentJob:
    return AgentJob()


@pytest.fixture
def agent_settings(agent: AgentJob, tmp_path: Path, clean_environment: None) -> AgentSettings:
    """The settings file the job renders, loaded by the agent's own loader."""
    config_path = agent.config["args"][agent.config["args"].index("--config") + 1]
    template = next(t for t in agent.task["template"] if in_container(t["destination"]) == config_path)
    return load_settings(write_rendered(template, tmp_path))


def test_agent_is_a_system_job_constrained_to_linux_nodes_with_the_nvidia_runtime(agent: AgentJob) -> None:
    """type = system (one per node, survives its own drain); placed only where the docker driver lists the
    `nvidia` runtime, the fingerprint that says NVML and /dev/nvidia* can reach the container."""
    assert agent.name == "gpuhealth-agent"
    assert agent.job["type"] == "system"
    constraints = {c["attribute"]: c for c in agent.job["constraint"]}
    runtimes = constraints["${attr.driver.docker.runtimes}"]
    assert runtimes["operator"] == "set_contains"
    assert runtimes["value"] == "nvidia"
    assert constraints["${attr.kernel.name}"]["value"] == "linux"


def test_agent_reserves_no_gpu(agent: AgentJob) -> None:
    """No `device` block anywhere in the job: a reserved GPU would be taken from the training jobs."""
    assert "device" not in set(walk_keys(agent.parsed))
    assert "nvidia/gpu" not in set(walk_keys(agent.parsed))


def test_agent_reads_the_gpus_through_the_nvidia_runtime(agent: AgentJob) -> None:
    """Docker runtime nvidia with every GPU visible and the NVML-only `utility` capability."""
    assert agent.task["driver"] == "docker"
    assert agent.config["runtime"] == "nvidia"
    assert agent.env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert agent.env["NVIDIA_DRIVER_CAPABILITIES"] == "utility"


def test_agent_reads_the_kernel_log_with_cap_syslog_only_and_is_not_privileged(agent: AgentJob) -> None:
    """/dev/kmsg read-only in the device cgroup, CAP_SYSLOG the one capability kept, no privileged mode."""
    assert agent.config["privileged"] is False
    assert agent.config["cap_drop"] == ["all"]
    assert agent.config["cap_add"] == ["syslog"]
    kmsg = [d for d in agent.config["devices"] if d["host_path"] == "/dev/kmsg"]
    assert kmsg == [{"host_path": "/dev/kmsg", "container_path": "/dev/kmsg", "cgroup_permissions": "r"}]
    assert agent.config["devices"] == kmsg, "no other host device"
    assert agent.task["user"] == "root", "Docker grants an added capability to root only"
    assert "no-new-privileges" in agent.config["security_opt"]
    assert agent.config["readonly_rootfs"] is True


def test_agent_settings_select_nomad_and_agree_with_the_job(
    agent: AgentJob, agent_settings: AgentSettings
) -> None:
    """The rendered settings file is valid for the agent (unknown keys are errors) and says orchestrator
    nomad, with the port, state directory, kernel log and credential files the job provides."""
    assert agent_settings.orchestrator == "nomad"
    ports = labelled(one(agent.group["network"])["port"])
    assert ports["metrics"]["static"] == ports["metrics"]["to"] == agent_settings.http.port == 9477
    mount = one(agent.task["volume_mount"])
    assert str(agent_settings.state_dir) == mount["destination"]
    volume = labelled(agent.group["volume"])[mount["volume"]]
    assert volume == {"type": "host", "source": "gpuhealth-state", "read_only": False}
    assert agent_settings.kernel_log.enabled
    assert agent_settings.kernel_log.source == "kmsg"
    assert agent_settings.kernel_log.path == "/dev/kmsg"
    token_template = template_with_destination(agent.task, "secrets/aggregator-token")
    assert str(agent_settings.aggregator.token_file) == in_container(token_template["destination"])
    assert agent_settings.policy.drain is False, "drain stays off until the aggregator grants permits"


def test_agent_uses_its_workload_identity_file_as_nomad_token(
    agent: AgentJob, agent_settings: AgentSettings
) -> None:
    """identity { file = true } writes secrets/nomad_token; the settings read the token from there, and
    no token appears in the job's environment."""
    identity = one(agent.task["identity"])
    assert identity["file"] is True
    assert "filepath" not in identity and "name" not in identity, "the default identity, default path"
    nomad = agent_settings.nomad
    assert str(nomad.token_file) == in_container("secrets/nomad_token")
    assert not any("TOKEN" in name for name in agent.env)


def test_agent_talks_to_the_nomad_client_of_its_own_node(agent: AgentJob) -> None:
    """The address is the node's own advertised address and port 4646, the name the Nomad node name."""
    assert agent.env["GPUHEALTH_NOMAD__ADDRESS"] == "http://${attr.unique.network.ip-address}:4646"
    assert agent.env["NODE_NAME"] == "${node.unique.name}"


def test_agent_requeues_only_in_a_namespace_the_policy_grants(agent_settings: AgentSettings) -> None:
    nomad = agent_settings.nomad
    assert nomad.namespace in labelled(load(AGENT_POLICY)["namespace"])


def test_agent_finds_the_aggregator_under_the_aggregator_jobs_service_name(agent: AgentJob) -> None:
    config = template_with_destination(agent.task, "local/agent.yaml")["data"]
    aggregator_service = one(only_group(job(load(AGGREGATOR_JOB))[1])[1]["service"])
    assert f'nomadService "{aggregator_service["name"]}"' in config


def test_agent_metrics_service_checks_healthz_and_restarts_the_task(agent: AgentJob) -> None:
    service = one(agent.group["service"])
    assert service["provider"] == "nomad"
    assert service["port"] == "metrics"
    check = one(service["check"])
    assert (check["type"], check["path"]) == ("http", "/healthz")
    assert one(check["check_restart"])["limit"] >= 1


def test_agent_resources_are_modest(agent: AgentJob) -> None:
    """About 65 MiB resident was measured: the reservation covers it with room, and stays small."""
    resources = one(agent.task["resources"])
    assert 96 <= resources["memory"] <= 256
    assert resources["cpu"] <= 250


# --- the aggregator's service job ------------------------------------------------------------------------


class AggregatorJob:
    def __init__(self) -> None:
        self.parsed = load(AGGREGATOR_JOB)
        self.name, self.job = job(self.parsed)
        self.group_name, self.group = only_group(self.job)
        self.task_name, self.task = only_task(self.group)
        self.config = one(self.task["config"])
        self.service = one(self.group["service"])


@pytest.fixture(scope="module")
def aggregator_job() -> AggregatorJob:
    return AggregatorJob()


def secret_env_names(aggregator_job: AggregatorJob) -> list[str]:
    template = template_with_destination(aggregator_job.task, "secrets/aggregator.env")
    assert template["env"] is True
    return re.findall(r"^\s*(GPUHEALTH_[A-Z0-9_]+)=", heredoc_body(template["data"]), re.MULTILINE)


def test_aggregator_is_one_service_instance_with_ready_and_alive_checks(
    aggregator_job: AggregatorJob,
) -> None:
    assert aggregator_job.name == "gpuhealth-aggregator"
    assert aggregator_job.job["type"] == "service"
    assert aggregator_job.group["count"] == 1
    checks = {check["path"]: check for check in aggregator_job.service["check"]}
    assert set(checks) == {"/readyz", "/healthz"}
    assert all(check["type"] == "http" for check in checks.values())
    assert one(aggregator_job.group["update"])["health_check"] == "checks"


def test_aggregator_settings_file_is_valid_and_matches_port_and_volume(
    aggregator_job: AggregatorJob, tmp_path: Path, clean_environment: None
) -> None:
    """The rendered file loads with the aggregator's loader; it listens on all addresses at the port the
    job maps, and its SQLite file lies in the host volume."""
    config_path = aggregator_job.config["args"][aggregator_job.config["args"].index("--config") + 1]
    template = next(
        t for t in aggregator_job.task["template"] if in_container(t["destination"]) == config_path
    )
    rendered = write_rendered(template, tmp_path)
    settings = load_aggregator_settings(rendered, environ={"GPUHEALTH_AGGREGATOR_TOKEN": "test-token"})
    port = labelled(one(aggregator_job.group["network"])["port"])[aggregator_job.service["port"]]
    assert (settings.host, settings.port) == ("0.0.0.0", port["to"])
    mount = one(aggregator_job.task["volume_mount"])
    assert settings.database_url == f"sqlite:///{mount['destination']}/aggregator.db"
    assert "token" not in rendered.read_text(encoding="utf-8"), "no secret in the plain settings file"


def test_aggregator_secrets_come_from_its_nomad_variable_as_settings_it_knows(
    aggregator_job: AggregatorJob,
) -> None:
    """The token and the optional PostgreSQL URL are rendered from nomad/jobs/gpuhealth-aggregator (the path
    the job's identity may read) into variables the aggregator's settings accept; nothing is inline."""
    template = template_with_destination(aggregator_job.task, "secrets/aggregator.env")
    assert f'nomadVar "nomad/jobs/{aggregator_job.name}"' in template["data"]
    names = secret_env_names(aggregator_job)
    assert names == ["GPUHEALTH_AGGREGATOR_TOKEN", "GPUHEALTH_AGGREGATOR_DATABASE_URL"]
    fields = set(AggregatorSettings.model_fields)
    assert {name.removeprefix("GPUHEALTH_AGGREGATOR_").lower() for name in names} <= fields
    assert "env" not in aggregator_job.task, "no environment (and so no secret) written in the job"


def test_agents_aggregator_token_comes_from_the_agent_jobs_variable(agent: AgentJob) -> None:
    template = template_with_destination(agent.task, "secrets/aggregator-token")
    assert f'nomadVar "nomad/jobs/{agent.name}"' in template["data"]
    assert template["perms"] == "0400"


@pytest.mark.parametrize("job_file", [AGENT_JOB, AGGREGATOR_JOB], ids=["agent", "aggregator"])
def test_jobs_run_the_projects_image_at_the_charts_version(job_file: Path) -> None:
    parsed = load(job_file)
    task = only_task(only_group(job(parsed)[1])[1])[1]
    image = resolve(parsed, one(task["config"])["image"])
    assert image == f"{PROJECT_IMAGE}:{chart_app_version()}"


# --- the probe paths are real endpoints -----------------------------------------------------------------


@pytest.fixture
def agent_endpoint() -> Iterator[str]:
    """The agent's real HTTP endpoint, alive and ready."""
    server = AgentHttpServer(CollectorRegistry(), alive=lambda: True, ready=lambda: True).start()
    try:
        yield server.url
    finally:
        server.stop()


def http_status(url: str) -> int:
    with urllib.request.urlopen(url, timeout=10) as response:
        return int(response.status)


def test_agent_check_path_is_served_by_the_agent(agent: AgentJob, agent_endpoint: str) -> None:
    check = one(one(agent.group["service"])["check"])
    assert http_status(agent_endpoint + check["path"]) == 200


@pytest.mark.timeout(60)
def test_aggregator_check_paths_are_served_by_the_aggregator(
    aggregator_job: AggregatorJob, tmp_path: Path
) -> None:
    live = LiveAggregator(tmp_path / "aggregator.db", ManualClock(), "test-token").start()
    try:
        for check in aggregator_job.service["check"]:
            assert http_status(live.url + check["path"]) == 200, check["path"]
    finally:
        live.stop()


# --- the ACL policy ------------------------------------------------------------------------------------


def test_policy_grants_exactly_node_write_agent_read_and_read_job() -> None:
    """node write, agent read, and in the training jobs' namespace read-job only: no alloc-lifecycle (the
    central remediator restarts batch jobs), no other rule, no namespace policy (read or write), no
    wildcard namespace, no management anything."""
    policy = load(AGENT_POLICY)
    assert set(policy) == {"node", "agent", "namespace"}
    assert one(policy["node"]) == {"policy": "write"}
    assert one(policy["agent"]) == {"policy": "read"}
    namespaces = labelled(policy["namespace"])
    assert namespaces == {"default": {"capabilities": ["read-job"]}}


def test_the_remediators_policy_holds_the_drain_and_the_batch_job_restarts() -> None:
    """The aggregator's token: node write (drain, the drain's metadata through the servers) and, in the
    training jobs' namespace, read-job + alloc-lifecycle; nothing else."""
    policy = load(REMEDIATOR_POLICY)
    assert set(policy) == {"node", "namespace"}
    assert one(policy["node"]) == {"policy": "write"}
    assert labelled(policy["namespace"]) == {"default": {"capabilities": ["read-job", "alloc-lifecycle"]}}


@pytest.mark.parametrize("path", [AGENT_POLICY, REMEDIATOR_POLICY], ids=lambda p: p.name)
def test_policy_file_mentions_no_broader_grant(path: Path) -> None:
    """A guard on the text as well, comments included: no management token, no namespace write."""
    text = path.read_text(encoding="utf-8")
    assert "management" not in text
    assert not re.search(r'namespace\s+"\*"', text)
    assert not re.search(r"^\s*(operator|quota|plugin|host_volume|node_pool)\s*\{", text, re.MULTILINE)


# --- docs/nomad.md and the training-job example ---------------------------------------------------------

_INCLUDE = re.compile(
    r"<!-- BEGIN INCLUDE: (?P<path>[^ ]+) -->\n```hcl\n(?P<body>.*?)```\n<!-- END INCLUDE -->", re.DOTALL
)


def test_docs_include_the_training_example_file_word_for_word() -> None:
    includes = {m.group("path"): m.group("body") for m in _INCLUDE.finditer(NOMAD_DOC.read_text("utf-8"))}
    example = TRAINING_EXAMPLE.relative_to(REPO_ROOT).as_posix()
    assert example in includes, "docs/nomad.md does not include the example file"
    assert includes[example] == TRAINING_EXAMPLE.read_text(encoding="utf-8")


def test_training_example_constrains_on_gpuhealth_state_next_to_a_gpu_device_block() -> None:
    _, body = job(load(TRAINING_EXAMPLE))
    assert body["type"] == "batch"
    _, group = only_group(body)
    constraint = one(group["constraint"])
    assert constraint["attribute"] == "${meta.gpuhealth.state}"
    assert constraint["value"] == "healthy"
    assert constraint.get("operator", "=") == "="
    _, task = only_task(group)
    devices = labelled(one(task["resources"])["device"])
    assert devices == {"nvidia/gpu": {"count": 8}}


def test_docs_use_the_contract_metadata_names_and_name_every_deploy_file() -> None:
    doc = NOMAD_DOC.read_text(encoding="utf-8")
    for key in CONTRACT_META_KEYS:
        assert f"`{key}`" in doc, key
    assert "IgnoreSystemJobs" in doc
    assert "node:write" in doc
    for path in sorted(NOMAD_DIR.rglob("*.hcl")):
        assert path.relative_to(REPO_ROOT).as_posix() in doc, path


@pytest.mark.parametrize("path", sorted(NOMAD_DIR.rglob("*.hcl")), ids=lambda p: p.name)
def test_every_nomad_file_parses(path: Path) -> None:
    parsed: Any = load(path)
    assert parsed, f"{path} is empty"
