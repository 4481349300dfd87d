"""The aggregator's wire models: what agents report and what the API answers (format ``gpuhealth.report/v1``).

Pure pydantic, no web or database imports, so the agent and the CLI can use them through
``agent.uplink.client`` without pulling in the service.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    model_validator,
)

from core.findings import Action, Finding, Status, Verdict
from core.health import NodeState

NODE_NAME_PATTERN = r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,251}[A-Za-z0-9])?$"
MAX_SEQ = 2**63 - 1
_EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)
_LATEST = datetime(9000, 1, 1, tzinfo=UTC)


def _utc_in_range(value: datetime) -> datetime:
    """Times are stored in UTC; a time without a zone is UTC; absurd years are refused, not overflowed."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    if not _EARLIEST <= value <= _LATEST:
        raise ValueError("time must lie between the years 2000 and 9000")
    return value.astimezone(UTC)


WireTime = Annotated[datetime, AfterValidator(_utc_in_range)]
NodeName = Annotated[str, Field(pattern=NODE_NAME_PATTERN, max_length=253, description="The node's name.")]
NODE_NAME_RULE = (
    "letters, digits, '.', '_' and '-', beginning and ending with a letter or digit, at most 253 characters"
)
_NODE_NAME_ADAPTER: TypeAdapter[str] = TypeAdapter(NodeName)


def is_accepted_node_name(name: str) -> bool:
    """Whether the aggregator accepts ``name`` as a node's name (reports, requests, paths: :data:`NodeName`).

    An agent checks its own name with this at start, so a name the aggregator would refuse stops it with one
    line rather than failing every report it builds.
    """
    try:
        _NODE_NAME_ADAPTER.validate_python(name)
    except ValidationError:
        return False
    return True


ShortText = Annotated[str, Field(max_length=1000)]
FINDING_TEXT_LIMITS = {"check": 64, "gpu": 128, "code": 128, "message": 1000}
"""The longest text a report's finding may carry, per field (a ``Finding`` itself is not bounded: the agent
clips what it reports with :func:`reportable_finding`)."""


def reportable_finding(finding: Finding) -> Finding:
    """``finding`` with its text cut to what a report may carry."""
    clipped = {
        name: value[:limit]
        for name, limit in FINDING_TEXT_LIMITS.items()
        if isinstance(value := getattr(finding, name), str) and len(value) > limit
    }
    return finding.model_copy(update=clipped) if clipped else finding


def reject_unstorable_text(value: object) -> None:
    """Refuse NUL characters and lone surrogates anywhere: no database can store them as text."""
    if _plainly_storable(value):
        return
    _walk_for_unstorable_text(value)


def _plainly_storable(value: object) -> bool:
    """A fast proof that a JSON-shaped tree holds no NUL and no lone surrogate (False: look closer).

    Every report passes through here, and walking its tree in Python cost more than storing it. The C
    encoder writes a NUL as the escape ``\\u0000`` and leaves a lone surrogate as it is (so the text does
    not encode to UTF-8); keys are encoded too. Text that merely contains a backslash and ``u0000`` also
    matches, and anything the encoder cannot serialise is not proven: both go to the exact walk.
    """
    try:
        encoded = json.dumps(value, ensure_ascii=False, allow_nan=True)
    except (TypeError, ValueError):
        return False
    if "\\u0000" in encoded:
        return False
    if encoded.isascii():
        return True
    try:
        encoded.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _walk_for_unstorable_text(value: object) -> None:
    if isinstance(value, str):
        if "\x00" in value:
            raise ValueError("text must not contain NUL characters")
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise ValueError("text must be valid Unicode (no lone surrogates)") from exc
    elif isinstance(value, dict):
        for key, item in value.items():
            _walk_for_unstorable_text(key)
            _walk_for_unstorable_text(item)
    elif isinstance(value, list | tuple):
        for item in value:
            _walk_for_unstorable_text(item)


class _Wire(BaseModel):
    # NaN and infinities are not numbers any field means, and JSON cannot carry them back out.
    model_config = ConfigDict(frozen=True, extra="ignore", allow_inf_nan=False)


class _Body(_Wire):
    """A request body: its whole tree is checked once for text no database can store."""

    @model_validator(mode="before")
    @classmethod
    def _storable_text(cls, data: Any) -> Any:
        reject_unstorable_text(data)
        return data


