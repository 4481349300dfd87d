"""DCGM readings, before any judgement: what dcgm-exporter's page, ``dcgmi health`` and ``dcgmi diag`` say.

The backends (agent/backends/dcgm/) read and parse; the checks (checks/dcgm*.py) judge. The exporter's and
``dcgmi health``'s readings travel in the snapshot (:class:`DcgmReadings`, an optional v1 extension), so a
saved snapshot replays them through ``gpuhealth check --snapshot``. A diagnostic's result
(:class:`DiagResult`) is an on-demand run's answer, not a reading of the node's state: it stays out of the
snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field


class Grade(StrEnum):
    """One DCGM result, normalised from its many spellings."""

    PASS = "pass"  # noqa: S105 - a DCGM result, not a password
    SKIP = "skip"
    WARN = "warn"
    FAIL = "fail"


_GRADE_WORDS: dict[str, Grade] = {
    "pass": Grade.PASS,
    "passed": Grade.PASS,
    "healthy": Grade.PASS,
    "skip": Grade.SKIP,
    "skipped": Grade.SKIP,
    "not run": Grade.SKIP,
    "notrun": Grade.SKIP,
    "warn": Grade.WARN,
    "warning": Grade.WARN,
    "fail": Grade.FAIL,
    "failed": Grade.FAIL,
    "failure": Grade.FAIL,
}


def grade_from_text(text: object) -> Grade | None:
    """``Pass`` / ``PASS`` / ``pass`` / ``Healthy`` ... -> a grade; ``None`` for a word DCGM does not use."""
    if not isinstance(text, str):
        return None
    return _GRADE_WORDS.get(" ".join(text.lower().replace("_", " ").split()))


class _Reading(BaseModel):
    model_config = ConfigDict(frozen=True, strict=True, extra="ignore")


class HealthWatch(_Reading):
    """One ``DCGM_EXP_GPU_HEALTH_STATUS`` series: a watch (PCIE, MEM, ALL...), its value and DCGM's code."""

    system: str = Field(description="The health watch (system) the series is about, e.g. PCIE, MEM, ALL.")
    value: float = Field(description="DCGM's result: 0 pass, 10 warn, 20 fail.")
    error_code: str | None = Field(default=None, description="DCGM's health error code, when labelled.")


class ExporterGpu(_Reading):
    """What one dcgm-exporter page says about one GPU; ``None`` is "not exported" or a blank sentinel."""

    index: int = Field(description="The gpu label (-1 when the page gives none).")
    uuid: str = Field(description="The UUID label, or the snapshot's UUID for the index.")
    name: str | None = None
    pci_bus_id: str | None = None
    hostname: str | None = None
    dbe_volatile: int | None = None
    dbe_aggregate: int | None = None
    remapped_correctable: int | None = None
    remapped_uncorrectable: int | None = None
    remap_pending: bool | None = None
    remap_failure: bool | None = None
    pcie_replays: int | None = None
    last_xid: int | None = Field(default=None, description="DCGM_FI_DEV_XID_ERRORS: the last XID seen.")
    last_xid_message: str | None = None
    xid_counts: dict[int, int] | None = Field(
        default=None, description="DCGM_EXP_XID_ERRORS_COUNT: per XID, its count in the exporter's window."
    )
    health: tuple[HealthWatch, ...] = Field(default=(), description="The health-watch series.")

    def has_health_readings(self) -> bool:
        """True when the page carries at least one health series for this GPU with a value (temperature,
        power and utilisation are not health: a trimmed counters file often keeps only those)."""
        counters = (
            self.dbe_volatile,
            self.dbe_aggregate,
            self.remapped_correctable,
            self.remapped_uncorrectable,
            self.remap_pending,
            self.remap_failure,
            self.pcie_replays,
            self.last_xid,
            self.xid_counts,
        )
        return any(value is not None for value in counters) or bool(self.health)


class HealthIncident(_Reading):
    """One system of one entity that DCGM's health check did not pass."""

    entity_group: str
    entity_id: int | None
    system: str
    grade: Grade
    message: str


class HealthReport(_Reading):
    """``dcgmi health -c -j``: the overall grade and each incident."""

    overall: Grade | None
    incidents: tuple[HealthIncident, ...]


class DcgmReadings(_Reading):
    """What the node's DCGM sources said at this pass (snapshot v1 extension; every part optional).

    ``exporter`` / ``health`` null with no error: that source is not configured. An ``*_error`` says the
    source should have answered and could not: judged ``unknown``, never a fault.
    """

    exporter: list[ExporterGpu] | None = Field(default=None, description="dcgm-exporter's GPUs.")
    exporter_error: str | None = Field(default=None, description="Why the exporter's page could not be read.")
    health: HealthReport | None = Field(default=None, description="`dcgmi health -c -j`, parsed.")
    health_error: str | None = Field(default=None, description="Why `dcgmi health` gave no report.")

    def joined(self, other: DcgmReadings) -> DcgmReadings:
        """These readings with ``other``'s set parts laid over them (each source fills its own part)."""
        parts = {name: getattr(other, name) for name in type(other).model_fields}
        return self.model_copy(update={name: value for name, value in parts.items() if value is not None})


# --- dcgmi diag (an on-demand run's answer, not a snapshot reading) ----------------------------------------


@dataclass(frozen=True, slots=True)
class EntityResult:
    """One test's result for one GPU (``gpu`` None: the result names no single GPU)."""

    gpu: int | None
    grade: Grade | None
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class DiagTest:
    """One diagnostic test and its per-GPU results."""

    category: str
    name: str
    results: tuple[EntityResult, ...]

    @property
    def grade(self) -> Grade | None:
        """The test's worst graded result (skip ranks below warn)."""
        order = (Grade.PASS, Grade.SKIP, Grade.WARN, Grade.FAIL)
        graded = [result.grade for result in self.results if result.grade is not None]
        return max(graded, key=order.index, default=None)


@dataclass(frozen=True, slots=True)
class DiagResult:
    """One ``dcgmi diag`` run: version, tests, and whether it passed."""

    version: str | None
    tests: tuple[DiagTest, ...]

    @property
    def passed(self) -> bool:
        """True when at least one test ran and none failed (warnings and skips still pass)."""
        return bool(self.tests) and all(test.grade is not Grade.FAIL for test in self.tests)

    @property
    def failed_tests(self) -> tuple[str, ...]:
        return tuple(test.name for test in self.tests if test.grade is Grade.FAIL)
