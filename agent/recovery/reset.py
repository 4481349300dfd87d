"""GPU reset: find the incident's GPUs through NVML, refuse while a compute process uses one, then reset each
(``reset_one``: on a real node the configured command, default ``nvidia-smi --gpu-reset -i {index}``; see
``agent.recovery.actions``).

Refusing is the safe answer whenever NVML cannot tell: a GPU that fell off the bus (only a reboot helps), a
GPU whose processes cannot be read, a GPU the incident names that NVML no longer lists, NVML unusable.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from agent.backends.nvml import seam as nvml
from agent.backends.nvml.seam import NvmlLibrary, NvmlUnavailableError
from agent.recovery.commands import CommandOutcome


@dataclass(frozen=True)
class GpuTarget:
    """One GPU to reset: NVML's index (what ``nvidia-smi -i`` takes) and its UUID."""

    index: int
    uuid: str


@dataclass
class _Survey:
    targets: list[GpuTarget] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)  # UUIDs NVML listed


class GpuResetter:
    """Resets GPUs of this node, after checking through NVML that none is in use."""

    def __init__(self, library: NvmlLibrary, reset_one: Callable[[GpuTarget], CommandOutcome]) -> None:
        self._library = library
        self._reset_one = reset_one

    def reset(self, uuids: Sequence[str]) -> CommandOutcome:
        """Reset the GPUs with these UUIDs (every GPU when empty); refuses (not ok) when any is in use."""
        survey = self._survey(set(uuids))
        if survey.refusals:
            return CommandOutcome(ok=False, detail="reset refused: " + "; ".join(survey.refusals))
        if not survey.targets:
            return CommandOutcome(ok=False, detail="reset refused: no GPU to reset")
        done = []
        for target in survey.targets:
            outcome = self._reset_one(target)
            if not outcome.ok:
                return CommandOutcome(False, f"reset of GPU {target.index} failed: {outcome.detail}", None)
            done.append(str(target.index))
        return CommandOutcome(ok=True, detail=f"GPU {', '.join(done)} reset", exit_code=0)

    def _survey(self, wanted: set[str]) -> _Survey:
        survey = _Survey()
        try:
            nvml.initialise(self._library)
        except NvmlUnavailableError as exc:
            survey.refusals.append(f"NVML unavailable: {exc}")
            return survey
        try:
            self._look(wanted, survey)
        except nvml.NVMLError as exc:
            survey.refusals.append(f"NVML failed: {nvml.error_name(nvml.error_code(exc))}")
        finally:
            self._shutdown()
        survey.refusals.extend(f"{uuid} is not listed by NVML" for uuid in sorted(wanted - survey.seen))
        return survey

    def _look(self, wanted: set[str], survey: _Survey) -> None:
        library = self._library
        for index in range(library.nvmlDeviceGetCount()):
            try:
                handle = library.nvmlDeviceGetHandleByIndex(index)
                uuid = nvml.nvml_text(library.nvmlDeviceGetUUID(handle)) or f"index-{index}"
            except nvml.NVMLError as exc:
                survey.refusals.append(_unreadable(index, exc))
                continue
            survey.seen.add(uuid)
            if wanted and uuid not in wanted:
                continue
            try:
                processes = library.nvmlDeviceGetComputeRunningProcesses(handle)
            except nvml.NVMLError as exc:
                survey.refusals.append(_unreadable(index, exc))
                continue
            if processes:
                pids = ", ".join(str(getattr(process, "pid", "?")) for process in processes)
                survey.refusals.append(f"GPU {index} is in use by process {pids}")
                continue
            survey.targets.append(GpuTarget(index, uuid))

    def _shutdown(self) -> None:
        with contextlib.suppress(nvml.NVMLError):  # a driver reload may have ended the session
            self._library.nvmlShutdown()


def _unreadable(index: int, exc: Exception) -> str:
    code = nvml.error_code(exc)
    if code == nvml.NVML_ERROR_GPU_IS_LOST:
        return f"GPU {index} is lost (fell off the bus): only a reboot brings it back"
    return f"GPU {index} cannot be checked for processes ({nvml.error_name(code)})"
