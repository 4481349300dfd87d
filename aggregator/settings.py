"""The aggregator's one typed settings object: defaults, then the YAML ``aggregator:`` section, then the
environment (``GPUHEALTH_AGGREGATOR_<FIELD>``), each overriding the one before.

Every field has a default and a one-line description; docs/configuration.md lists them.
"""

from __future__ import annotations

import ipaddress
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from aggregator.alert_settings import RouteSettings, SinkSettings
from aggregator.peer_settings import PeerSettings
from aggregator.remediator_settings import RemediatorSettings
from checks.config import ChecksConfig
from core.debounce import DebounceConfig
from core.settings import SettingsError
from remediation.plan.planner import RemediationPolicy
from remediation.plan.profiles import ProfilesSettings, validate_all

ENV_PREFIX = "GPUHEALTH_AGGREGATOR_"
MIN_TOKEN_LENGTH = 32
"""Shorter bearer tokens are refused: a guessable token is no identity."""
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain"})
# Secret settings that may come from a file instead (a mounted Secret, a Nomad template): <name>_file.
SECRET_FILES = {
    "token": "shared_token_file",
    "database_url": "database_url_file",
    "metrics_token": "metrics_token_file",
}


class AggregatorSettings(BaseModel):
    """Everything the aggregator service can be configured with."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    host: str = Field(default="127.0.0.1", description="Address the HTTP service listens on.")
    port: int = Field(default=8470, ge=0, le=65535, description="TCP port of the HTTP service.")
    database_url: SecretStr = Field(
        default=SecretStr("sqlite:///gpuhealth-aggregator.db"),
        description="SQLAlchemy URL: a SQLite file (made on first start) or postgresql+psycopg://... (HA).",
    )
    database_url_file: Path | None = Field(
        default=None,
        description="File holding database_url (a mounted Secret): keeps its password out of env.",
    )
    sqlite_synchronous: str = Field(
        default="FULL",
        pattern="^(FULL|NORMAL)$",
        description="SQLite PRAGMA synchronous: FULL survives power loss, NORMAL only a process crash.",
    )
    token_file: Path | None = Field(
        default=None,
        description="YAML/JSON file of identities: name, role, node, SHA-256 of token (docs/security.md).",
    )
    token: SecretStr | None = Field(
        default=None,
        description="Deprecated shared bearer token: it may act as any node; use token_file per identity.",
    )
    shared_token_file: Path | None = Field(
        default=None, description="File holding the deprecated shared token (instead of token)."
    )
    metrics_token: SecretStr | None = Field(
        default=None,
        description="Bearer token that may read /metrics and nothing else (a Prometheus scraper).",
    )
    metrics_token_file: Path | None = Field(
        default=None, description="File holding metrics_token (a mounted Secret)."
    )
    tls_cert_file: Path | None = Field(
        default=None, description="PEM certificate (chain) to serve HTTPS with; unset: plain HTTP."
    )
    tls_key_file: Path | None = Field(default=None, description="PEM private key of tls_cert_file.")
    tls_client_ca_file: Path | None = Field(
        default=None, description="CA bundle of client certificates; set: every client must present one."
    )
    allow_plain_http: bool = Field(
        default=False,
        description="Serve plain HTTP on a non-loopback address (only behind a TLS proxy or mesh).",
    )
    token_role: Literal["viewer", "operator", "admin"] = Field(
        default="admin",
        description="Role of whoever sends the deprecated shared token (besides any agent's).",
    )
    kubernetes_api_url: str | None = Field(
        default=None,
        description="Kubernetes API server for TokenReview of agents' ServiceAccount tokens; unset: off.",
    )
    kubernetes_audience: str = Field(
        default="gpuhealth-aggregator", description="Audience agents' projected tokens must be issued for."
    )
    kubernetes_agent_service_accounts: list[str] = Field(
        default_factory=lambda: ["system:serviceaccount:gpuhealth:gpuhealth-agent"],
        description="ServiceAccount users whose reviewed tokens are agents (of the node they run on).",
    )
    kubernetes_token_file: Path = Field(
        default=Path("/var/run/secrets/kubernetes.io/serviceaccount/token"),
        description="The aggregator's own credentials for TokenReview (it needs system:auth-delegator).",
    )
    kubernetes_ca_file: Path | None = Field(
        default=None, description="CA bundle of the API server (in a pod: the ServiceAccount's ca.crt)."
    )
    nomad_address: str | None = Field(
        default=None,
        description="Nomad server address: agents' workload identities are checked by its JWKS; unset: off.",
    )
    nomad_audience: str = Field(
        default="gpuhealth-aggregator", description="Audience agents' Nomad workload identities must carry."
    )
    nomad_agent_jobs: list[str] = Field(
        default_factory=lambda: ["gpuhealth-agent"],
        description="Nomad jobs whose tasks' identities are agents (of the node their allocation runs on).",
    )
    nomad_agent_namespace: str = Field(
        default="default",
        min_length=1,
        max_length=128,
        description="The Nomad namespace of the agent jobs; an identity of any other namespace is no agent.",
    )
    nomad_token_file: Path | None = Field(
        default=None, description="The aggregator's own Nomad ACL token (read-job), to look allocations up."
    )
    oidc_issuer: str | None = Field(
        default=None, description="OpenID Connect issuer URL whose ID tokens identify people; unset: off."
    )
    oidc_audience: str = Field(default="gpuhealth", description="The client id people's ID tokens are for.")
    oidc_name_claim: str = Field(
        default="email", description="ID token claim naming the person (audit, history)."
    )
    oidc_groups_claim: str = Field(
        default="groups", description="ID token claim listing the person's groups."
    )
    oidc_role_map: dict[str, Literal["viewer", "operator", "admin"]] = Field(
        default_factory=dict,
        description="Group -> role (highest match wins; none: refused); a JSON object in the environment.",
    )
    allow_anonymous: bool = Field(
        default=False,
        description="Serve loopback clients without a token, as admin (local demos only; never in a fleet).",
    )
    max_report_bytes: int = Field(
        default=1_048_576, ge=1024, description="Largest request body accepted; larger ones get 413."
    )
    trusted_proxies: list[str] = Field(
        default_factory=list,
        description="Addresses or networks of proxies whose X-Forwarded-For is believed; none by default.",
    )
    max_header_bytes: int = Field(
        default=32_768,
        ge=4096,
        le=1_048_576,
        description="Largest request head (request line and headers) read, before any authentication; 431.",
    )
    max_headers: int = Field(default=100, ge=16, le=10_000, description="Most headers in one request; 431.")
    history_rows_per_node_per_minute: int = Field(
        default=120,
        ge=10,
        le=100_000,
        description="History rows one node's reports may write a minute; the rest are counted in a summary.",
    )
    max_seq_jump: int = Field(
        default=2_592_000_000,
        ge=1,
        description="A report's seq may lead its node's last by at most this (30 days of agents' ms seqs).",
    )
    report_interval_s: float = Field(
        default=30.0, gt=0, description="Report interval assumed for an agent that does not state its own."
    )
    stale_after_intervals: float = Field(
        default=3.0, gt=0, description="A node silent for this many report intervals is shown as stale."
    )
    budget_max_nodes: int = Field(
        default=5, ge=0, description="Most nodes that may hold a permit (draining / remediating) at once."
    )
    budget_max_percent: float = Field(
        default=10.0,
        ge=0,
        le=100,
        description="Most nodes holding a permit at once, as % of known GPU nodes.",
    )
    budget_min_nodes: int = Field(
        default=1, ge=0, description="Floor of the budget so a small fleet can still remediate one node."
    )
    permit_ttl_s: float = Field(
        default=900.0, gt=0, description="A permit not renewed within this many seconds expires."
    )
    max_permit_ttl_s: float = Field(default=3600.0, gt=0, description="Longest TTL an agent may ask for.")
    cooldown_s: float = Field(
        default=3600.0, ge=0, description="After a node's permit ends, no new permit for it for this long."
    )
    permit_settle_s: float = Field(
        default=15.0,
        ge=0,
        description=(
            "A node's permit waits until the node has been unhealthy this long, so the reports of a burst "
            "arrive and trip the breaker before any capacity is taken (0: no wait)."
        ),
    )
    retention_events_days: float = Field(
        default=90.0, gt=0, description="Events older than this are pruned (never those of an open incident)."
    )
    retention_incidents_days: float = Field(
        default=365.0, gt=0, description="Incidents closed longer ago than this are pruned (open ones never)."
    )
    retention_alerts_days: float = Field(
        default=90.0,
        gt=0,
        description="Alerts older than this are pruned once none of their deliveries waits.",
    )
    retention_audit_days: float = Field(
        default=365.0, gt=0, description="Audit entries older than this are pruned."
    )
    prune_every_s: float = Field(
        default=3600.0, gt=0, description="Seconds between two prunes of old history (one at start too)."
    )
    breaker_threshold_percent: float = Field(
        default=20.0,
        ge=0,
        le=100,
        description="Breaker trips when at least this % of GPU nodes turned unhealthy within the window.",
    )
    breaker_window_s: float = Field(default=600.0, gt=0, description="The breaker's sliding window.")
    profiles: ProfilesSettings = Field(
        default_factory=ProfilesSettings,
        description="The agents' behaviour profiles (the same section): each one's budget_share_percent "
        "caps the permits its nodes hold; its name comes with each report.",
    )
    breaker_min_nodes: int = Field(
        default=3, ge=1, description="The breaker never trips on fewer unhealthy nodes than this."
    )
    repeat_offender_incidents: int = Field(
        default=3, ge=1, description="This many incidents on one node within the period -> action replace."
    )
    repeat_offender_days: float = Field(default=7.0, gt=0, description="The repeat-offender period, in days.")
    db_pool_size: int = Field(default=10, ge=1, description="Database connections per aggregator process.")
    report_writers: int = Field(
        default=2,
        ge=1,
        le=32,
        description="Threads storing reports in parallel transactions on PostgreSQL (each waits on the "
        "server's round trips while another works). SQLite has one writer at a time and always uses one.",
    )
    alert_sinks: list[SinkSettings] = Field(
        default_factory=list, description="Alert receivers (docs/alerts.md); a JSON list in the environment."
    )
    alert_routes: list[RouteSettings] = Field(
        default_factory=list, description="Which alerts go to which sinks; none: every alert to every sink."
    )
    alert_poll_s: float = Field(
        default=1.0, gt=0, description="How often the delivery worker looks for work."
    )
    alert_permit_refused_after_s: float = Field(
        default=900.0, gt=0, description="Alert when a node's permits have been refused for this long."
    )
    alert_link_url: str | None = Field(
        default=None, description="Base URL on-call can open (e.g. the aggregator's); links in alerts."
    )
    remediator: RemediatorSettings = Field(
        default_factory=RemediatorSettings,
        description="Central remediator: drains and requeues on permits (JSON in the environment).",
    )
    peers: PeerSettings = Field(
        default_factory=PeerSettings,
        description="Peer comparison: each GPU against its model's and driver's (JSON in the environment).",
    )

    @field_validator(
        "kubernetes_agent_service_accounts", "nomad_agent_jobs", "trusted_proxies", mode="before"
    )
    @classmethod
    def _comma_separated_from_environment(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [item.strip() for item in value.split(",") if item.strip()]
        return value

    @field_validator("trusted_proxies")
    @classmethod
    def _addresses_or_networks(cls, value: list[str]) -> list[str]:
        for entry in value:
            try:
                ipaddress.ip_network(entry, strict=False)
            except ValueError as exc:
                raise ValueError(f"{entry!r} is not an IP address or network") from exc
        return value

    @field_validator(
        "alert_sinks", "alert_routes", "oidc_role_map", "remediator", "profiles", "peers", mode="before"
    )
    @classmethod
    def _json_from_environment(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                return json.loads(value)
            except ValueError as exc:
                raise ValueError("must be JSON") from exc
        return value

    @model_validator(mode="after")
    def _profiles_resolve(self) -> AggregatorSettings:
        # The agents refuse a profile naming an unknown key at load; so does the aggregator, that reads the
        # same section (checked against the defaults: only the keys matter here).
        validate_all(
            self.profiles, checks=ChecksConfig(), debounce=DebounceConfig(), policy=RemediationPolicy()
        )
        return self

    @model_validator(mode="after")
    def _routes_name_sinks(self) -> AggregatorSettings:
        names = [sink.name for sink in self.alert_sinks]
        if len(set(names)) != len(names):
            raise ValueError("alert sink names must be unique")
        for route in self.alert_routes:
            unknown = sorted(set(route.sinks) - set(names))
            if unknown:
                raise ValueError(f"alert route names unknown sink(s): {', '.join(unknown)}")
        return self

    @model_validator(mode="before")
    @classmethod
    def _secrets_from_files(cls, values: Any) -> Any:
        if not isinstance(values, dict):
            return values
        for name, file_setting in SECRET_FILES.items():
            path = values.get(file_setting)
            if path in (None, ""):
                continue
            if values.get(name) not in (None, ""):
                raise ValueError(f"set {name} or {file_setting}, not both")
            values = {**values, name: read_secret_file(Path(str(path)), file_setting)}
        return values

    @field_validator("token", "metrics_token")
    @classmethod
    def _long_enough(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value()) < MIN_TOKEN_LENGTH:
            raise ValueError(f"a token needs at least {MIN_TOKEN_LENGTH} characters: use a long random one")
        return value

    @model_validator(mode="after")
    def _tls_complete(self) -> AggregatorSettings:
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("tls_cert_file and tls_key_file go together: set both or neither")
        if self.tls_client_ca_file is not None and self.tls_cert_file is None:
            raise ValueError(
                "tls_client_ca_file needs tls_cert_file and tls_key_file (client certs need TLS)"
            )
        if self.tls_cert_file is None and not self.allow_plain_http and not is_loopback_host(self.host):
            raise ValueError(
                f"plain HTTP on {self.host} would send every token in clear: set tls_cert_file and "
                "tls_key_file, or allow_plain_http: true behind a TLS proxy or mesh"
            )
        return self

    @model_validator(mode="after")
    def _token_or_anonymous(self) -> AggregatorSettings:
        identities = (
            self.token
            or self.token_file is not None
            or self.kubernetes_api_url
            or self.nomad_address
            or self.oidc_issuer
        )
        if not identities and not self.allow_anonymous:
            raise ValueError(
                f"no identities: set aggregator.token_file (or {ENV_PREFIX}TOKEN_FILE) to a file of hashed "
                "tokens (or allow_anonymous: true for a local demo)"
            )
        return self


def is_loopback_host(host: str) -> bool:
    """Whether ``host`` (a listen address) is this machine's loopback only."""
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def read_secret_file(path: Path, setting: str) -> str:
    """A secret from its file (trailing newline dropped); an error names the file, never the value."""
    try:
        value = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ValueError(f"{path}: cannot read {setting}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path}: {setting} is not UTF-8 text") from None
    if not value:
        raise ValueError(f"{path}: {setting} is empty")
    return value


