"""The agent's settings: one typed object, from a YAML file plus ``GPUHEALTH_*`` environment variables.

Every field has a default and a one-line description (``docs/agent.md`` is generated from them by
``agent/settings_doc.py``). Environment variables win over the file, so a DaemonSet can override one value
without shipping a new file: ``GPUHEALTH_INTERVAL_S=5``, nested ``GPUHEALTH_KUBERNETES__RESYNC_S=120``.
Unknown keys are errors: a typo must fail loudly, not silently keep a default.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from agent.backends.infiniband import DEFAULT_SYSFS_ROOT
from agent.diagnostics.settings import DiagnosticsSettings
from agent.recovery.settings import RecoverySettings
from agent.state.machine import DebounceConfig
from checks.config import ChecksConfig
from core.aggregator_api import NODE_NAME_RULE, is_accepted_node_name
from core.settings import SettingsError, SettingsSection, default_node_name
from remediation.executor.token_source import token_from_env_or_file
from remediation.kubernetes.drain.policy import DrainPolicy
from remediation.kubernetes.requeue.decisions import RequeuePolicy
from remediation.kubernetes.settings import RetrySettings
from remediation.nomad.settings import NomadSettings
from remediation.plan.planner import RemediationPolicy
from remediation.plan.profiles import (
    PROFILE_LABEL,
    NodeGroup,
    ProfilesSettings,
    ResolvedProfile,
    resolve,
    select,
    validate_all,
)

ENV_PREFIX = "GPUHEALTH_"
ENV_NESTED_DELIMITER = "__"
DEFAULT_KMSG_PATH = "/dev/kmsg"
AGGREGATOR_TOKEN_ENV = "GPUHEALTH_AGGREGATOR_TOKEN"  # noqa: S105 - the variable's name, not a secret


class KubernetesSettings(SettingsSection):
    """How the agent reaches the API server."""

    kubeconfig: str | None = Field(
        default=None, description="Kubeconfig file; unset means in-cluster (the pod's service account)."
    )
    resync_s: float = Field(
        default=300.0,
        gt=0,
        description="Resync period handed to the Kubernetes executor (its needs_resync()).",
    )
    retry: RetrySettings = Field(
        default_factory=RetrySettings, description="Retries of API calls (429, 5xx, timeouts, 409)."
    )
    forbidden_hold_s: float = Field(
        default=300.0,
        ge=0,
        description="After a 403 (RBAC or admission policy), seconds before the executor writes again.",
    )
    dra_driver: str = Field(
        default="gpu.nvidia.com",
        min_length=1,
        description="DRA driver whose ResourceSlices list this node's GPUs (gpu_quarantine, partial drain).",
    )
    pod_resources_socket: str = Field(
        default="/var/lib/kubelet/pod-resources/kubelet.sock",
        min_length=1,
        description="The kubelet's PodResources socket: which pod holds which GPU (policy.partial_drain).",
    )


class KernelLogSettings(SettingsSection):
    """The kernel-log XID follower (complements NVML events; off by default)."""

    enabled: bool = Field(default=False, description="Follow the kernel log for XID lines.")
    source: Literal["kmsg", "journal"] = Field(
        default="kmsg", description="Read /dev/kmsg records, or run journalctl -k -f -o json."
    )
    path: str = Field(default=DEFAULT_KMSG_PATH, description="The kmsg device (or a FIFO) when source=kmsg.")


class FabricSettings(SettingsSection):
    """Fabric readings: InfiniBand / RoCE ports from sysfs, SXid and NIC link lines (docs/fabric.md)."""

    enabled: bool = Field(default=True, description="Add the fabric readings to every snapshot.")
    sysfs_root: Path = Field(
        default=DEFAULT_SYSFS_ROOT, description="Where the RDMA devices are listed (sysfs)."
    )


class DcgmExporterSettings(SettingsSection):
    """Scrape dcgm-exporter's /metrics and judge it with the NVML checks (off by default)."""

    enabled: bool = Field(default=False, description="Scrape dcgm-exporter and merge its findings.")
    url: str = Field(
        default="http://127.0.0.1:9400/metrics",
        description="The node's exporter (the Helm chart passes the node IP; 9400 is its default port).",
    )
    timeout_s: float = Field(default=5.0, gt=0, description="Timeout of one scrape.")
    every_s: float = Field(
        default=30.0, gt=0, description="Seconds between scrapes; the last result is reused in between."
    )


