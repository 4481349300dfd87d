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
import ssl
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from certificates import write_tls_files
from live_aggregator import LiveAggregator
from prometheus_client import CollectorRegistry
from repo_paths import REPO_ROOT

from agent.settings import AgentSettings, load_settings
from agent.telemetry.http import AgentHttpServer
from aggregator.server import tls_options
from aggregator.settings import AggregatorSettings
from aggregator.settings import load_settings as load_aggregator_settings
from core.clock import ManualClock
from tests.deploy.nomad_hcl import (
    AGENT_JOB,
    AGENT_POLICY,
    AGGREGATOR_JOB,
    AGGREGATOR_POLICY,
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
    ca_template = template_with_destination(agent.task, "secrets/aggregator-ca.pem")
    assert str(agent_settings.aggregator.ca_file) == in_container(ca_template["destination"])
    assert agent_settings.policy.drain is False, "drain stays off until the aggregator grants permits"


def identities(agent: AgentJob) -> dict[str | None, Body]:
    """The task's identity blocks by name (None: the default identity)."""
    return {block.get("name"): block for block in agent.task["identity"]}


def test_agent_uses_its_workload_identity_file_as_nomad_token(
    agent: AgentJob, agent_settings: AgentSettings
) -> None:
    """identity { file = true } writes secrets/nomad_token; the settings read the token from there, and
    no token appears in the job's environment."""
    identity = identities(agent)[None]
    assert identity["file"] is True
    assert "filepath" not in identity and "aud" not in identity, "the default identity, default path"
    nomad = agent_settings.nomad
    assert str(nomad.token_file) == in_container("secrets/nomad_token")
    assert not any("TOKEN" in name for name in agent.env)


def test_agent_authenticates_to_the_aggregator_with_a_workload_identity_for_its_audience(
    agent: AgentJob, agent_settings: AgentSettings, aggregator_job: AggregatorJob, tmp_path: Path
) -> None:
    """A named identity with the aggregator's audience only, written to secrets/nomad_<name>.jwt (Nomad's
    path for a named identity), is the agent's aggregator token; the aggregator expects that audience and
    this job among its agent jobs. No shared token is on a node."""
    identity = identities(agent)["gpuhealth-aggregator"]
    assert identity["file"] is True and identity["aud"] == ["gpuhealth-aggregator"]
    token_file = in_container(f"secrets/nomad_{identity['name']}.jwt")
    assert str(agent_settings.aggregator.token_file) == token_file
    server = aggregator_settings(aggregator_job, tmp_path)
    assert server.nomad_audience in identity["aud"]
    assert agent.name in server.nomad_agent_jobs
    destinations = [template["destination"] for template in agent.task["template"]]
    assert not any("token" in destination for destination in destinations)


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


SECRET_FILES = ("token", "metrics-token", "database-url", "tls.crt", "tls.key")


def aggregator_settings(aggregator_job: AggregatorJob, tmp_path: Path) -> AggregatorSettings:
    """The settings file the job renders, loaded by the aggregator's loader with the job's environment and
    the secret files its templates render (test values; a throw-away certificate) where it reads them."""
    config_path = aggregator_job.config["args"][aggregator_job.config["args"].index("--config") + 1]
    template = next(
        t for t in aggregator_job.task["template"] if in_container(t["destination"]) == config_path
    )
    secrets = tmp_path / "secrets"
    tls = write_tls_files(tmp_path / "tls")
    secrets.mkdir(exist_ok=True)
    for name, content in (
        ("token", "t" * 48),
        ("metrics-token", "m" * 48),
        ("database-url", SQLITE_DEFAULT_IN(aggregator_job)),
        ("tls.crt", tls.server_cert.read_text()),
        ("tls.key", tls.server_key.read_text()),
    ):
        (secrets / name).write_text(content + "\n", encoding="utf-8")
    rendered = write_rendered(template, tmp_path)
    rendered.write_text(rendered.read_text().replace("/secrets/", f"{secrets}/"), encoding="utf-8")
    environ = dict(one(aggregator_job.task["env"]))
    return load_aggregator_settings(rendered, environ=environ)


def SQLITE_DEFAULT_IN(aggregator_job: AggregatorJob) -> str:
    """The database URL the database-url template renders without a database_url in the variable."""
    data = template_with_destination(aggregator_job.task, "secrets/database-url")["data"]
    found = re.search(r'\$url := "([^"]+)"', data)
    assert found, "the database-url template has no SQLite default"
    return found.group(1)


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
    """The rendered file loads with the aggregator's loader; it listens on all addresses, over HTTPS (so
    without any plain-HTTP exception), at the port the job maps, and its SQLite file (without a PostgreSQL
    URL in the variable) lies in the host volume."""
    settings = aggregator_settings(aggregator_job, tmp_path)
    port = labelled(one(aggregator_job.group["network"])["port"])[aggregator_job.service["port"]]
    assert (settings.host, settings.port) == ("0.0.0.0", port["to"])
    assert settings.tls_cert_file is not None and not settings.allow_plain_http
    assert set(tls_options(settings)) == {"ssl_certfile", "ssl_keyfile"}
    mount = one(aggregator_job.task["volume_mount"])
    assert settings.database_url.get_secret_value() == f"sqlite:///{mount['destination']}/aggregator.db"
    assert settings.token is not None and settings.metrics_token is not None
    assert settings.nomad_address == "http://${attr.unique.network.ip-address}:4646"


def test_aggregator_secrets_are_files_from_its_nomad_variables_never_environment(
    aggregator_job: AggregatorJob,
) -> None:
    """The tokens, the optional PostgreSQL URL and the TLS key are rendered from nomad/jobs/gpuhealth-
    aggregator[/tls] (paths the job's identity may read) into files of the secrets directory readable by the
    task only, which the settings name; nothing secret is inline or in the environment."""
    by_destination = {t["destination"]: t for t in aggregator_job.task["template"]}
    for name in SECRET_FILES:
        template = by_destination[f"secrets/{name}"]
        assert template["perms"] == "0400"
        assert f'nomadVar "nomad/jobs/{aggregator_job.name}' in template["data"]
        assert not template.get("env"), "a secret never becomes an environment variable"
    config = by_destination["local/aggregator.yaml"]["data"]
    for name in SECRET_FILES:
        assert f"/secrets/{name}" in config, name
    assert set(one(aggregator_job.task["env"])) == {"GPUHEALTH_AGGREGATOR_NOMAD_ADDRESS"}


def test_aggregator_reads_allocations_with_its_own_identity_and_nothing_more(
    aggregator_job: AggregatorJob, tmp_path: Path
) -> None:
    """Its default workload identity (secrets/nomad_token) is the token it looks agents' allocations up
    with; the policy attached to the job grants read-job in the agents' namespace, nothing else."""
    identity = one(aggregator_job.task["identity"])
    assert identity["file"] is True and "aud" not in identity
    settings = aggregator_settings(aggregator_job, tmp_path)
    assert str(settings.nomad_token_file) == f"{tmp_path / 'secrets'}/nomad_token"  # /secrets/, mapped here
    policy = load(AGGREGATOR_POLICY)
    assert set(policy) == {"namespace"}
    assert labelled(policy["namespace"]) == {"default": {"capabilities": ["read-job"]}}


def test_the_aggregator_drains_centrally_with_its_identity_through_its_nodes_client(
    aggregator_job: AggregatorJob, tmp_path: Path, clean_environment: None
) -> None:
    """The remediator runs in the aggregator on Nomad, with the task's workload identity (the job's
    gpuhealth-remediator policy) against the Nomad client of its own node, in the namespace the policy grants;
    a restart resumes its drains (a stable name)."""
    settings = aggregator_settings(aggregator_job, tmp_path)
    remediator = settings.remediator
    assert (remediator.orchestrator, remediator.name) == ("nomad", "gpuhealth-aggregator")
    assert str(remediator.nomad.token_file) == f"{tmp_path / 'secrets'}/nomad_token"
    assert remediator.nomad.namespace in labelled(load(REMEDIATOR_POLICY)["namespace"])
    config = template_with_destination(aggregator_job.task, "local/aggregator.yaml")["data"]
    assert 'address: http://{{ env "NOMAD_HOST_IP_http" }}:4646' in config
    assert "gpuhealth-remediator.policy.hcl" in AGGREGATOR_JOB.read_text()


def test_agents_verify_the_aggregator_with_the_ca_from_the_agent_jobs_variable(agent: AgentJob) -> None:
    template = template_with_destination(agent.task, "secrets/aggregator-ca.pem")
    assert f'nomadVar "nomad/jobs/{agent.name}"' in template["data"]
    assert template["perms"] == "0400"
    config = template_with_destination(agent.task, "local/agent.yaml")["data"]
    assert "url: https://{{ .Address }}:{{ .Port }}" in config


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
    """The checks speak HTTPS, as the job's TLS settings make the aggregator serve."""
    tls = write_tls_files(tmp_path / "tls")
    live = LiveAggregator(
        tmp_path / "aggregator.db",
        ManualClock(),
        "test-token-0123456789abcdef0123456789",
        tls_cert_file=tls.server_cert,
        tls_key_file=tls.server_key,
    ).start()
    context = ssl.create_default_context(cafile=str(tls.ca))
    try:
        for check in aggregator_job.service["check"]:
            assert check["protocol"] == "https"
            with urllib.request.urlopen(live.url + check["path"], timeout=10, context=context) as answer:
                assert answer.status == 200, check["path"]
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


def test_the_install_steps_apply_every_acl_policy_the_jobs_need() -> None:
    """The remediator's policy included: without it the shipped aggregator job's drains are refused."""
    doc = NOMAD_DOC.read_text(encoding="utf-8")
    install = doc.split("## Install", 1)[1].split("\n## ", 1)[0]
    applied = set(
        re.findall(r"nomad acl policy apply [^\n]*\\\n[^\n]*?(deploy/nomad/\S+\.policy\.hcl)", install)
    )
    assert applied == {path.relative_to(REPO_ROOT).as_posix() for path in NOMAD_DIR.glob("*.policy.hcl")}


def test_agent_passes_its_node_pool_and_class_for_choosing_its_profile(
    agent: AgentJob, tmp_path: Path, clean_environment: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job hands the node's pool and class to the agent (Nomad interpolates them), which picks its
    behaviour profile with them: the variables are settings the agent knows."""
    assert agent.env["GPUHEALTH_NODE_GROUP__NODE_POOL"] == "${node.pool}"
    assert agent.env["GPUHEALTH_NODE_GROUP__NODE_CLASS"] == "${node.class}"
    monkeypatch.setenv("GPUHEALTH_NODE_GROUP__NODE_POOL", "canary")
    monkeypatch.setenv("GPUHEALTH_NODE_GROUP__NODE_CLASS", "h100")
    settings = load_settings()
    assert (settings.node_group.node_pool, settings.node_group.node_class) == ("canary", "h100")