STALE = "stale"
"""Shown instead of the reported state when a node has been silent for ``stale_after_intervals`` intervals."""

BAD_STATES = frozenset({NodeState.UNHEALTHY, NodeState.QUARANTINED})
"""States that count as "turned unhealthy" for the circuit breaker."""


_Count = Annotated[int, Field(ge=0)]
_Mhz = Annotated[int, Field(ge=0, le=100_000)]
_Watts = Annotated[float, Field(ge=0, le=100_000)]


class GpuReadings(_Wire):
    """The readings the aggregator compares with the GPU's peers (same model and driver) across the fleet.

    Optional, every field too: an older agent sends none, a GPU that cannot tell sends ``null``.
    """

    driver_version: Annotated[str, Field(max_length=64)] | None = None
    utilization_pct: Annotated[int, Field(ge=0, le=100)] | None = None
    sm_clock_mhz: _Mhz | None = None
    max_sm_clock_mhz: _Mhz | None = None
    clocks_event_reasons: _Count | None = None
    power_w: _Watts | None = None
    power_limit_w: _Watts | None = None
    temperature_c: Annotated[int, Field(ge=-50, le=300)] | None = None
    pcie_gen: Annotated[int, Field(ge=0, le=16)] | None = None
    pcie_width: Annotated[int, Field(ge=0, le=64)] | None = None
    pcie_max_gen: Annotated[int, Field(ge=0, le=16)] | None = None
    pcie_max_width: Annotated[int, Field(ge=0, le=64)] | None = None
    pcie_replays: _Count | None = Field(default=None, description="PCIe replays since the driver loaded.")
    vbios_version: Annotated[str, Field(max_length=64)] | None = None
    remapped_rows_correctable: _Count | None = None
    remapped_rows_uncorrectable: _Count | None = None
    remap_pending: bool | None = None
    remap_failure: bool | None = None
    retired_pages_single_bit: _Count | None = None
    retired_pages_double_bit: _Count | None = None
    retired_pages_pending: bool | None = None
    ecc_aggregate_uncorrected: _Count | None = None
    nvlink_errors: _Count | None = Field(
        default=None,
        description="NVLink replay, recovery and CRC errors of every link since the driver loaded.",
    )


class GpuSummary(_Wire):
    """One GPU as the report carries it: identity, its worst finding's status and its peer readings."""

    uuid: Annotated[str, Field(min_length=1, max_length=128)]
    index: Annotated[int, Field(ge=0, le=1023)]
    name: Annotated[str, Field(max_length=128)] | None = None
    status: Status = Status.OK
    pci_bus_id: Annotated[str, Field(max_length=64)] | None = Field(
        default=None, description="The GPU's PCI address, as NVML gives it (e.g. 00000000:18:00.0)."
    )
    serial: Annotated[str, Field(max_length=64)] | None = Field(
        default=None, description="The board's serial number (NVML), what a replacement request names."
    )
    readings: GpuReadings | None = Field(
        default=None, description="What the aggregator compares with the GPU's peers (absent: no comparison)."
    )


class IncidentGpu(_Wire):
    """A GPU an incident is about, as it was when the incident opened: what a person needs to find it."""

    uuid: str
    index: int | None = None
    pci_bus_id: str | None = None
    serial: str | None = None
    name: str | None = Field(default=None, description="The GPU's model, e.g. NVIDIA H200.")


class IncidentReport(_Wire):
    """The node's open incident, as the agent's state machine keeps it."""

    id: Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._:-]+$")]
    started_at: WireTime
    reasons: Annotated[list[ShortText], Field(max_length=100)] = Field(
        default_factory=list, description="Finding codes that opened or kept the incident, e.g. XID_79."
    )
    action: Action = Field(default=Action.NONE, description="The most severe action recommended so far.")


DIAG_OUTPUT_MAX_BYTES = 64 * 1024
"""How much of a diagnostic's raw output an agent sends (its end: the results come last)."""
DIAG_OUTPUT_MAX_CHARS = DIAG_OUTPUT_MAX_BYTES
"""The wire's bound on ``ActionTaken.output`` in characters (64 KiB of UTF-8 is at most as many)."""