class DcgmiSettings(SettingsSection):
    """Run dcgmi health -c -j (off by default; on-demand diagnostics use the same binary)."""

    enabled: bool = Field(default=False, description="Poll dcgmi health and merge its findings.")
    path: str = Field(default="dcgmi", description="The dcgmi binary (a name on PATH or a full path).")
    host: str | None = Field(
        default=None,
        description="The DCGM host engine's address (dcgmi --host), e.g. the node's IP from a pod; "
        "none: the local engine.",
    )
    health_every_s: float = Field(
        default=60.0, gt=0, description="Seconds between two health checks (DCGM's watches need ~1 min)."
    )
    timeout_s: float = Field(default=30.0, gt=0, description="Timeout of one dcgmi health run.")


class DcgmSettings(SettingsSection):
    """DCGM sources: dcgm-exporter's page and the dcgmi command."""

    exporter: DcgmExporterSettings = Field(
        default_factory=DcgmExporterSettings, description="dcgm-exporter scrape."
    )
    dcgmi: DcgmiSettings = Field(default_factory=DcgmiSettings, description="dcgmi health checks.")


class HttpSettings(SettingsSection):
    """The /metrics, /healthz and /readyz endpoint."""

    enabled: bool = Field(default=True, description="Serve the HTTP endpoint.")
    host: str = Field(default="0.0.0.0", description="Address to listen on.")  # noqa: S104 - a pod port
    port: int = Field(default=9477, ge=0, le=65535, description="TCP port (0 picks a free one).")
    request_timeout_s: float = Field(
        default=10.0,
        gt=0,
        description="Socket timeout per connection: a client silent (or not reading) this long is dropped.",
    )
    max_connections: int = Field(
        default=16,
        ge=1,
        description="Connections served at once; one more is closed at once (a warning a minute says so).",
    )


class AggregatorLinkSettings(SettingsSection):
    """The central aggregator: reports, heartbeats, permits and the humans' requests.

    The token is never a setting (settings are logged and dumped): it comes from the environment variable
    ``GPUHEALTH_AGGREGATOR_TOKEN``, else from ``token_file``.
    """

    url: str | None = Field(
        default=None, description="Base URL of the aggregator; unset runs without one (mark + taint only)."
    )
    token_file: Path | None = Field(
        default=None, description="File holding the bearer token (GPUHEALTH_AGGREGATOR_TOKEN wins over it)."
    )
    ca_file: Path | None = Field(
        default=None,
        description="CA bundle that signed an https aggregator's certificate (else system CAs).",
    )
    client_cert_file: Path | None = Field(
        default=None, description="PEM client certificate, for an aggregator that requires one."
    )
    client_key_file: Path | None = Field(default=None, description="PEM private key of client_cert_file.")
    heartbeat_s: float = Field(
        default=60.0, gt=0, description="Seconds between two reports when nothing changed (heartbeat)."
    )
    timeout_s: float = Field(
        default=5.0, gt=0, description="Seconds one request to the aggregator may take (sent off the loop)."
    )
    permit_retry_s: float = Field(
        default=60.0, gt=0, description="Seconds before asking again for a permit refused or not answered."
    )
    outbox_max_reports: int = Field(
        default=1000, ge=2, description="Unsent reports kept on disk; heartbeats are dropped first."
    )
    labels: dict[str, str] = Field(
        default_factory=dict,
        max_length=100,
        description="Node labels sent with every report (zone, rack, pool): selector silences and alert "
        "grouping match them.",
    )


