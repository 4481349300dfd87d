"""Parse ``dcgmi health -c -j`` and ``dcgmi diag -r N -j`` output, and judge it.

Pure functions over text, shared by the agent's ``dcgmi`` runner and ``gpuhealth check --dcgmi-diag FILE``.

Shapes accepted (tolerant: unknown keys ignored, any case of Pass / Warn / Fail / Skip, absent parts):

* health (every DCGM release, dcgmi's generic JSON tree): ``{"header": ["Health Monitor Report"], "body":
  {"Overall Health": {"value": "Healthy"}, "GPU": {"children": {"<id>": {"value": "Failure", "children":
  {"Errors": {"children": {"Memory system": {"value": "Failure", "overflow": ["<message>", ...]}}}}}}}}}``.
* diag 2.x / 3.x: ``{"DCGM GPU Diagnostic": {"test_categories": [{"category", "tests": [{"name",
  "results": [{"gpu_ids": "0,1" | 0, "status", "warnings": [...]}]}]}], "version"}}`` (``null`` entries
  in ``tests`` occur in real output).
* diag 4.x: ``{"DCGM Diagnostic": {"test_categories": [... "results": [{"entity_group": "GPU",
  "entity_id": 0, "status", "warnings": [{"error_id", "warning"}]}], "test_summary": {"status"}]}, ...],
  "metadata": {"version", "Driver Version Detected"}}``.

dcgmi prints a line of text before the JSON on some releases ("Successfully ran diagnostic for group."):
the document is taken from the first ``{`` to the last ``}``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from checks.dcgm import Grade, diag_finding, grade_from_text, health_finding
from core.findings import Finding

CHECK_HEALTH = "dcgm_health"


class DcgmiOutputError(ValueError):
    """dcgmi's output is not a document of the expected shape; the message is one line."""


@dataclass(frozen=True, slots=True)
class HealthIncident:
    """One system of one entity that DCGM's health check did not pass."""

    entity_group: str
    entity_id: int | None
    system: str
    grade: Grade
    message: str


@dataclass(frozen=True, slots=True)
class HealthReport:
    """``dcgmi health -c -j``: the overall grade and each incident."""

    overall: Grade | None
    incidents: tuple[HealthIncident, ...]


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


# --- shared ------------------------------------------------------------------------------------------------