class ActionTaken(_Wire):
    """One step the agent performed since its previous report (for the incident timeline)."""

    at: WireTime
    action: Annotated[str, Field(min_length=1, max_length=64)] = Field(
        description="What was done: condition, label, taint, cordon, drain, requeue, reset, reboot, release."
    )
    result: Literal["ok", "failed", "skipped", "dry_run", "shadow"] = Field(
        default="ok", description="shadow: decided by a profile in shadow mode, recorded, not written."
    )
    message: ShortText = ""
    incident_id: Annotated[str, Field(max_length=128)] | None = None
    output: Annotated[str, Field(max_length=DIAG_OUTPUT_MAX_CHARS)] | None = Field(
        default=None,
        description="The step's raw output where it is evidence: a diagnostic's `dcgmi diag -j` output "
        "(its last 64 KiB, secret-looking values redacted by the agent). Absent for every other step.",
    )


class Report(_Body):
    """One agent report. Idempotent by (node, seq): a seq not above the last accepted one is ignored."""

    schema_: Literal["gpuhealth.report/v1"] = Field(default="gpuhealth.report/v1", alias="schema")
    node: NodeName
    seq: Annotated[int, Field(ge=0, le=MAX_SEQ)] = Field(
        description="Per-node sequence number, increasing with every new report (a retry repeats it)."
    )
    epoch: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._:-]+$")] | None = Field(
        default=None,
        description="The agent's sequence epoch (its boot id, or a fresh one after a sequence conflict): "
        "a report of a new epoch starts the node's sequence afresh.",
    )
    sent_at: WireTime
    interval_s: Annotated[float, Field(ge=1, le=86_400)] | None = Field(
        default=None, description="The agent's report interval; staleness is judged against it."
    )
    orchestrator: Literal["kubernetes", "nomad"]
    state: NodeState
    verdict: Verdict
    incident: IncidentReport | None = None
    gpus: Annotated[list[GpuSummary], Field(max_length=64)] = Field(default_factory=list)
    labels: Annotated[dict[Annotated[str, Field(max_length=317)], ShortText], Field(max_length=100)] = Field(
        default_factory=dict
    )
    actions: Annotated[list[ActionTaken], Field(max_length=200)] = Field(default_factory=list)
    acknowledged_requests: Annotated[list[Annotated[int, Field(ge=1, le=MAX_SEQ)]], Field(max_length=100)] = (
        Field(default_factory=list, description="Ids of quarantine / release requests the agent has applied.")
    )

    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)

    @model_validator(mode="after")
    def _verdict_is_this_nodes(self) -> Report:
        if self.verdict.node != self.node:
            raise ValueError("verdict.node must equal node")
        if len(self.verdict.findings) > 500:
            raise ValueError("at most 500 findings per report")
        for index, finding in enumerate(self.verdict.findings):
            for name, limit in FINDING_TEXT_LIMITS.items():
                value = getattr(finding, name)
                if isinstance(value, str) and len(value) > limit:
                    raise ValueError(f"verdict.findings[{index}].{name}: at most {limit} characters")
        return self


class RequestKind(StrEnum):
    """What a node request asks its agent to do."""

    QUARANTINE = "quarantine"
    RELEASE = "release"
    DIAG = "diag"


class NodeRequest(_Wire):
    """A human's (or the repeat-offender rule's) request that the node's agent applies."""

    id: int
    node: str
    kind: RequestKind
    reason: str
    requested_by: str
    created_at: datetime
    applied_at: datetime | None = None
    status: Literal["pending", "applied", "superseded"]
    level: int | None = Field(default=None, description="diag only: the dcgmi diag level (1-4).")
    force: bool = Field(default=False, description="diag only: run even while pods use the GPUs.")


class ReportAck(_Wire):
    """The answer to a report: whether it counted, and what the agent should do next."""

    node: str
    seq: int
    accepted: bool = Field(
        description="False when the report did not count: a retry of one already accepted, or refused."
    )
    last_seq: int | None = Field(
        default=None, description="The node's last accepted seq in its current epoch (after this report)."
    )
    refused: str | None = Field(
        default=None,
        description="Why the report was refused (e.g. a seq too far ahead); null for accepted reports and "
        "retries. An agent starts a new epoch when refused or when last_seq is above what it sent.",
    )
    pending_requests: list[NodeRequest] = Field(default_factory=list)
    hold: str | None = Field(
        default=None, description="Why the node must stay quarantined until a human releases it, if it must."
    )


