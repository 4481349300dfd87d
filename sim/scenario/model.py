"""Scenario format v1 (``schema: gpuhealth.scenario/v1``): frozen, strict models.

A scenario names a fleet (size, GPUs, the aggregator's and the agents' knobs), the workloads to start, a
timeline of injected faults and the expectations checked while it plays. docs/scenarios.md documents every
field; ``docs/schemas/scenario.v1.json`` is generated from these models
(``python -m gpuhealth.schemas --write``).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema, model_validator

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, None: 1.0}


def _seconds(value: Any) -> Any:
    """``5s``, ``1.5s``, ``250ms``, ``2m`` or a plain number of seconds -> float seconds."""
    if isinstance(value, bool):
        raise ValueError("a duration is a number of seconds or a string such as '5s', '250ms', '2m'")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        match = _DURATION.match(value)
        if match is None:
            raise ValueError(f"{value!r} is not a duration (write e.g. '5s', '250ms', '2m' or 5)")
        return float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    return value


Duration = Annotated[
    float,
    BeforeValidator(_seconds),
    Field(ge=0),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "number", "minimum": 0},
                {"type": "string", "pattern": r"^\s*\d+(\.\d+)?\s*(ms|s|m)?\s*$"},
            ],
            "description": "Seconds: a number, or a string with a unit (ms, s, m), e.g. '5s'.",
        }
    ),
]


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=False)


# --- fleet ---------------------------------------------------------------------------------------------


class AggregatorKnobs(_Strict):
    """The aggregator's remediation budget, circuit breaker and alert delivery, for this scenario."""

    budget_max_nodes: int = Field(default=2, ge=0, description="Most nodes holding a permit at once.")
    budget_max_percent: float = Field(default=100.0, ge=0, le=100, description="Same, as % of GPU nodes.")
    budget_min_nodes: int = Field(default=1, ge=0, description="Budget floor for a small fleet.")
    breaker_threshold_percent: float = Field(
        default=20.0, ge=0, le=100, description="Breaker trips at this % of nodes turned unhealthy."
    )
    breaker_window_s: Duration = Field(default=600.0, description="The breaker's sliding window.")
    breaker_min_nodes: int = Field(default=3, ge=1, description="The breaker never trips on fewer nodes.")
    cooldown_s: Duration = Field(default=3600.0, description="No new permit for a node this long after one.")
    permit_settle_s: Duration = Field(
        default=2.0, description="A node's first permit waits until it has been unhealthy this long."
    )
    alert_poll_s: Duration = Field(default=0.2, description="How often alerts are looked for and sent.")
    stale_after_intervals: float = Field(
        default=10.0, gt=0, description="A node silent for this many of its report intervals is stale."
    )


class AgentKnobs(_Strict):
    """Agent timing, scaled down so that a scenario plays in about a minute."""

    interval_s: Duration = Field(default=1.0, description="Seconds between two polled snapshots.")
    polled_bad_readings: int = Field(default=3, ge=1, description="Bad readings before a polled signal acts.")
    clean_readings_to_recover: int = Field(default=3, ge=1, description="Clean readings before recovery.")
    min_dwell_s: Duration = Field(default=600.0, description="Seconds an incident stays open once clean.")
    heartbeat_s: Duration = Field(default=5.0, description="Seconds between reports when nothing changed.")
    permit_retry_s: Duration = Field(default=2.0, description="Seconds before asking again for a permit.")
    drain: bool = Field(default=True, description="Drain (behind a permit) when a node leaves service.")
    drain_deadline_s: Duration = Field(default=30.0, description="Longest a drain may take.")
    partial_drain: bool = Field(
        default=False,
        description="A drain for a fault of single GPUs evicts only the pods on them (each node's kubelet "
        "PodResources service emulated on a unix socket); Kubernetes only.",
    )
    recovery: bool = Field(
        default=False, description="After the drain, reset or reboot (simulated), validate and release."
    )
    recovery_backoff_s: Duration = Field(default=2.0, description="Seconds before retrying a failed attempt.")
    validation_clean_readings: int = Field(
        default=3, ge=1, description="Clean readings in state testing that release a recovered node."
    )
    reboot_deadline_s: Duration = Field(
        default=20.0, description="Seconds a node has to come back after its reboot request."
    )