def load_document(text: str, what: str) -> dict[str, object]:
    """The JSON object in dcgmi's output (leading chatter ignored); DcgmiOutputError if there is none."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        hint = " (plain-text output? run dcgmi with -j)" if "|" in text or "Successfully ran" in text else ""
        raise DcgmiOutputError(f"{what}: no JSON object in the output{hint}")
    try:
        document = json.loads(text[start : end + 1])
    except json.JSONDecodeError as exc:
        raise DcgmiOutputError(f"{what}: invalid JSON at line {exc.lineno}: {exc.msg}") from None
    if not isinstance(document, dict):
        raise DcgmiOutputError(f"{what}: expected a JSON object")
    return document


def _mapping(value: object) -> Mapping[str, object]:
    return value if isinstance(value, Mapping) else {}


def _list(value: object) -> list[object]:
    return list(value) if isinstance(value, list) else []


def _int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def gpu_where(index: int | None) -> str:
    return f"GPU {index}" if index is not None else "all GPUs"


# --- health ------------------------------------------------------------------------------------------------


def parse_health(text: str) -> HealthReport:
    """``dcgmi health -c -j`` -> :class:`HealthReport`; DcgmiOutputError when it is not that document."""
    document = load_document(text, "dcgmi health")
    body = document.get("body")
    if not isinstance(body, Mapping):
        raise DcgmiOutputError("dcgmi health: no 'body' in the output")
    overall = grade_from_text(_mapping(body.get("Overall Health")).get("value"))
    incidents: list[HealthIncident] = []
    for group, node in body.items():
        if group == "Overall Health":
            continue
        for entity, entity_node in _mapping(_mapping(node).get("children")).items():
            incidents.extend(_entity_incidents(str(group), entity, entity_node))
    return HealthReport(overall=overall, incidents=tuple(incidents))


def _entity_incidents(group: str, entity: str, node: object) -> list[HealthIncident]:
    errors = _mapping(_mapping(_mapping(node).get("children")).get("Errors"))
    found: list[HealthIncident] = []
    for system, system_node in _mapping(errors.get("children")).items():
        detail = _mapping(system_node)
        grade = grade_from_text(detail.get("value"))
        if grade is None:
            continue
        message = " ".join(str(line) for line in _list(detail.get("overflow")))
        found.append(HealthIncident(group, _int(entity), system, grade, message))
    return found


def health_findings(report: HealthReport, uuids: Mapping[int, str]) -> list[Finding]:
    """``DCGM_HEALTH_<SYSTEM>`` per GPU incident (by UUID when the GPU index is known), node-level else."""
    found: list[Finding] = []
    for incident in report.incidents:
        is_gpu = incident.entity_group.upper() == "GPU"
        gpu = uuids.get(incident.entity_id) if is_gpu and incident.entity_id is not None else None
        entity = "" if incident.entity_id is None else str(incident.entity_id)
        where = gpu_where(incident.entity_id) if is_gpu else f"{incident.entity_group} {entity}".strip()
        finding = health_finding(
            incident.system, incident.grade, gpu=gpu, where=where, detail=incident.message, check=CHECK_HEALTH
        )
        if finding is not None:
            found.append(finding)
    if not found and report.overall in {Grade.WARN, Grade.FAIL}:  # graded overall, but no incident listed
        finding = health_finding(
            "OVERALL", report.overall, gpu=None, where="node", detail="no incident listed", check=CHECK_HEALTH
        )
        if finding is not None:
            found.append(finding)
    return found


# --- diag --------------------------------------------------------------------------------------------------

_DIAG_ROOTS = ("DCGM GPU Diagnostic", "DCGM Diagnostic")


def parse_diag(text: str) -> DiagResult:
    """``dcgmi diag -r N -j`` (DCGM 2.x, 3.x or 4.x) -> :class:`DiagResult`; DcgmiOutputError otherwise."""
    document = load_document(text, "dcgmi diag")
    root = next((document[key] for key in _DIAG_ROOTS if isinstance(document.get(key), Mapping)), None)
    _raise_runtime_error(root, document)
    if root is None:
        if isinstance(document.get("tests"), list):  # categories absent: tests at the top level
            root = document
        else:
            raise DcgmiOutputError("dcgmi diag: no 'DCGM Diagnostic' section in the output")
    root_map = _mapping(root)
    tests: list[DiagTest] = []
    categories = _list(root_map.get("test_categories"))
    if not categories and isinstance(root_map.get("tests"), list):
        categories = [{"category": "", "tests": root_map["tests"]}]
    for category in categories:
        category_map = _mapping(category)
        name = str(category_map.get("category") or "")
        tests.extend(
            _diag_test(name, test) for test in _list(category_map.get("tests")) if isinstance(test, Mapping)
        )
    version = root_map.get("version") or _mapping(document.get("metadata")).get("version")
    return DiagResult(version=str(version) if version is not None else None, tests=tuple(tests))


def _raise_runtime_error(root: object, document: Mapping[str, object]) -> None:
    """DcgmiOutputError when dcgmi says the diagnostic could not run at all.

    dcgmi and NVVS report a run that never started (host engine unreachable, NVVS missing, GPU not
    supported) as ``{"DCGM Diagnostic": {"runtime_error": "...", "version": ...}}`` with no tests; the
    multi-node form puts ``runtime_error`` at the top level. Read as a result, that would be an empty
    and therefore silently "healthy" run.
    """
    for holder in (_mapping(root), document):
        message = holder.get("runtime_error")
        if isinstance(message, str) and message.strip() and not holder.get("test_categories"):
            raise DcgmiOutputError(
                f"dcgmi diag: the diagnostic did not run: {' '.join(message.split())[:300]}"
            )


def _diag_test(category: str, test: Mapping[str, object]) -> DiagTest:
    results: list[EntityResult] = []
    for raw in _list(test.get("results")):
        result = _mapping(raw)
        grade = grade_from_text(result.get("status"))
        warnings = _warnings(result.get("warnings")) + _warnings(result.get("warning"))
        for gpu in _gpus_of(result):
            results.append(EntityResult(gpu=gpu, grade=grade, warnings=warnings))
    if not results:  # a test with only a summary still says whether it passed
        summary = grade_from_text(_mapping(test.get("test_summary")).get("status"))
        if summary is not None:
            results.append(EntityResult(gpu=None, grade=summary))
    return DiagTest(category=category, name=str(test.get("name") or "unnamed"), results=tuple(results))


def _gpus_of(result: Mapping[str, object]) -> list[int | None]:
    """The GPUs a result covers: 4.x ``entity_group``/``entity_id``, 2.x/3.x ``gpu_ids`` (``"0,1"`` or 0)."""
    if "entity_id" in result:
        group = str(result.get("entity_group") or "GPU")
        return [_int(result.get("entity_id"))] if group.upper() == "GPU" else [None]
    ids = result.get("gpu_ids", result.get("gpu_id"))
    if isinstance(ids, str):
        parsed = [_int(part) for part in ids.split(",") if part.strip()]
        return [gpu for gpu in parsed if gpu is not None] or [None]
    single = _int(ids)
    return [single] if single is not None else [None]


def _warnings(value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,) if value.strip() else ()
    texts: list[str] = []
    for item in _list(value):
        if isinstance(item, str):
            texts.append(item)
        elif isinstance(item, Mapping):
            text = item.get("warning") or item.get("message")
            if text:
                error_id = item.get("error_id")
                texts.append(f"{text} (error_id {error_id})" if error_id is not None else str(text))
    return tuple(texts)


def diag_findings(result: DiagResult, uuids: Mapping[int, str]) -> list[Finding]:
    """``DCGM_DIAG_<TEST>`` per (test, GPU) that warned or failed, by UUID when the index is known."""
    found: list[Finding] = []
    for test in result.tests:
        for entity in test.results:
            if entity.grade is None:
                continue
            gpu = uuids.get(entity.gpu) if entity.gpu is not None else None
            finding = diag_finding(
                test.name,
                entity.grade,
                gpu=gpu,
                where=gpu_where(entity.gpu),
                detail="; ".join(entity.warnings),
            )
            if finding is not None:
                found.append(finding)
    return found