IGNORED_REQUESTER = (
    "Ignored (kept so older clients still work): the aggregator records the authenticated caller."
)


class ManualRequest(_Body):
    """Body of ``POST /v1/nodes/{node}/quarantine`` and ``.../release``."""

    reason: Annotated[str, Field(min_length=1, max_length=1000)]
    requested_by: Annotated[str, Field(max_length=128)] | None = Field(
        default=None, description=IGNORED_REQUESTER
    )


class DiagRequest(_Body):
    """Body of ``POST /v1/nodes/{node}/diag``: run ``dcgmi diag -r LEVEL`` on the node."""

    level: Annotated[int, Field(ge=1, le=4)] = Field(default=1, description="dcgmi diag level (1-4).")
    force: bool = Field(default=False, description="Run even while pods on the node use its GPUs.")
    reason: Annotated[str, Field(min_length=1, max_length=1000)] = "requested by on-call"
    requested_by: Annotated[str, Field(max_length=128)] | None = Field(
        default=None, description=IGNORED_REQUESTER
    )


class PermitRequest(_Body):
    """Ask for permission to take a node's capacity away (drain, reset, reboot...)."""

    node: NodeName
    action: Action = Field(description="The remediation the permit is for.")
    incident_id: Annotated[str, Field(max_length=128)] | None = None
    ttl_s: Annotated[float, Field(gt=0, le=86_400)] | None = Field(
        default=None, description="Seconds until the permit expires unless renewed (default: permit_ttl_s)."
    )


class PermitRenewal(_Body):
    """Body of ``POST /v1/permits/{id}/renew``: the new TTL (default: permit_ttl_s)."""

    ttl_s: Annotated[float, Field(gt=0, le=86_400)] | None = None


class Permit(_Wire):
    """A granted permit. It lapses at ``expires_at`` unless renewed, so a dead agent's permit frees itself."""

    id: int
    node: str
    action: Action
    incident_id: str | None
    granted_at: datetime
    expires_at: datetime
    released_at: datetime | None = None
    active: bool


class DrainPhase(StrEnum):
    """Where the node's drain for one incident stands, once it runs (the wire adds ``requested`` before)."""

    RUNNING = "running"
    COMPLETE = "complete"  # the orchestrator finished the drain: nothing that had to go is left
    INCOMPLETE = "incomplete"  # something stayed (refused, blocked, cancelled, or the deadline passed)
    FAILED = "failed"  # the drain could not run at all


DrainPhaseName = Literal["requested", "running", "complete", "incomplete", "failed"]
OPEN_DRAIN_PHASES: tuple[DrainPhaseName, ...] = ("requested", "running")
"""A central drain not ended yet: ordered and waiting for a remediator, or running."""


class DrainOrder(_Body):
    """Body of ``POST /v1/permits/{id}/drain``: drain the permit's node for its incident, centrally."""

    deadline_s: Annotated[float, Field(gt=0, le=86_400)] = Field(
        default=900.0, description="The whole drain's deadline, in seconds (pods left then stay)."
    )


class DrainNewsItem(_Wire):
    """One line of a central drain's progress for the node's timeline: the drain's or the requeue's."""

    seq: int = Field(description="Position in the drain's news, from 1; the agent collects each once.")
    ok: bool
    detail: str
    requeue: bool = False


class CentralDrain(_Wire):
    """The drain (and requeue) the central remediator runs for one permit: its phase and its news."""

    permit_id: int
    node: str
    incident_id: str | None
    phase: DrainPhaseName = Field(
        description="requested (waits for the remediator), running, then complete, incomplete or failed."
    )
    detail: str = ""
    requested_at: datetime
    updated_at: datetime
    finished_at: datetime | None = Field(
        default=None,
        description="When the drain and its requeue both ended (the phase may end before the requeue).",
    )
    news: list[DrainNewsItem] = Field(default_factory=list)


class PermitRefusal(_Wire):
    """Why a permit was refused (HTTP 409)."""

    code: Literal[
        "breaker_tripped",
        "budget_exhausted",
        "cooldown",
        "unknown_node",
        "stale_node",
        "shared_cause",
        "settling",
    ]
    reason: str
    retry_after_s: float | None = Field(
        default=None, description="When asking again may succeed (a settling node), in seconds; else null."
    )