class AgentSettings(BaseSettings):
    """Everything ``gpuhealth agent`` reads at start-up, loaded once."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter=ENV_NESTED_DELIMITER,
        extra="forbid",
        frozen=True,
    )

    node_name: str = Field(
        default_factory=default_node_name, description="This node's name (default: NODE_NAME, else hostname)."
    )
    interval_s: float = Field(default=10.0, gt=0, description="Seconds between two polled snapshots.")
    detector_timeout_s: float = Field(
        default=10.0,
        gt=0,
        description=(
            "Watchdog: the longest a pass waits for NVML, dcgm-exporter or dcgmi; a call past it reads as "
            "unknown with its age, never blocks the loop."
        ),
    )
    state_dir: Path = Field(
        default=Path("/var/lib/gpuhealth"), description="Directory of the state file (survives restarts)."
    )
    expected_gpu_count: int | None = Field(
        default=None, ge=0, description="GPUs this node should have; fewer is a fault. Unset: not checked."
    )
    dry_run: bool = Field(default=False, description="Plan and log every action, mutate nothing.")
    checks: ChecksConfig = Field(default_factory=ChecksConfig, description="Settings of the checks.")
    debounce: DebounceConfig = Field(
        default_factory=DebounceConfig, description="Debounce of the node state machine."
    )
    policy: RemediationPolicy = Field(
        default_factory=RemediationPolicy, description="What the agent may do to its node."
    )
    drain: DrainPolicy = Field(
        default_factory=DrainPolicy, description="How the node is drained when policy.drain is on."
    )
    requeue: RequeuePolicy = Field(
        default_factory=RequeuePolicy,
        description="Per workload kind, after a drain: auto (restart when it would not), evict-only, off.",
    )
    drain_by: Literal["aggregator", "agent"] = Field(
        default="aggregator",
        description="Who drains and requeues: the central remediator (the agent needs no pod or job "
        "rights) or the agent itself (needs the cluster-wide drain RBAC).",
    )
    orchestrator: Literal["kubernetes", "nomad"] = Field(
        default="kubernetes", description="Which orchestrator the node belongs to (its executor)."
    )
    kubernetes: KubernetesSettings = Field(default_factory=KubernetesSettings, description="API access.")
    nomad: NomadSettings = Field(
        default_factory=NomadSettings, description="Nomad access, when orchestrator is nomad."
    )
    kernel_log: KernelLogSettings = Field(
        default_factory=KernelLogSettings, description="Kernel-log XID follower."
    )
    fabric: FabricSettings = Field(default_factory=FabricSettings, description="Fabric readings.")
    http: HttpSettings = Field(default_factory=HttpSettings, description="Metrics and health endpoint.")
    dcgm: DcgmSettings = Field(default_factory=DcgmSettings, description="DCGM sources (optional).")
    diagnostics: DiagnosticsSettings = Field(
        default_factory=DiagnosticsSettings, description="Scheduled and on-demand dcgmi diag."
    )
    aggregator: AggregatorLinkSettings = Field(
        default_factory=AggregatorLinkSettings, description="The central aggregator (optional)."
    )
    recovery: RecoverySettings = Field(
        default_factory=RecoverySettings, description="GPU reset / reboot, validation, release (off)."
    )
    profiles: ProfilesSettings = Field(
        default_factory=ProfilesSettings,
        description="Behaviour profiles per node group (observe ... remediate, shadow); none: base settings.",
    )
    node_group: NodeGroup = Field(
        default_factory=NodeGroup,
        description="This node's labels, Nomad pool, class and metadata, for choosing its profile.",
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        default="info", description="Lowest level logged."
    )
    log_format: Literal["auto", "json", "console"] = Field(
        default="auto", description="json, console, or auto (console on a terminal)."
    )

    @model_validator(mode="after")
    def _node_name_fits_the_aggregator(self) -> AgentSettings:
        # Every report carries the node's name, and the aggregator refuses one outside its rule: without
        # this check such an agent would run on, failing to build each report, for ever.
        if self.aggregator.url is not None and not is_accepted_node_name(self.node_name):
            raise ValueError(
                f"node_name '{self.node_name}' is not a name the aggregator accepts ({NODE_NAME_RULE}); "
                "set node_name (or NODE_NAME) to the node's name in that form"
            )
        return self

    @model_validator(mode="after")
    def _profiles_resolve(self) -> AgentSettings:
        # Every profile is resolved once at load, so a key no section knows is refused here, in one line.
        validate_all(self.profiles, checks=self.checks, debounce=self.debounce, policy=self.policy)
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The YAML file arrives as init arguments; listing env first makes the environment win over it.
        return env_settings, init_settings


def with_profile(
    settings: AgentSettings, group: NodeGroup | None = None
) -> tuple[AgentSettings, ResolvedProfile]:
    """The settings this node runs with: its profile (chosen by ``group``, else ``settings.node_group``)
    over the base checks, debounce, policy and recovery, and the profile itself (name, shadow, acting policy).

    The profile's name also goes into the labels every report carries (``gpuhealth.io/profile``), which is how
    the aggregator, the command line and the fleet page know it. Raises SettingsError with one line.
    """
    chosen = select(settings.profiles, group if group is not None else settings.node_group)
    profile = resolve(
        settings.profiles, chosen, checks=settings.checks, debounce=settings.debounce, policy=settings.policy
    )
    update: dict[str, Any] = {
        "checks": profile.checks,
        "debounce": profile.debounce,
        "policy": profile.policy,
    }
    if profile.recovery is not None:
        update["recovery"] = settings.recovery.model_copy(update={"enabled": profile.recovery})
    if settings.profiles.definitions or profile.shadow:
        labels = {**settings.aggregator.labels, PROFILE_LABEL: profile.name}
        update["aggregator"] = settings.aggregator.model_copy(update={"labels": labels})
    return settings.model_copy(update=update), profile


def aggregator_token(
    settings: AggregatorLinkSettings, environ: Mapping[str, str] | None = None
) -> str | None:
    """The aggregator's bearer token: ``GPUHEALTH_AGGREGATOR_TOKEN``, else the first line of ``token_file``.

    Raises SettingsError (naming the file, never the token) when the file cannot be read.
    """
    return token_from_env_or_file(
        AGGREGATOR_TOKEN_ENV,
        settings.token_file,
        os.environ if environ is None else environ,
        unreadable=lambda exc: SettingsError(
            f"{settings.token_file}: cannot read the token file: {exc.strerror or exc}"
        ),
    )


def load_settings(path: str | Path | None = None) -> AgentSettings:
    """The agent's settings from ``path`` (YAML, optional) and the environment.

    Raises SettingsError with one line naming the file and the bad field.
    """
    where = str(path) if path is not None else "environment"
    values = _read_yaml(Path(path)) if path is not None else {}
    try:
        return AgentSettings(**values)
    except ValidationError as exc:
        raise SettingsError(f"{where}: {_first_error(exc)}") from None


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SettingsError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        position = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        raise SettingsError(f"{path}: not valid YAML{position}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SettingsError(f"{path}: the top level must be a mapping, not {type(data).__name__}")
    return data


def _first_error(exc: ValidationError) -> str:
    errors = exc.errors()
    first = errors[0]
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    message = " ".join(str(first["msg"]).split())
    cause = first.get("ctx", {}).get("error")
    if not first["loc"] and isinstance(cause, ValueError):  # a check across fields names the field itself
        return f"{' '.join(str(cause).split())}{more}"
    field = ".".join(str(part) for part in first["loc"]) or "(top level)"
    return f"{field}: {message}{more}"
