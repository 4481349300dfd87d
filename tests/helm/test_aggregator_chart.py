"""The aggregator in the chart (docs/helm.md): deployed by default, the agents wired to it without the user
typing a URL or a token, SQLite on a volume or an external PostgreSQL, migrations once per install and
upgrade, probes, a disruption budget and a network policy that admits only who needs the API."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml
from live_aggregator import LiveAggregator

from agent.settings import load_settings
from aggregator.settings import AggregatorSettings
from aggregator.settings import load_settings as load_aggregator_settings
from core.clock import ManualClock
from tests.helm.conftest import (
    NAMESPACE,
    RELEASE,
    Manifest,
    Render,
    by_kind,
    component_of,
    one,
)

AGGREGATOR_URL = f"http://{RELEASE}-aggregator.{NAMESPACE}.svc:8470"
SECRETS_DIR = "/var/run/secrets/gpuhealth-aggregator"
POSTGRESQL: dict[str, Any] = {
    "aggregator": {
        "replicas": 3,
        "database": {"type": "postgresql", "postgresql": {"urlSecret": {"name": "pg", "key": "dsn"}}},
    }
}


def container(objects: list[Manifest], kind: str, component: str, name: str) -> dict[str, Any]:
    spec = one(objects, kind, component)["spec"]["template"]["spec"]
    found: dict[str, Any] = next(c for c in spec.get("containers", []) if c["name"] == name)
    return found


def env_of(spec: dict[str, Any]) -> dict[str, Any]:
    return {item["name"]: item.get("valueFrom", item.get("value")) for item in spec.get("env", [])}


def agent_settings_file(objects: list[Manifest], tmp_path: Path) -> Path:
    path = tmp_path / "agent.yaml"
    path.write_text(one(objects, "ConfigMap")["data"]["config.yaml"], encoding="utf-8")
    return path


def secret_named(objects: list[Manifest], name: str) -> Manifest:
    found: Manifest = next(obj for obj in by_kind(objects, "Secret") if obj["metadata"]["name"] == name)
    return found


def projected_secrets(objects: list[Manifest]) -> dict[str, tuple[str, str]]:
    """The aggregator's secret files: file name -> (Secret, key)."""
    pod = one(objects, "Deployment", "aggregator")["spec"]["template"]["spec"]
    [volume] = [v for v in pod["volumes"] if v["name"] == "secrets"]
    return {
        item["path"]: (source["secret"]["name"], item["key"])
        for source in volume["projected"]["sources"]
        for item in source["secret"]["items"]
    }


def aggregator_settings_of(objects: list[Manifest], tmp_path: Path, **files: str) -> AggregatorSettings:
    """The rendered aggregator config loaded as the aggregator loads it, its secret files (``files``: name ->
    content, e.g. token) made under tmp_path where the pod has them mounted."""
    secrets = tmp_path / "secrets"
    secrets.mkdir(exist_ok=True)
    for name, content in {"token": "t" * 48, "metrics-token": "m" * 48, **files}.items():
        (secrets / name).write_text(content + "\n", encoding="utf-8")
    text = one(objects, "ConfigMap", "aggregator")["data"]["config.yaml"]
    path = tmp_path / "aggregator.yaml"
    path.write_text(text.replace(SECRETS_DIR + "/", f"{secrets}/"), encoding="utf-8")
    return load_aggregator_settings(path, environ={})