class BreakerStatus(_Wire):
    """The fleet circuit breaker: state, why and when it tripped, the last reset, recent transitions."""

    state: Literal["closed", "tripped"]
    tripped_at: datetime | None = None
    reason: str | None = None
    reset_at: datetime | None = None
    reset_by: str | None = None
    threshold_percent: float
    window_s: float
    recent_unhealthy: int = Field(description="Distinct nodes that turned unhealthy within the window.")
    gpu_nodes: int


class BreakerReset(_Body):
    """Body of ``POST /v1/breaker/reset``: why the breaker is closed (who: the authenticated caller)."""

    requested_by: Annotated[str, Field(max_length=128)] | None = Field(
        default=None, description=IGNORED_REQUESTER
    )
    reason: Annotated[str, Field(max_length=1000)] = ""


class IncidentSummary(_Wire):
    """One incident as the agent reported it; ``open`` until the agent's incident changes or clears."""

    id: str
    node: str
    started_at: datetime
    ended_at: datetime | None
    reasons: list[str]
    action: Action
    open: bool
    gpus: list[IncidentGpu] = Field(
        default_factory=list,
        description="The GPUs the findings that opened it name (empty when they are about the node).",
    )
    opened_by: list[Finding] = Field(
        default_factory=list, description="The findings that opened it, as first reported."
    )


class Event(_Wire):
    """One line of history: a state change, a finding, an action, a permit decision, a request. The same
    line repeated (a refused permit every pass while the breaker is tripped) is one event with a count."""

    id: int
    at: datetime = Field(description="When it happened (the first time, for a repeated one).")
    node: str | None
    incident_id: str | None
    kind: str
    message: str
    details: dict[str, Any] = Field(default_factory=dict)
    count: int = Field(default=1, description="How many times it happened, from at to last_at.")
    last_at: datetime | None = Field(default=None, description="The last time, when it happened again.")


class IncidentDetail(IncidentSummary):
    """An incident with its timeline of findings, actions and permit decisions, oldest first."""

    timeline: list[Event]


class NodeSummary(_Wire):
    """One node in the fleet list."""

    name: str
    state: str = Field(description="The reported state, or 'stale' when the node stopped reporting.")
    reported_state: NodeState
    status: Status
    action: Action
    orchestrator: str
    gpu_count: int
    last_report_at: datetime
    last_seq: int
    reports_accepted: int
    incident_id: str | None
    hold: str | None
    profile: str | None = Field(
        default=None, description="The node's behaviour profile (its agent's report says; none: not set)."
    )
    interval_s: float | None = Field(
        default=None, description="The agent's reading interval (what a replay steps its readings by)."
    )


class ReadingsSample(_Wire):
    """One sample of a node's GPU readings, as the aggregator's ring keeps it."""

    at: datetime = Field(description="When the report carrying them arrived.")
    incident_id: str | None = Field(default=None, description="The node's open incident then.")
    readings: dict[str, GpuReadings] = Field(description="Each GPU's readings, by UUID.")


class NodeDetail(NodeSummary):
    """One node with everything on-call needs: GPUs, findings, incident, requests, permit, timeline."""

    labels: dict[str, str]
    gpus: list[GpuSummary]
    findings: list[Finding]
    incident: IncidentSummary | None
    pending_requests: list[NodeRequest]
    permit: Permit | None
    timeline: list[Event]
    peer_findings: list[Finding] = Field(
        default_factory=list,
        description="Warnings from comparing the node's GPUs with their peers (same model and driver).",
    )
    recent_readings: list[ReadingsSample] = Field(
        default_factory=list,
        description="The node's last few GPU readings, oldest first (at most 8, at least 5 minutes apart; "
        "an incident's opening and closing always sampled): the readings around an incident.",
    )


class PeerOutlierView(_Wire):
    """One GPU far from its peers on one reading (``GET /v1/peers``)."""

    node: str
    gpu_index: int
    gpu_uuid: str
    model: str
    driver: str
    code: str = Field(description="PEER_PCIE_LINK, PEER_SM_CLOCK, PEER_POWER_LIMIT, PEER_TEMPERATURE, ...")
    evidence: str = Field(description="What a person reads: the GPU's value against its peers'.")
    value: float
    peer_value: float = Field(description="The peers' median (or most common value, for links and limits).")
    peers: int = Field(description="How many other GPUs it was compared with.")