def load_settings(
    path: str | Path | None = None, environ: Mapping[str, str] | None = None, **overrides: Any
) -> AggregatorSettings:
    """Settings from an optional YAML file's ``aggregator:`` section, then the environment, then overrides."""
    values: dict[str, Any] = {}
    if path is not None:
        values.update(_yaml_section(Path(path)))
    values.update(_env_values(os.environ if environ is None else environ))
    values.update(overrides)
    try:
        return AggregatorSettings.model_validate(values)
    except ValidationError as exc:
        first = exc.errors()[0]
        message = str(first["msg"]).removeprefix("Value error, ")
        where = ".".join(str(part) for part in first["loc"])
        raise SettingsError(f"invalid aggregator setting {where}: {message}" if where else message) from exc


def _yaml_section(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SettingsError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        raise SettingsError(f"{path}: not valid YAML") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SettingsError(f"{path}: the top level must be a mapping")
    section = data.get("aggregator") or {}
    if not isinstance(section, dict):
        raise SettingsError(f"{path}: the 'aggregator' section must be a mapping")
    return dict(section)


def _env_values(environ: Mapping[str, str]) -> dict[str, str]:
    fields = AggregatorSettings.model_fields
    values: dict[str, str] = {}
    for key, value in environ.items():
        if key.startswith(ENV_PREFIX):
            name = key.removeprefix(ENV_PREFIX).lower()
            if name in fields:
                values[name] = value
    return values