def test_the_agents_report_with_a_projected_token_the_aggregator_reviews(
    render: Render, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defaults: the agents' aggregator.url is the aggregator's Service and their token is a projected
    ServiceAccount token for the audience the aggregator's TokenReview expects, bound to the pod (so the
    node); no shared token reaches a GPU node. The aggregator reads its generated token (people, `helm test`)
    from a mounted file, never an environment variable or a ConfigMap."""
    objects = render()
    secret = secret_named(objects, f"{RELEASE}-aggregator-token")
    token = base64.b64decode(secret["data"]["token"]).decode()
    assert len(token) == 48 and token.isalnum()
    assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"

    agent = container(objects, "DaemonSet", "agent", "agent")
    assert "GPUHEALTH_AGGREGATOR_TOKEN" not in env_of(agent)
    assert "GPUHEALTH_AGGREGATOR_TOKEN" not in env_of(
        container(objects, "Deployment", "aggregator", "aggregator")
    )
    assert projected_secrets(objects)["token"] == (secret["metadata"]["name"], "token")

    monkeypatch.setenv("NODE_NAME", "gpu-node-0")
    settings = load_settings(agent_settings_file(objects, tmp_path))
    assert settings.aggregator.url == AGGREGATOR_URL
    assert settings.aggregator.token_file == Path("/var/run/secrets/gpuhealth-aggregator/token")
    pod = one(objects, "DaemonSet")["spec"]["template"]["spec"]
    [identity] = [v for v in pod["volumes"] if v["name"] == "aggregator-identity"]
    [projected] = [
        s["serviceAccountToken"] for s in identity["projected"]["sources"] if "serviceAccountToken" in s
    ]
    mounts = {m["name"]: m["mountPath"] for m in agent["volumeMounts"]}
    assert f"{mounts['aggregator-identity']}/{projected['path']}" == str(settings.aggregator.token_file)

    server = aggregator_settings_of(objects, tmp_path)
    assert projected["audience"] == server.kubernetes_audience == "gpuhealth-aggregator"
    agent_account = f"system:serviceaccount:{NAMESPACE}:{pod['serviceAccountName']}"
    assert server.kubernetes_agent_service_accounts == [agent_account]
    assert server.kubernetes_api_url == "https://kubernetes.default.svc"
    assert server.token is not None and server.token.get_secret_value() == "t" * 48
    service = one(objects, "Service", "aggregator")
    assert service["metadata"]["name"] == f"{RELEASE}-aggregator"
    assert service["spec"]["ports"][0]["port"] == 8470
    for config_map in by_kind(objects, "ConfigMap"):
        assert token not in yaml.safe_dump(config_map)


def test_the_aggregator_config_file_loads_and_keeps_sqlite_on_its_volume(
    render: Render, tmp_path: Path
) -> None:
    """The rendered config file is valid for the aggregator: it listens on every address of its pod (plain
    HTTP there only because the chart allows it, TLS being off), keeps the SQLite file on the claimed volume,
    and takes the user's settings."""
    objects = render({"aggregator": {"settings": {"budget_max_nodes": 3, "cooldown_s": 600}}})
    settings = aggregator_settings_of(objects, tmp_path)
    assert (settings.host, settings.port, settings.allow_plain_http) == ("0.0.0.0", 8470, True)
    assert settings.budget_max_nodes == 3 and settings.cooldown_s == 600
    database_dir = "/var/lib/gpuhealth-aggregator"
    assert settings.database_url.get_secret_value() == f"sqlite:///{database_dir}/aggregator.db"

    pod = one(objects, "Deployment", "aggregator")["spec"]["template"]["spec"]
    mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["data"] == database_dir
    assert mounts["secrets"] == SECRETS_DIR
    claim = one(objects, "PersistentVolumeClaim", "aggregator")
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["data"]["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    assert one(objects, "Deployment", "aggregator")["spec"]["strategy"]["type"] == "Recreate"


def test_the_aggregator_is_probed_on_its_own_endpoints_and_runs_unprivileged(render: Render) -> None:
    """Readiness on /readyz (503 while the database is down), liveness on /healthz, on the named port the
    Service targets; non-root, read-only root, no capability; its service-account token is mounted only
    for the agents' TokenReviews."""
    objects = render()
    server = container(objects, "Deployment", "aggregator", "aggregator")
    assert server["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http", "scheme": "HTTP"}
    assert server["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http", "scheme": "HTTP"}
    assert server["ports"] == [{"name": "http", "containerPort": 8470, "protocol": "TCP"}]
    assert one(objects, "Service", "aggregator")["spec"]["ports"][0]["targetPort"] == "http"
    assert server["resources"]["limits"]["memory"]
    assert server["securityContext"]["readOnlyRootFilesystem"] is True
    assert server["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    pod = one(objects, "Deployment", "aggregator")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["automountServiceAccountToken"] is True
    shared = render({"aggregator": {"agentAuth": {"mode": "sharedToken"}}})
    assert (
        one(shared, "Deployment", "aggregator")["spec"]["template"]["spec"]["automountServiceAccountToken"]
        is False
    )
    budget = one(objects, "PodDisruptionBudget", "aggregator")
    assert budget["spec"]["maxUnavailable"] == 1


def test_sqlite_migrates_in_an_init_step_before_the_single_aggregator_starts(render: Render) -> None:
    objects = render()
    pod = one(objects, "Deployment", "aggregator")["spec"]["template"]["spec"]
    [migrate] = pod["initContainers"]
    assert migrate["args"][-1] == "--migrate-only"
    assert by_kind(objects, "Job") == []


def test_postgresql_takes_the_url_from_its_secret_runs_replicas_and_no_volume(render: Render) -> None:
    objects = render(POSTGRESQL)
    deployment = one(objects, "Deployment", "aggregator")
    assert deployment["spec"]["replicas"] == 3
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    server_env = env_of(container(objects, "Deployment", "aggregator", "aggregator"))
    assert not any("DATABASE_URL" in name for name in server_env)  # a file, never a variable
    assert projected_secrets(objects)["database-url"] == ("pg", "dsn")
    assert by_kind(objects, "PersistentVolumeClaim") == []
    assert "initContainers" not in deployment["spec"]["template"]["spec"]


@pytest.fixture(scope="module")
def upgrade_files(chart: helm.Chart) -> dict[str, str]:
    """The chart rendered as `helm upgrade` renders it over an installed release (revision 2)."""
    return chart.render(POSTGRESQL, name=RELEASE, namespace=NAMESPACE, revision=2, is_upgrade=True)


def test_an_upgrade_with_postgresql_migrates_once_in_a_pre_upgrade_hook(
    upgrade_files: dict[str, str],
) -> None:
    """One Job per install or upgrade, before the new aggregators start, whatever the replica count; it reads
    only the user's database Secret (a hook runs before the release's own objects exist)."""
    manifests = [text for path, text in upgrade_files.items() if not path.endswith("NOTES.txt")]
    [job] = [doc for text in manifests for doc in yaml.safe_load_all(text) if doc and doc["kind"] == "Job"]
    annotations = job["metadata"]["annotations"]
    assert set(annotations["helm.sh/hook"].split(",")) == {"pre-install", "pre-upgrade"}
    assert "before-hook-creation" in annotations["helm.sh/hook-delete-policy"]
    [step] = job["spec"]["template"]["spec"]["containers"]
    assert step["args"] == ["aggregator", "--migrate-only"]
    assert env_of(step) == {"GPUHEALTH_AGGREGATOR_DATABASE_URL_FILE": f"{SECRETS_DIR}/database-url"}
    [volume] = [v for v in job["spec"]["template"]["spec"]["volumes"] if v["name"] == "database-url"]
    assert volume["secret"] == {"secretName": "pg", "items": [{"key": "dsn", "path": "database-url"}]}
    assert component_of(job) == "aggregator"


def test_the_network_policy_admits_the_agents_the_test_pod_clients_and_the_scraper(render: Render) -> None:
    objects = render(
        {
            "aggregator": {
                "networkPolicy": {
                    "clientNamespaces": ["oncall"],
                    "metrics": {"namespaceSelector": {"kubernetes.io/metadata.name": "monitoring"}},
                }
            }
        }
    )
    policy = one(objects, "NetworkPolicy", "aggregator")
    aggregator_pods = one(objects, "Deployment", "aggregator")["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= aggregator_pods.items()
    [rule] = policy["spec"]["ingress"]
    assert rule["ports"] == [{"port": "http", "protocol": "TCP"}]
    peers = rule["from"]
    agent_pods = one(objects, "DaemonSet")["spec"]["template"]["metadata"]["labels"]
    assert peers[0]["podSelector"]["matchLabels"].items() <= agent_pods.items()
    assert peers[1]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "test"
    assert peers[2] == {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "oncall"}}}
    assert peers[3] == {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    assert len(peers) == 4


def test_without_a_scraper_selector_no_namespace_is_admitted_wholesale(render: Render) -> None:
    """An empty selector would admit every namespace: none is rendered then."""
    [rule] = one(render(), "NetworkPolicy", "aggregator")["spec"]["ingress"]
    assert all("namespaceSelector" not in peer for peer in rule["from"])


def test_an_existing_token_secret_is_used_and_none_is_generated(render: Render) -> None:
    """The user's token Secret is what the aggregator mounts; only the scraper's token is generated."""
    objects = render({"aggregator": {"tokenSecret": {"name": "my-token", "key": "value"}}})
    assert [secret["metadata"]["name"] for secret in by_kind(objects, "Secret")] == [
        f"{RELEASE}-aggregator-metrics-token"
    ]
    assert projected_secrets(objects)["token"] == ("my-token", "value")
    assert "GPUHEALTH_AGGREGATOR_TOKEN" not in env_of(container(objects, "DaemonSet", "agent", "agent"))


def test_the_settings_keys_of_the_schema_are_the_aggregators_settings() -> None:
    """values.schema.json lists the aggregator settings a user may set; it must follow the settings model."""
    from aggregator.settings import AggregatorSettings
    from tests.helm.conftest import CHART_DIR

    schema = yaml.safe_load((CHART_DIR / "values.schema.json").read_text())
    allowed = set(schema["properties"]["aggregator"]["properties"]["settings"]["properties"])
    # Where it listens, its database, its secrets (mounted files) and TLS: the chart's own values set them.
    chart_set = {"host", "port", "database_url", "database_url_file", "token", "shared_token_file"}
    chart_set |= {"metrics_token", "metrics_token_file", "allow_plain_http"}
    chart_set |= {"tls_cert_file", "tls_key_file", "tls_client_ca_file"}
    chart_set |= {"remediator"}  # from drain.* (the central remediator)
    chart_set |= {"profiles"}  # from the top-level profiles value, shared with the agents
    assert allowed == set(AggregatorSettings.model_fields) - chart_set


# --- helm test -------------------------------------------------------------------------------------------------


def the_test_pod(objects: list[Manifest]) -> dict[str, Any]:
    [pod] = [obj for obj in by_kind(objects, "Pod") if component_of(obj) == "test"]
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    spec: dict[str, Any] = pod["spec"]
    return spec


def run_step(step: dict[str, Any], url: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A container of the test pod run here, with the Service URL replaced by the live aggregator's."""
    command = [*step.get("command", ["gpuhealth"]), *step.get("args", [])]
    command = [url if part == AGGREGATOR_URL else part for part in command]
    if command[0] == "python":
        command[0] = sys.executable
    elif command[0] == "gpuhealth":
        command = [sys.executable, "-m", "gpuhealth", *command[1:]]
    return subprocess.run(
        command, capture_output=True, text=True, timeout=60, check=False, env={**os.environ, **env}
    )


@pytest.mark.slow
def test_helm_test_checks_readiness_and_reads_the_fleet_with_the_charts_token(
    render: Render, tmp_path: Path
) -> None:
    """The test pod's steps, run against a live aggregator: /readyz answers, and `gpuhealth status` succeeds
    with the token the chart wires (and fails with another, so the token really is what it sends)."""
    spec = the_test_pod(render())
    [readyz] = spec["initContainers"]
    [status] = spec["containers"]
    assert status["env"] == [
        {
            "name": "GPUHEALTH_TOKEN",
            "valueFrom": {"secretKeyRef": {"name": f"{RELEASE}-aggregator-token", "key": "token"}},
        }
    ]
    token = "t" * 48
    live = LiveAggregator(tmp_path / "aggregator.db", ManualClock(), token).start()
    try:
        ready = run_step(readyz, live.url, {})
        assert ready.returncode == 0, ready.stdout + ready.stderr
        listed = run_step(status, live.url, {"GPUHEALTH_TOKEN": token})
        assert listed.returncode == 0, listed.stderr
        refused = run_step(status, live.url, {"GPUHEALTH_TOKEN": "w" * 48})
        assert refused.returncode != 0 and "Traceback" not in refused.stderr
    finally:
        live.stop()