class PeerGroupView(_Wire):
    """One GPU model and driver the comparison saw."""

    model: str
    driver: str
    gpus: int
    busy: int = Field(description="GPUs under load at their last report (clocks are compared only then).")
    judged: bool = Field(description="False when the group has fewer than min_peers other GPUs.")


class PeerReport(_Wire):
    """The answer to ``GET /v1/peers``."""

    generated_at: datetime
    min_peers: int
    outliers: list[PeerOutlierView]
    groups: list[PeerGroupView]


class ReliabilityGroup(_Wire):
    """The reliability of one group (GPU model, driver, pool or node) over the report's window."""

    key: str = Field(description="The model, driver, pool or node name.")
    nodes: int
    gpus: int
    incidents: int = Field(description="Incidents opened in the window.")
    mtbi_hours: float | None = Field(description="Mean time between incidents: node-hours / incidents.")
    mttr_hours: float | None = Field(description="Mean time to repair, fault to release (closed incidents).")
    open_incidents: int
    gpu_hours_out: float = Field(description="GPU-hours out of service (incidents of reset_gpu and worse).")
    gpu_hours_out_by_class: dict[str, float]
    gpu_hours_out_by_action: dict[str, float]
    reset_share: float | None = Field(description="Share of incidents that needed a GPU reset.")
    reboot_share: float | None
    replace_share: float | None
    health_ratio: float | None = Field(description="1 - GPU-hours out of service / GPU-hours observed.")


class ReliabilityReport(_Wire):
    """The answer to ``GET /v1/reliability`` and ``gpuhealth report``."""

    generated_at: datetime
    since: datetime
    by: str
    window_hours: float
    incidents: int
    gpu_hours_observed: float
    gpu_hours_out: float
    fleet_health_ratio: float | None = Field(
        description="1 - GPU-hours out of service / GPU-hours observed, over the whole fleet."
    )
    repeat_offenders: dict[str, int] = Field(description="Nodes with repeat_offender_incidents or more.")
    incidents_per_day: list[dict[str, Any]]
    groups: list[ReliabilityGroup]


class BudgetStatus(_Wire):
    """The permit budget now: its limit and how much of it is in use."""

    limit: int = Field(description="Nodes that may hold a permit at once right now.")
    in_use: int
    max_nodes: int
    max_percent: float


class FleetSummary(_Wire):
    """The answer to ``GET /v1/fleet`` and ``gpuhealth status``."""

    generated_at: datetime
    nodes: int
    gpus: int
    by_state: dict[str, int]
    open_incidents: int
    quarantined: list[str] = Field(description="Nodes reported quarantined or held for a human.")
    stale: list[str]
    breaker: BreakerStatus
    budget: BudgetStatus
    profiles: dict[str, int] = Field(
        default_factory=dict, description="Nodes per behaviour profile (nodes that report one)."
    )


class AuditEntry(_Wire):
    """One mutating call: who (the authenticated principal), in which role, did what, to what, from where."""

    id: int
    at: datetime
    actor: str
    role: str
    method: str = Field(description="How the actor authenticated: token_file, shared_token or anonymous.")
    action: str
    target: str | None
    client: str = Field(description="The client address the call came from.")
    details: dict[str, Any] = Field(default_factory=dict)


class NodeForgotten(_Wire):
    """The answer to ``DELETE /v1/nodes/{node}``: what was removed with the node."""

    node: str
    incidents: int
    permits: int
    requests: int


class ProblemDetail(_Wire):
    """Body of every 4xx answer other than FastAPI's own 422."""

    detail: str


class GridNode(_Wire):
    """One node of the fleet page's grid: as little as the grid draws, so 10,000 nodes stay a small answer."""

    name: str
    state: str = Field(description="The shown state: the reported one, or 'stale'.")
    zone: str | None = Field(default=None, description="The node's zone label, when its agent reports one.")
    pool: str | None = Field(default=None, description="The node's pool label, when its agent reports one.")
    gpus: str = Field(
        description="One letter per GPU by index, its worst status: o ok, w warn, f fail (or the GPU an open "
        "incident is about, after its finding cleared), u unknown."
    )
    incident_id: str | None = None


class WhoAmI(_Wire):
    """The caller as the aggregator authenticated it (``GET /v1/whoami``)."""

    name: str
    role: str = Field(description="agent, viewer, operator or admin.")
    node: str | None = Field(default=None, description="For an agent: the only node it may act for.")
