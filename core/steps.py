"""Plan steps and observed node facts: the seam between the pure planner and the executors.

``remediation/plan/planner.py`` compares the desired state (from ``NodeHealth`` and the policy) with the
observed ``NodeFacts`` and returns only the steps that change something, so a healthy, unchanging node
produces no steps at all and the executor makes no API writes. Executors (the ``remediation/kubernetes/``
package, later ``remediation/nomad/api.py``) turn each step into orchestrator calls and are the only code that
talks to one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from core.findings import Action

ConditionStatus = Literal["True", "False", "Unknown"]
TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


@dataclass(frozen=True)
class NodeFacts:
    """What the executor last observed on the node (from its watch), in orchestrator-neutral terms."""

    exists: bool = True
    condition_status: ConditionStatus | None = None  # our GPUHealthy condition; None when absent
    condition_reason: str | None = None
    condition_message: str | None = None
    state_label: str | None = None  # gpuhealth.io/state
    taint_value: str | None = None  # value of our gpuhealth.io/unhealthy taint; None when absent
    taint_effect: TaintEffect | None = None
    unschedulable: bool = False  # spec.unschedulable (cordoned), whoever set it
    cordoned_by_us: bool = False  # annotation gpuhealth.io/cordoned == "true"
    incident_annotation: str | None = None  # gpuhealth.io/incident
    manual_release: str | None = (
        None  # gpuhealth.io/manual-release (incident id or timestamp a human released)
    )
    drained_incident: str | None = None  # the incident this executor last drained for (running or done)
    # The GPUs the node's metadata names as unhealthy (Nomad's gpuhealth.unhealthy_gpus), sorted; None when
    # the executor does not publish them (Kubernetes), so the planner never plans SetUnhealthyGpus there.
    unhealthy_gpus: tuple[str, ...] | None = None
    # Recovery (agent/recovery/): the incident whose drain has ended (complete or not), and this boot's id.
    drain_finished_incident: str | None = None
    boot_id: str | None = None  # None when the boot id cannot be read (then no reboot is ever requested)
    validation_running: str | None = None  # the incident whose validation runs in the background now
    # Per-GPU quarantine (Kubernetes DRA, docs/gpu-quarantine.md): the UUIDs of this node's GPUs that the DRA
    # driver publishes as devices, sorted; None when the executor offers no device taints (off, no DRA,
    # Nomad, or the ResourceSlices unreadable), so the planner keeps to the node taint.
    dra_gpus: tuple[str, ...] | None = None
    # Our DeviceTaintRules on this node's devices: the GPUs they select (sorted), and their common taint
    # value and effect (None when there is none, or when the rules disagree: the next SetDeviceTaints fixes).
    device_taint_gpus: tuple[str, ...] = ()
    device_taint_value: str | None = None
    device_taint_effect: TaintEffect | None = None


@dataclass(frozen=True)
class SetCondition:
    """Set the GPUHealthy condition (status subresource, merge by type; lastTransitionTime only on change)."""

    status: ConditionStatus
    reason: str
    message: str


@dataclass(frozen=True)
class SetStateLabel:
    state: str


@dataclass(frozen=True)
class SetTaint:
    """Add or update our taint (value = the incident's action)."""

    value: str
    effect: TaintEffect = "NoSchedule"


@dataclass(frozen=True)
class RemoveTaint:
    """Remove our taint only; every other taint stays."""


@dataclass(frozen=True)
class Cordon:
    """Set spec.unschedulable and annotate gpuhealth.io/cordoned=true (we did it)."""


@dataclass(frozen=True)
class Uncordon:
    """Clear spec.unschedulable and our annotation — only ever planned when we cordoned."""


@dataclass(frozen=True)
class SetIncidentAnnotation:
    incident_id: str | None  # None removes the annotation


@dataclass(frozen=True)
class SetDeviceTaints:
    """Make our DeviceTaintRules select exactly ``gpus`` (UUIDs of DRA devices of this node), each with
    taint ``gpuhealth.io/unhealthy=<value>:<effect>``: missing rules are created, changed ones updated, ours
    for other GPUs deleted. Never planned where ``NodeFacts.dra_gpus`` is None."""

    gpus: tuple[str, ...]
    value: str
    effect: TaintEffect = "NoSchedule"


@dataclass(frozen=True)
class RemoveDeviceTaints:
    """Delete every DeviceTaintRule of ours on this node's devices; nobody else's."""


@dataclass(frozen=True)
class SetUnhealthyGpus:
    """Publish the UUIDs of the GPUs the open incident involves (empty: none); Nomad node metadata."""

    uuids: tuple[str, ...]


@dataclass(frozen=True)
class EmitEvent:
    """A Kubernetes Event on the node. ``key`` makes it idempotent across restarts (same key, one Event)."""

    reason: str  # GPUHealth* (e.g. GPUHealthUnhealthy, GPUHealthRecovered, GPUHealthTainted)
    message: str
    key: str
    type: Literal["Normal", "Warning"] = "Warning"


@dataclass(frozen=True)
class RequestPermit:
    """Anything beyond mark + taint (drain, requeue, reset, reboot) needs a permit from the aggregator.
    ``action``: the incident's remedy the permit is asked for (a reboot incident's drain asks for
    ``reboot``, so the fleet's history says what the node is taken out for); None: what ``purpose`` means."""

    purpose: str
    incident_id: str
    action: Action | None = None


@dataclass(frozen=True)
class Drain:
    """Drain the node (cordon, evict per the drain policy), then requeue the jobs of the evicted pods.

    Always planned behind ``RequestPermit("drain", incident_id)``; the executor runs it in the background
    and ``apply`` answers at once. Named ``Drain`` so the aggregator's timeline shows the action ``drain``.
    """

    incident_id: str
    deadline_s: float
    # A partial drain (policy.partial_drain): evict only the pods bound to these GPUs (UUIDs), without a
    # cordon; empty drains the whole node. The executor falls back to the whole node when it cannot read
    # which pods hold which GPU.
    gpus: tuple[str, ...] = ()


@dataclass(frozen=True)
class Requeue:
    """Never planned: the record under which the loop reports the requeue that followed a drain."""

    incident_id: str


@dataclass(frozen=True)
class Reset:
    """Reset the incident's GPUs (``gpus``: UUIDs; empty means every GPU) on the node itself, once the
    drain ended. Planned behind ``RequestPermit("reset", incident_id)``; ``attempt`` counts from 1."""

    incident_id: str
    gpus: tuple[str, ...]
    attempt: int


@dataclass(frozen=True)
class Reboot:
    """Ask for a node reboot (kured's sentinel file or a configured command), once the drain ended.

    ``boot_id`` is the boot id before the request: a different one later means the node came back.
    Planned behind ``RequestPermit("reboot", incident_id)``."""

    incident_id: str
    boot_id: str
    attempt: int


@dataclass(frozen=True)
class Validate:
    """Check the GPUs after a reset or a reboot (``dcgmi diag`` when available); when it passes, the node
    is ``testing`` until enough clean readings release it. Needs no permit: it takes nothing away."""

    incident_id: str
    after: Literal["reset", "reboot"]  # what is being validated
    start: int = 1  # which start of this incident's diagnostic this would be (restarts count; see recovery)


@dataclass(frozen=True)
class WithdrawReboot:
    """The reboot asked for by ``attempt`` did not happen before the deadline (no kured, a command that was
    ignored): withdraw the request (kured's sentinel) and count the attempt as failed."""

    incident_id: str
    attempt: int
    waited_s: float  # the deadline that passed, for the timeline


Step = (
    SetCondition
    | SetStateLabel
    | SetTaint
    | RemoveTaint
    | Cordon
    | Uncordon
    | SetIncidentAnnotation
    | SetDeviceTaints
    | RemoveDeviceTaints
    | SetUnhealthyGpus
    | EmitEvent
    | RequestPermit
    | Drain
    | Requeue
    | Reset
    | Reboot
    | Validate
    | WithdrawReboot
)


@dataclass(frozen=True)
class StepResult:
    step: Step
    ok: bool
    detail: str = ""
    attempts: int = 1
    # Started, not finished: the outcome comes with a later pass (a validation running in the background).
    pending: bool = False
    # Decided and recorded only: a profile in shadow mode does not write it (remediation/plan/shadow.py).
    shadow: bool = False


@dataclass
class ApplyReport:
    """What one executor pass did, for logs, metrics and the aggregator's timeline."""

    results: list[StepResult] = field(default_factory=list)

    @property
    def writes(self) -> int:
        return sum(1 for result in self.results if result.ok and not result.shadow)
