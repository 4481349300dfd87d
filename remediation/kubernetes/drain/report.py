"""What a drain did, per pod and in total: the record the aggregator's timeline takes (plain JSON)."""

from __future__ import annotations

from collections import Counter
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field


class PodOutcome(StrEnum):
    """How one pod left (or did not leave) the node."""

    EVICTED = "evicted"  # eviction accepted and the pod is gone (or replaced by a new UID)
    GONE = "gone"  # it went by itself (finished, deleted, or 404/UID changed at eviction time)
    SKIPPED = "skipped"  # mirror, DaemonSet or agent pod: left on the node on purpose
    REFUSED = "refused"  # emptyDir or unmanaged pod the policy does not allow to evict
    BLOCKED = "blocked"  # a PodDisruptionBudget refused it (429) until the deadline
    FAILED = "failed"  # an error that retrying would not fix (500 several PDBs, 403, ...)
    TIMED_OUT = "timed-out"  # evicted, but still on the node when its deadline passed
    NOT_ATTEMPTED = "not-attempted"  # evictable, but the drain was refused over other pods (as kubectl does)


DONE_OUTCOMES = frozenset({PodOutcome.EVICTED, PodOutcome.GONE, PodOutcome.SKIPPED})


class PodReport(BaseModel):
    """One pod's line of the report."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    namespace: str
    name: str
    uid: str
    outcome: PodOutcome
    reason: str = Field(description="Why, in one line (the skip reason, the server's refusal, ...).")
    mode: str = Field(description="The drain mode applied to the pod.")
    attempts: int = Field(description="Eviction requests sent for this pod.")
    seconds: float = Field(description="From the start of the drain to the pod's outcome.")


class DrainReport(BaseModel):
    """The outcome of one drain of one node."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    node: str
    incident_id: str
    cordoned: bool
    seconds: float
    pods: tuple[PodReport, ...]
    error: str | None = Field(
        default=None, description="Why the drain stopped early (cordon or list failed)."
    )
    partial: bool = Field(
        default=False,
        description="Only the pods on the faulty GPUs were to go, and the node was not cordoned.",
    )

    @property
    def complete(self) -> bool:
        """True when every pod that had to go is gone and nothing was refused."""
        held = self.cordoned or self.partial
        return self.error is None and held and all(p.outcome in DONE_OUTCOMES for p in self.pods)

    @property
    def totals(self) -> dict[str, int]:
        """Pod count per outcome."""
        return dict(Counter(str(pod.outcome) for pod in self.pods))

    @property
    def evictions(self) -> int:
        """Eviction requests the API server accepted (pods evicted)."""
        accepted = {PodOutcome.EVICTED, PodOutcome.TIMED_OUT}
        return sum(1 for pod in self.pods if pod.outcome in accepted and pod.attempts > 0)
