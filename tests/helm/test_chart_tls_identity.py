"""The chart's TLS and identities (docs/helm.md, docs/security.md): HTTPS from a cert-manager Certificate or an
existing Secret, the agents verifying it with the CA and authenticating with a projected ServiceAccount
token the aggregator reviews (system:auth-delegator), plain HTTP only where explicitly allowed, and the
scraper's own token."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
from certificates import write_tls_files

from agent.settings import load_settings
from aggregator.server import tls_options
from core.settings import SettingsError
from tests.helm.conftest import NAMESPACE, RELEASE, Manifest, Render, by_kind, component_of, one
from tests.helm.test_aggregator_chart import (
    SECRETS_DIR,
    agent_settings_file,
    aggregator_settings_of,
    container,
    env_of,
    projected_secrets,
)

ISSUER = {"name": "cluster-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}
CERT_MANAGER: dict[str, Any] = {
    "aggregator": {"tls": {"enabled": True, "certManager": {"issuerRef": ISSUER}}}
}
EXISTING: dict[str, Any] = {"aggregator": {"tls": {"enabled": True, "secretName": "agg-tls"}}}
SERVICE = f"{RELEASE}-aggregator"
HTTPS_URL = f"https://{SERVICE}.{NAMESPACE}.svc:8470"
TLS_DIR = "/var/run/secrets/gpuhealth-aggregator-tls"


def _pod(objects: list[Manifest], kind: str, component: str) -> dict[str, Any]:
    spec: dict[str, Any] = one(objects, kind, component)["spec"]["template"]["spec"]
    return spec


def _volumes(spec: dict[str, Any]) -> dict[str, Any]:
    return {volume["name"]: volume for volume in spec["volumes"]}


def _agent_ca_source(objects: list[Manifest]) -> dict[str, Any]:
    identity = _volumes(_pod(objects, "DaemonSet", "agent"))["aggregator-identity"]
    [source] = [s["secret"] for s in identity["projected"]["sources"] if "secret" in s]
    return dict(source)


def test_cert_manager_issues_the_aggregators_certificate_for_its_service_names(render: Render) -> None:
    objects = render(CERT_MANAGER)
    [certificate] = by_kind(objects, "Certificate")
    assert component_of(certificate) == "aggregator"
    spec = certificate["spec"]
    assert spec["issuerRef"] == ISSUER
    assert spec["secretName"] == f"{SERVICE}-tls"
    assert f"{SERVICE}.{NAMESPACE}.svc" in spec["dnsNames"] and SERVICE in spec["dnsNames"]
    assert "server auth" in spec["usages"]
    tls = _volumes(_pod(objects, "Deployment", "aggregator"))["tls"]["secret"]
    assert tls["secretName"] == spec["secretName"]
    assert {item["key"] for item in tls["items"]} == {"tls.crt", "tls.key"}  # not even ca.crt


@pytest.mark.parametrize(("values", "secret"), [(CERT_MANAGER, f"{SERVICE}-tls"), (EXISTING, "agg-tls")])
def test_with_tls_the_aggregator_serves_https_and_the_agents_verify_it_with_the_ca(
    render: Render,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    values: dict[str, Any],
    secret: str,
) -> None:
    """Both modes: the rendered aggregator config loads with real files in their places and serves HTTPS on
    the pod address (no plain-HTTP exception); probes use HTTPS; the agents' URL is https and their CA file
    is the Secret's ca.crt, beside their projected token."""
    objects = render(values)
    assert len(by_kind(objects, "Certificate")) == (0 if secret == "agg-tls" else 1)
    files = write_tls_files(tmp_path / "tls")
    text_settings = aggregator_settings_of(objects, tmp_path)
    assert text_settings.tls_cert_file == Path(f"{TLS_DIR}/tls.crt")
    assert text_settings.tls_key_file == Path(f"{TLS_DIR}/tls.key")
    assert not text_settings.allow_plain_http and text_settings.host == "0.0.0.0"
    served = text_settings.model_copy(
        update={"tls_cert_file": files.server_cert, "tls_key_file": files.server_key}
    )
    assert set(tls_options(served)) == {"ssl_certfile", "ssl_keyfile"}
    server = container(objects, "Deployment", "aggregator", "aggregator")
    assert server["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert server["livenessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert {m["name"]: m["mountPath"] for m in server["volumeMounts"]}["tls"] == TLS_DIR

    monkeypatch.setenv("NODE_NAME", "gpu-node-0")
    agent = load_settings(agent_settings_file(objects, tmp_path)).aggregator
    assert agent.url == HTTPS_URL
    assert agent.ca_file == Path("/var/run/secrets/gpuhealth-aggregator/ca.crt")
    assert _agent_ca_source(objects) == {"name": secret, "items": [{"key": "ca.crt", "path": "ca.crt"}]}


def test_tls_without_a_certificate_source_fails_the_render_with_one_line(chart: helm.Chart) -> None:
    with pytest.raises(helm.HelmRenderError) as failed:
        chart.render({"aggregator": {"tls": {"enabled": True}}}, name=RELEASE, namespace=NAMESPACE)
    assert "aggregator.tls.enabled needs aggregator.tls.certManager.issuerRef" in str(failed.value)


def test_without_tls_plain_http_is_an_explicit_chart_choice(render: Render, tmp_path: Path) -> None:
    """TLS off: the chart sets allow_plain_http (tls.allowPlainHttp, on by default); turned off, the
    aggregator refuses to start on its pod address with one line."""
    assert aggregator_settings_of(render(), tmp_path).allow_plain_http
    refused = render({"aggregator": {"tls": {"allowPlainHttp": False}}})
    with pytest.raises(SettingsError, match=r"plain HTTP on 0\.0\.0\.0 would send every token in clear"):
        aggregator_settings_of(refused, tmp_path)


def test_the_helm_test_pod_verifies_the_aggregator_with_the_ca_only(render: Render) -> None:
    objects = render(CERT_MANAGER)
    [pod] = [obj for obj in by_kind(objects, "Pod") if component_of(obj) == "test"]
    spec = pod["spec"]
    assert _volumes(spec)["ca"]["secret"]["items"] == [{"key": "ca.crt", "path": "ca.crt"}]
    [status] = spec["containers"]
    assert HTTPS_URL in status["args"]
    assert env_of(status)["GPUHEALTH_CA_FILE"] == "/etc/gpuhealth-ca/ca.crt"
    [readyz] = spec["initContainers"]
    assert readyz["command"][-1] == "/etc/gpuhealth-ca/ca.crt"


def test_the_aggregator_may_review_tokens_and_nothing_more(render: Render) -> None:
    """The release's aggregator is bound to Kubernetes' system:auth-delegator ClusterRole (TokenReview and
    SubjectAccessReview create), under its own ServiceAccount; with the shared token mode it is not."""
    objects = render()
    [binding] = [b for b in by_kind(objects, "ClusterRoleBinding") if component_of(b) == "aggregator"]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "system:auth-delegator",
    }
    account = one(objects, "ServiceAccount", "aggregator")["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}]
    assert _pod(objects, "Deployment", "aggregator")["serviceAccountName"] == account
    shared = render({"aggregator": {"agentAuth": {"mode": "sharedToken"}}})
    assert [b for b in by_kind(shared, "ClusterRoleBinding") if component_of(b) == "aggregator"] == []


def test_the_shared_token_mode_puts_the_token_on_the_nodes_as_before(render: Render, tmp_path: Path) -> None:
    objects = render({"aggregator": {"agentAuth": {"mode": "sharedToken"}}})
    agent = container(objects, "DaemonSet", "agent", "agent")
    assert env_of(agent)["GPUHEALTH_AGGREGATOR_TOKEN"] == {
        "secretKeyRef": {"name": f"{SERVICE}-token", "key": "token"}
    }
    assert "aggregator-identity" not in _volumes(_pod(objects, "DaemonSet", "agent"))
    assert aggregator_settings_of(objects, tmp_path).kubernetes_api_url is None


def test_an_audience_of_ones_own_reaches_both_sides(render: Render, tmp_path: Path) -> None:
    objects = render(
        {"aggregator": {"agentAuth": {"audience": "gpuhealth.example.com", "expirationSeconds": 7200}}}
    )
    identity = _volumes(_pod(objects, "DaemonSet", "agent"))["aggregator-identity"]
    [token] = [
        s["serviceAccountToken"] for s in identity["projected"]["sources"] if "serviceAccountToken" in s
    ]
    assert token == {"audience": "gpuhealth.example.com", "expirationSeconds": 7200, "path": "token"}
    assert aggregator_settings_of(objects, tmp_path).kubernetes_audience == "gpuhealth.example.com"


def test_an_aggregator_elsewhere_is_verified_with_the_named_ca(render: Render, tmp_path: Path) -> None:
    values = {
        "aggregator": {
            "enabled": False,
            "url": "https://gpuhealth.example:8470",
            "caSecret": {"name": "corp-ca", "key": "bundle.pem"},
        }
    }
    objects = render(values)
    assert _agent_ca_source(objects) == {
        "name": "corp-ca",
        "items": [{"key": "bundle.pem", "path": "ca.crt"}],
    }
    config = one(objects, "ConfigMap")["data"]["config.yaml"]
    assert "ca_file: /var/run/secrets/gpuhealth-aggregator/ca.crt" in config


def test_people_identities_come_from_a_hashed_token_file_secret(render: Render) -> None:
    objects = render({"aggregator": {"identitiesSecret": {"name": "people", "key": "tokens.yaml"}}})
    assert projected_secrets(objects)["tokens.yaml"] == ("people", "tokens.yaml")
    config = one(objects, "ConfigMap", "aggregator")["data"]["config.yaml"]
    assert f"token_file: {SECRETS_DIR}/tokens.yaml" in config


@pytest.mark.parametrize(
    ("kind", "endpoints"), [("ServiceMonitor", "endpoints"), ("PodMonitor", "podMetricsEndpoints")]
)
def test_the_scraper_has_its_own_token_and_verifies_tls(
    render: Render, tmp_path: Path, kind: str, endpoints: str
) -> None:
    """Both monitors send the metrics token and verify the certificate with the CA under the Service's name
    (the PodMonitor scrapes the pod's address, which the certificate does not carry)."""
    switch = "serviceMonitor" if kind == "ServiceMonitor" else "podMonitor"
    objects = render({**CERT_MANAGER, "metrics": {switch: {"enabled": True}}})
    [monitor] = [m for m in by_kind(objects, kind) if component_of(m) == "aggregator"]
    [endpoint] = monitor["spec"][endpoints]
    secret = f"{SERVICE}-metrics-token"
    assert endpoint["authorization"] == {"type": "Bearer", "credentials": {"name": secret, "key": "token"}}
    assert endpoint["scheme"] == "https"
    assert endpoint["tlsConfig"] == {
        "serverName": f"{SERVICE}.{NAMESPACE}.svc",
        "ca": {"secret": {"name": f"{SERVICE}-tls", "key": "ca.crt"}},
    }
    plain = [
        m
        for m in by_kind(render({"metrics": {switch: {"enabled": True}}}), kind)
        if component_of(m) == "aggregator"
    ]
    [plain_endpoint] = plain[0]["spec"][endpoints]
    assert "scheme" not in plain_endpoint and plain_endpoint["authorization"] == endpoint["authorization"]
    assert projected_secrets(objects)["metrics-token"] == (secret, "token")
    settings = aggregator_settings_of(objects, tmp_path)
    assert settings.metrics_token is not None and settings.metrics_token.get_secret_value() == "m" * 48