# The largest fleet a scenario or the fleet-scale benchmark may ask for (the benchmark's largest size).
MAX_FLEET_NODES = 10_000


class Fleet(_Strict):
    """The simulated fleet: GPU nodes with fake GPUs, one agent each, and one aggregator."""

    nodes: int = Field(default=16, ge=1, le=MAX_FLEET_NODES, description="GPU nodes (named gpu-node-NN).")
    gpus_per_node: int = Field(default=8, ge=1, le=16, description="Fake GPUs per node.")
    gpu_profile: Literal["h100_sxm", "h200_sxm", "a100_pcie", "v100_sxm2"] = Field(
        default="h100_sxm", description="Fake GPU model (sim/fakes/profiles.py)."
    )
    ib_ports: int = Field(
        default=0,
        ge=0,
        le=32,
        description="Fake InfiniBand ports per node (mlx5_0 ..., one each, all up); 0: no sysfs tree.",
    )
    aggregator: AggregatorKnobs = Field(default_factory=AggregatorKnobs)
    agent: AgentKnobs = Field(default_factory=AgentKnobs)


# --- workloads -----------------------------------------------------------------------------------------


class TrainingJob(_Strict):
    """A JobSet gang: one pod taking every GPU on each of ``nodes`` nodes."""

    kind: Literal["jobset"] = Field(default="jobset", description="The training job's kind.")
    name: str = Field(default="llm", pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", description="Its name.")
    nodes: int = Field(default=4, ge=1, description="Nodes (one gang pod each).")
    pdb_min_available: int | None = Field(
        default=None, ge=0, description="A PodDisruptionBudget over its pods with this minAvailable."
    )


class InferenceService(_Strict):
    """Inference replicas that each take ``gpus`` GPUs (a Job whose pods keep running)."""

    name: str = Field(default="inference", pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    replicas: int = Field(default=2, ge=1, description="Pods.")
    gpus: int = Field(default=1, ge=1, description="GPUs per pod.")


class Workloads(_Strict):
    """What runs on the fleet before the first fault."""

    training: TrainingJob | None = Field(default=None, description="The training job (optional).")
    inference: InferenceService | None = Field(default=None, description="Inference pods (optional).")
    namespace: str = Field(default="demo", pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


# --- targets -------------------------------------------------------------------------------------------

Role = Literal["training", "inference", "idle"]


class Target(_Strict):
    """Which node(s): by ``node`` name, by ``role`` (resolved when first used), or the nodes an earlier
    ``injection`` (by its name) hit. ``index`` and ``count`` pick from the role's nodes, sorted by name."""

    node: str | None = Field(default=None, description="A node's name.")
    role: Role | None = Field(
        default=None,
        description="training / inference: nodes running that workload; idle: nodes running neither.",
    )
    injection: str | None = Field(default=None, description="The nodes the named injection hit.")
    index: int = Field(default=0, ge=0, description="First of the role's nodes to take.")
    count: int = Field(default=1, ge=1, description="How many of the role's nodes to take.")
    fraction: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description="At least this share of the fleet (a burst that grows with --nodes); count is the floor.",
    )

    @model_validator(mode="after")
    def _exactly_one(self) -> Target:
        given = [key for key in ("node", "role", "injection") if getattr(self, key) is not None]
        if len(given) != 1:
            raise ValueError("a target names exactly one of node, role or injection")
        return self

    def describe(self) -> str:
        if self.node is not None:
            return self.node
        if self.injection is not None:
            return f"the node(s) of {self.injection}"
        if self.fraction is not None:
            return f"{self.fraction:.0%} of the fleet ({self.role} nodes from #{self.index})"
        many = f"{self.count} " if self.count > 1 else ""
        return f"{many}{self.role} node{'s' if self.count > 1 else ''} #{self.index}"


# --- faults --------------------------------------------------------------------------------------------


class XidFault(_Strict):
    kind: Literal["xid"] = "xid"
    xid: int = Field(ge=1, description="The XID number (NVIDIA's catalogue).")
    message: str | None = None


class EccDbeFault(_Strict):
    kind: Literal["ecc_dbe"] = "ecc_dbe"
    volatile: int = Field(default=1, ge=0, description="Volatile uncorrectable ECC count.")


class EccSbeFault(_Strict):
    kind: Literal["ecc_sbe"] = "ecc_sbe"
    volatile: int = Field(default=1, ge=0, description="Volatile correctable ECC count.")


class RowRemapFault(_Strict):
    kind: Literal["row_remap"] = "row_remap"
    pending: bool | None = None
    failure: bool | None = None
    uncorrectable: int | None = Field(default=None, ge=0)
    correctable: int | None = Field(default=None, ge=0)


class RetiredPagesFault(_Strict):
    kind: Literal["retired_pages"] = "retired_pages"
    double_bit: int | None = Field(default=None, ge=0)
    single_bit: int | None = Field(default=None, ge=0)
    pending: bool | None = None


class LoseGpuFault(_Strict):
    kind: Literal["lose_gpu"] = "lose_gpu"
    emit_xid: bool = Field(default=True, description="XID 79 first, as the driver reports it.")


class RemoveGpuFault(_Strict):
    kind: Literal["remove_gpu"] = "remove_gpu"


class DegradePcieFault(_Strict):
    kind: Literal["degrade_pcie"] = "degrade_pcie"
    width: int = Field(default=8, ge=1)
    gen: int | None = Field(default=None, ge=1)


class PcieReplaysFault(_Strict):
    kind: Literal["pcie_replays"] = "pcie_replays"
    count: int = Field(ge=1)


class NvlinkDownFault(_Strict):
    kind: Literal["nvlink_down"] = "nvlink_down"
    link: int = Field(default=0, ge=0)


class NvlinkErrorsFault(_Strict):
    kind: Literal["nvlink_errors"] = "nvlink_errors"
    link: int = Field(default=0, ge=0)
    replay: int = Field(default=0, ge=0)
    recovery: int = Field(default=0, ge=0)
    crc: int = Field(default=0, ge=0)


class ThrottleFault(_Strict):
    kind: Literal["throttle"] = "throttle"
    reasons: list[
        Literal["sw_power_cap", "hw_slowdown", "sw_thermal", "hw_thermal", "hw_power_brake", "sync_boost"]
    ] = Field(min_length=1, description="Clocks event reasons held.")


class RecoveryActionFault(_Strict):
    kind: Literal["recovery_action"] = "recovery_action"
    action: int = Field(ge=0, le=4, description="0 none, 1 reset, 2 reboot, 3 drain P2P, 4 drain and reset.")


class TemperatureFault(_Strict):
    kind: Literal["temperature"] = "temperature"
    gpu_c: int | None = None
    memory_c: int | None = None


class IbPortDownFault(_Strict):
    """InfiniBand port ``port`` (device mlx5_<port>) goes down and stays down."""

    kind: Literal["ib_port_down"] = "ib_port_down"
    port: int = Field(default=0, ge=0, description="Which port: the node's mlx5_<port>.")
    phys_state: Literal["disabled", "polling"] = Field(
        default="disabled", description="Physical state shown: 3: Disabled or 2: Polling (no peer)."
    )


class IbFlapFault(_Strict):
    """The port's link goes down and up ``times`` times (link_downed rises; the port ends up)."""

    kind: Literal["ib_flap"] = "ib_flap"
    port: int = Field(default=0, ge=0, description="Which port: the node's mlx5_<port>.")
    times: int = Field(default=1, ge=1, description="Link downs in this play.")


class IbErrorsFault(_Strict):
    """A burst of one error counter on the port."""

    kind: Literal["ib_errors"] = "ib_errors"
    port: int = Field(default=0, ge=0, description="Which port: the node's mlx5_<port>.")
    counter: Literal[
        "symbol_error",
        "link_error_recovery",
        "port_rcv_errors",
        "local_link_integrity_errors",
        "excessive_buffer_overrun_errors",
        "port_xmit_discards",
    ] = Field(default="symbol_error", description="The counter that rises.")
    count: int = Field(default=1000, ge=1, description="By how much.")


class IbDeviceGoneFault(_Strict):
    """The RDMA device vanishes from sysfs (HCA off the bus, driver unbound)."""

    kind: Literal["ib_device_gone"] = "ib_device_gone"
    port: int = Field(default=0, ge=0, description="Which device: the node's mlx5_<port>.")


class FabricManagerFault(_Strict):
    """The GPU's NVLink fabric registration failed, or never finished (Fabric Manager down)."""

    kind: Literal["fabric_manager"] = "fabric_manager"
    state: Literal["failed", "not_started", "in_progress"] = Field(
        default="failed", description="failed: completed with an error; else the state it is stuck in."
    )


class ClearFault(_Strict):
    """The GPU repaired (what a reset clears, back on the bus, full PCIe link) and the node's IB ports up."""

    kind: Literal["clear"] = "clear"


class ApiOutageFault(_Strict):
    """The orchestrator's API server answers nothing for ``seconds``."""

    kind: Literal["api_outage"] = "api_outage"
    seconds: Duration = Field(description="How long the API is down.")


class AggregatorOutageFault(_Strict):
    """The aggregator is down for ``seconds`` (agents still mark and taint, but get no permit)."""

    kind: Literal["aggregator_outage"] = "aggregator_outage"
    seconds: Duration = Field(description="How long the aggregator is down.")


GpuFault = (
    XidFault
    | EccDbeFault
    | EccSbeFault
    | RowRemapFault
    | RetiredPagesFault
    | LoseGpuFault
    | RemoveGpuFault
    | DegradePcieFault
    | PcieReplaysFault
    | NvlinkDownFault
    | NvlinkErrorsFault
    | ThrottleFault
    | RecoveryActionFault
    | TemperatureFault
    | IbPortDownFault
    | IbFlapFault
    | IbErrorsFault
    | IbDeviceGoneFault
    | FabricManagerFault
    | ClearFault
)
Fault = Annotated[GpuFault | ApiOutageFault | AggregatorOutageFault, Field(discriminator="kind")]
FLEET_FAULTS = (ApiOutageFault, AggregatorOutageFault)


class Repeat(_Strict):
    """Play the injection ``times`` times in all, ``every`` seconds apart."""

    every: Duration = Field(description="Seconds between two plays.")
    times: int = Field(ge=1, le=1000, description="Plays in all (the first included).")


class Injection(_Strict):
    """One timed fault."""

    at: Duration = Field(description="When, from the start of the timeline.")
    name: str | None = Field(default=None, description="Lets expectations target the nodes it hit.")
    target: Target | None = Field(default=None, description="Node(s) to break; not for fleet faults.")
    gpu: int = Field(default=0, ge=0, description="Which GPU of the node.")
    fault: Fault
    clear_after: Duration | None = Field(default=None, description="Repair the GPU this long after.")
    repeat: Repeat | None = Field(default=None, description="Play it again (a flapping signal).")

    @model_validator(mode="after")
    def _target_fits_fault(self) -> Injection:
        fleet_fault = isinstance(self.fault, FLEET_FAULTS)
        if fleet_fault and self.target is not None:
            raise ValueError(f"a {self.fault.kind} fault has no target")
        if not fleet_fault and self.target is None:
            raise ValueError(f"a {self.fault.kind} fault needs a target")
        if (
            self.target is not None
            and self.target.injection is not None
            and self.target.injection == self.name
        ):
            raise ValueError("an injection cannot target its own nodes")
        return self

    def label(self) -> str:
        return self.name or f"{self.fault.kind}@{self.at:g}s"


# --- expectations --------------------------------------------------------------------------------------


class Window(_Strict):
    """From ``start`` to ``end`` seconds of the timeline."""

    start: Duration
    end: Duration

    @model_validator(mode="after")
    def _ordered(self) -> Window:
        if self.end < self.start:
            raise ValueError("a window's end comes before its start")
        return self


class _Expectation(_Strict):
    name: str = Field(min_length=1, description="Shown in the summary.")
    by: Duration | None = Field(default=None, description="Must hold at some moment no later than this.")
    during: Window | None = Field(default=None, description="Must hold at every look within this window.")
    after: Duration | None = Field(
        default=None,
        description="With 'by': not looked at before this moment (a state that also held before the fault, "
        "e.g. healthy again after a recovery).",
    )

    @model_validator(mode="after")
    def _one_time(self) -> _Expectation:
        if (self.by is None) == (self.during is None):
            raise ValueError("an expectation has exactly one of 'by' or 'during'")
        if self.after is not None and (self.by is None or self.after > self.by):
            raise ValueError("'after' goes with 'by' and comes before it")
        return self

    @property
    def first_look(self) -> float:
        """The first moment the expectation is looked at."""
        return self.during.start if self.during is not None else self.after or 0.0

    @property
    def deadline(self) -> float:
        return self.by if self.by is not None else self.during.end if self.during is not None else 0.0


NodeStateName = Literal["healthy", "degraded", "unhealthy", "unknown", "quarantined", "testing"]


class NodeStateExpectation(_Expectation):
    """The node label ``gpuhealth.io/state`` of every targeted node is one of ``states``."""

    kind: Literal["node_state"] = "node_state"
    target: Target
    states: list[NodeStateName] = Field(min_length=1)


class TaintExpectation(_Expectation):
    """Our taint is (or is not) on every targeted node, with ``value`` when given."""

    kind: Literal["taint"] = "taint"
    target: Target
    present: bool = True
    value: str | None = Field(default=None, description="The taint's value (the action), e.g. reboot.")


class CordonedExpectation(_Expectation):
    kind: Literal["cordoned"] = "cordoned"
    target: Target
    cordoned: bool = True


class DrainedExpectation(_Expectation):
    """Every targeted node runs no workload pod (DaemonSet pods aside)."""

    kind: Literal["drained"] = "drained"
    target: Target
    drained: bool = True


class JobRestartedExpectation(_Expectation):
    """The training job restarted at least ``restarts`` times and all its pods run on healthy nodes."""

    kind: Literal["job_restarted"] = "job_restarted"
    restarts: int = Field(default=1, ge=0, description="At least this many restarts.")
    exactly: bool = Field(default=False, description="Exactly ``restarts`` restarts, not at least.")
    running_on_healthy: bool = Field(default=True, description="Every pod Running on an untainted node.")


class BreakerExpectation(_Expectation):
    kind: Literal["breaker"] = "breaker"
    state: Literal["closed", "tripped"]


class PermitsRefusedExpectation(_Expectation):
    """The aggregator refused at least ``at_least`` permits (to the targeted nodes, when given)."""

    kind: Literal["permits_refused"] = "permits_refused"
    target: Target | None = None
    at_least: int = Field(default=1, ge=0)


class AlertExpectation(_Expectation):
    """The alert receiver got at least ``at_least`` alerts of ``alert`` kind (for the targeted nodes)."""

    kind: Literal["alert"] = "alert"
    alert: str = Field(description="Alert kind, e.g. incident_opened, breaker_tripped.")
    target: Target | None = None
    at_least: int = Field(default=1, ge=0)


class MaxDrainedExpectation(_Expectation):
    """No more than ``nodes`` nodes were cordoned for a drain (no mass drain)."""

    kind: Literal["max_drained"] = "max_drained"
    nodes: int = Field(ge=0)


class WorkloadPodsExpectation(_Expectation):
    """Every targeted node runs ``count`` workload pods (``at_least``: that many or more); with ``elsewhere``,
    the other nodes together do. A partial drain: the hit node keeps seven, one runs elsewhere."""

    kind: Literal["workload_pods"] = "workload_pods"
    target: Target
    count: int = Field(ge=0, description="Workload pods bound and not terminating.")
    at_least: bool = Field(default=False, description="That many or more, not exactly.")
    elsewhere: bool = Field(default=False, description="Count on every node the target does not name.")


class TimelineExpectation(_Expectation):
    """The aggregator's history of every targeted node holds each of ``actions`` with result ok, in this
    order (other actions may come between): e.g. drain, reset, validate for a recovered node."""

    kind: Literal["timeline"] = "timeline"
    target: Target
    actions: list[str] = Field(
        min_length=1,
        description="Action names as the agent reports them: drain, requeue, reset, reboot, validate.",
    )


Expectation = Annotated[
    NodeStateExpectation
    | TaintExpectation
    | CordonedExpectation
    | DrainedExpectation
    | JobRestartedExpectation
    | BreakerExpectation
    | PermitsRefusedExpectation
    | AlertExpectation
    | MaxDrainedExpectation
    | WorkloadPodsExpectation
    | TimelineExpectation,
    Field(discriminator="kind"),
]


class Scenario(_Strict):
    """One scenario file."""

    schema_: Literal["gpuhealth.scenario/v1"] = Field(alias="schema", description="Format and version.")
    name: str = Field(min_length=1)
    description: str = ""
    orchestrator: Literal["kubernetes", "nomad"] = Field(
        default="kubernetes", description="The emulated orchestrator the fleet runs on."
    )
    fleet: Fleet = Field(default_factory=Fleet)
    workloads: Workloads = Field(default_factory=Workloads)
    timeline: list[Injection] = Field(default_factory=list)
    expectations: list[Expectation] = Field(default_factory=list)
    quick_nodes: int | None = Field(
        default=None, ge=1, description="Fleet size for a quick run (CI); unset: the same fleet."
    )

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    @model_validator(mode="after")
    def _references_resolve(self) -> Scenario:
        names = [i.name for i in self.timeline if i.name is not None]
        if len(set(names)) != len(names):
            raise ValueError("injection names must be unique")
        for target in self._targets():
            if target.injection is not None and target.injection not in names:
                raise ValueError(f"target names unknown injection {target.injection!r}")
            if target.node is not None and not _fleet_has(target.node, self.fleet.nodes):
                raise ValueError(f"target names node {target.node!r}, not in a fleet of {self.fleet.nodes}")
        return self

    def _targets(self) -> list[Target]:
        found = [i.target for i in self.timeline if i.target is not None]
        found += [t for e in self.expectations if (t := getattr(e, "target", None)) is not None]
        return found

    @property
    def length_s(self) -> float:
        """The timeline's last moment: the last injection (with its repeats and repair) or deadline."""
        ends = [e.deadline for e in self.expectations]
        for injection in self.timeline:
            last = injection.at + (
                injection.repeat.every * (injection.repeat.times - 1) if injection.repeat else 0.0
            )
            ends.append(last + (injection.clear_after or 0.0))
        return max(ends, default=0.0)

    def on(self, orchestrator: Literal["kubernetes", "nomad"]) -> Scenario:
        """The same scenario played on another emulated orchestrator."""
        return self.model_copy(update={"orchestrator": orchestrator})

    def resized(self, nodes: int) -> Scenario:
        """The same scenario on a fleet of ``nodes`` nodes."""
        fleet = self.fleet.model_copy(update={"nodes": nodes})
        return self.model_copy(update={"fleet": fleet})

    def dilated(self, factor: float) -> Scenario:
        """The same story told ``factor`` times slower: every time of the scenario multiplied by ``factor``.

        Scaled: injections (``at``, ``clear_after``, ``repeat.every``, outage ``seconds``), expectations
        (``by``, ``after``, ``during``) and the knobs that are scenario times (agent interval, heartbeat,
        permit retry, drain and reboot deadlines, recovery backoff, dwell; breaker window, cooldown). Not
        scaled: counts (readings, nodes, repeats) and ``alert_poll_s``, the delivery cadence of the alerts,
        which only bounds how late an alert may be seen. ``dilated(1)`` is the scenario unchanged.
        """
        if factor <= 0:
            raise ValueError("a time scale is a positive factor")
        if factor == 1:
            return self
        return self.model_copy(
            update={
                "fleet": _dilated_fleet(self.fleet, factor),
                "timeline": [_dilated_injection(i, factor) for i in self.timeline],
                "expectations": [_dilated_expectation(e, factor) for e in self.expectations],
            }
        )


_AGENT_TIMES = (
    "interval_s",
    "min_dwell_s",
    "heartbeat_s",
    "permit_retry_s",
    "drain_deadline_s",
    "recovery_backoff_s",
    "reboot_deadline_s",
)
_AGGREGATOR_TIMES = ("breaker_window_s", "cooldown_s", "permit_settle_s")


def _scaled(model: _Strict, names: tuple[str, ...], factor: float) -> dict[str, float]:
    """``names``' values of ``model`` times ``factor``, leaving out the unset (None) ones."""
    values = {name: getattr(model, name) for name in names}
    return {name: value * factor for name, value in values.items() if value is not None}


def _dilated_fleet(fleet: Fleet, factor: float) -> Fleet:
    agent = fleet.agent.model_copy(update=_scaled(fleet.agent, _AGENT_TIMES, factor))
    aggregator = fleet.aggregator.model_copy(update=_scaled(fleet.aggregator, _AGGREGATOR_TIMES, factor))
    return fleet.model_copy(update={"agent": agent, "aggregator": aggregator})


def _dilated_injection(injection: Injection, factor: float) -> Injection:
    update: dict[str, Any] = _scaled(injection, ("at", "clear_after"), factor)
    if injection.repeat is not None:
        update["repeat"] = injection.repeat.model_copy(update={"every": injection.repeat.every * factor})
    if isinstance(injection.fault, FLEET_FAULTS):
        update["fault"] = injection.fault.model_copy(update={"seconds": injection.fault.seconds * factor})
    return injection.model_copy(update=update)


def _dilated_expectation(expectation: Expectation, factor: float) -> Expectation:
    update: dict[str, Any] = _scaled(expectation, ("by", "after"), factor)
    if expectation.during is not None:
        window = expectation.during
        update["during"] = Window(start=window.start * factor, end=window.end * factor)
    return expectation.model_copy(update=update)


def node_name(index: int, fleet_size: int) -> str:
    """The emulated fleet's name for node ``index`` (``sim.kube.fleet.build_fleet`` numbering)."""
    width = max(len(str(fleet_size - 1)), 1)
    return f"gpu-node-{index:0{width}d}" if width > 1 else f"gpu-node-{index}"


def _fleet_has(name: str, fleet_size: int) -> bool:
    return any(node_name(i, fleet_size) == name for i in range(fleet_size))


def scenario_schema() -> dict[str, Any]:
    """The scenario format's JSON Schema (docs/schemas/scenario.v1.json, through ``gpuhealth.schemas``)."""
    return Scenario.model_json_schema(by_alias=True, mode="validation")
