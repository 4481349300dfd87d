"""DCGM's verdicts as findings: health-watch systems (``DCGM_HEALTH_<SYSTEM>``) and diagnostic tests
(``DCGM_DIAG_<TEST>``), shared by dcgm-exporter's health metric, ``dcgmi health`` and ``dcgmi diag``.

DCGM grades each result PASS / WARN / FAIL (``dcgmHealthWatchResults_t``: 0, 10, 20; the diagnostic
spells them Pass, Warn, Fail, Skip in any case). A pass or a skip yields no finding; a warning is a
``warn`` with action ``none`` (DCGM itself keeps the GPU in service); a failure takes the action of its
system or test from the tables below, and its status follows that action (:func:`warn_or_fail`).

Why these actions (DCGM user guide, "Health and Diagnostics" and the failure-code notes):

* memory, PCIe, NVLink, SM, power, thermal and NVSwitch non-fatal failures: ``reset_gpu`` — a reset clears
  pending remaps and link state; a diagnostic after the reset tells a lasting fault from a passing one.
* InfoROM failure: ``replace`` — a corrupt InfoROM needs a re-flash or an RMA, a human's call.
* driver and NVSwitch fatal failures: ``reboot`` — the driver or the fabric must be reloaded.
* the diagnostic's software / deployment tests: ``none`` — they judge the node's setup (persistence mode,
  libraries, permissions), not the GPU's hardware, so they warn without taking the node out.
"""

from __future__ import annotations

import re

from checks.base import warn_or_fail
from core.dcgm import Grade
from core.findings import Action, Finding, Status

HEALTH_FAIL_VALUE = 20


def grade_from_value(value: float) -> Grade:
    """A health result as a number (dcgm-exporter's health metric): 0 pass, 10 warn, 20 (or more) fail."""
    if value >= HEALTH_FAIL_VALUE:
        return Grade.FAIL
    if value > 0:
        return Grade.WARN
    return Grade.PASS


_SYSTEM_ALIASES: dict[str, str] = {
    "PCIE": "PCIE",
    "NVLINK": "NVLINK",
    "PMU": "PMU",
    "MCU": "MCU",
    "MEM": "MEM",
    "MEMORY": "MEM",
    "SM": "SM",
    "INFOROM": "INFOROM",
    "THERMAL": "THERMAL",
    "POWER": "POWER",
    "DRIVER": "DRIVER",
    "NVSWITCH_NONFATAL": "NVSWITCH_NONFATAL",
    "NVSWITCH_NON_FATAL": "NVSWITCH_NONFATAL",
    "NVSWITCH_FATAL": "NVSWITCH_FATAL",
    "CONNECTX": "CONNECTX",
    "ALL": "OVERALL",
    "OVERALL": "OVERALL",
}

HEALTH_FAIL_ACTIONS: dict[str, Action] = {
    "INFOROM": Action.REPLACE,
    "DRIVER": Action.REBOOT,
    "NVSWITCH_FATAL": Action.REBOOT,
}
"""Action of a failed health system; every other system: ``reset_gpu``."""

DIAG_FAIL_ACTIONS: dict[str, Action] = {
    "SOFTWARE": Action.NONE,
    "DENYLIST": Action.NONE,
    "BLACKLIST": Action.NONE,
    "NVML_LIBRARY": Action.NONE,
    "CUDA_MAIN_LIBRARY": Action.NONE,
    "CUDA_TOOLKIT_LIBRARIES": Action.NONE,
    "PERMISSIONS_AND_OS_RELATED_BLOCKS": Action.NONE,
    "PERMISSIONS_AND_OS_BLOCKS": Action.NONE,
    "PERSISTENCE_MODE": Action.NONE,
    "ENVIRONMENTAL_VARIABLES": Action.NONE,
    "GRAPHICS_PROCESSES": Action.NONE,
    "INFOROM": Action.REPLACE,
}
"""Action of a failed diagnostic test; any other test (memory, pcie, diagnostic, stress): ``reset_gpu``."""


def upper_snake(name: str) -> str:
    """``GPU Memory`` -> ``GPU_MEMORY``, ``Page Retirement/Row Remap`` -> ``PAGE_RETIREMENT_ROW_REMAP``."""
    return "_".join(part for part in re.split(r"[^A-Za-z0-9]+", name.upper()) if part) or "UNNAMED"


def system_code(name: str) -> str:
    """A health system as our code suffix: ``PCIe system`` -> ``PCIE``, ``Memory system`` -> ``MEM``."""
    words = upper_snake(name)
    words = words.removesuffix("_ERRORS").removesuffix("_SYSTEM").removeprefix("DCGM_HEALTH_WATCH_")
    return _SYSTEM_ALIASES.get(words, words)


def health_finding(
    system: str, grade: Grade, *, gpu: str | None, where: str, detail: str, check: str
) -> Finding | None:
    """``DCGM_HEALTH_<SYSTEM>`` for a warning or a failure of one health system; None for pass / skip."""
    code_system = system_code(system)
    if grade is Grade.FAIL:
        action = HEALTH_FAIL_ACTIONS.get(code_system, Action.RESET_GPU)
    elif grade is Grade.WARN:
        action = Action.NONE
    else:
        return None
    text = f"{where}: DCGM health {code_system} {grade.value}" + (f": {detail}" if detail else "")
    status = Status.WARN if grade is Grade.WARN else warn_or_fail(action)
    return Finding(
        check=check,
        gpu=gpu,
        status=status,
        code=f"DCGM_HEALTH_{code_system}",
        message=_clip(text),
        action=action,
    )


def diag_finding(test: str, grade: Grade, *, gpu: str | None, where: str, detail: str) -> Finding | None:
    """``DCGM_DIAG_<TEST>`` for a warning or a failure of one diagnostic test; None for pass / skip."""
    code_test = upper_snake(test)
    if grade is Grade.FAIL:
        action = DIAG_FAIL_ACTIONS.get(code_test, Action.RESET_GPU)
    elif grade is Grade.WARN:
        action = Action.NONE
    else:
        return None
    text = f"{where}: DCGM diagnostic {test!r} {grade.value}" + (f": {detail}" if detail else "")
    status = Status.WARN if grade is Grade.WARN else warn_or_fail(action)
    return Finding(
        check="dcgm_diag",
        gpu=gpu,
        status=status,
        code=f"DCGM_DIAG_{code_test}",
        message=_clip(text),
        action=action,
    )


def unavailable_finding(check: str, code: str, message: str) -> Finding:
    """The one ``unknown`` finding of a DCGM source that should answer and cannot (never a fault)."""
    return Finding(
        check=check, gpu=None, status=Status.UNKNOWN, code=code, message=_clip(message), action=Action.NONE
    )


_MAX_MESSAGE = 300


def _clip(text: str) -> str:
    """One line, bounded: DCGM's messages can be long and carry newlines."""
    flat = " ".join(text.split())
    return flat if len(flat) <= _MAX_MESSAGE else flat[: _MAX_MESSAGE - 3] + "..."
