"""Parse ``dcgmi health -c -j`` and ``dcgmi diag -r N -j`` output into readings (core/dcgm.py); never judge.

Pure functions over text, shared by the agent's ``dcgmi`` runner and ``gpuhealth check --dcgmi-diag FILE``;
the judgement is checks/dcgmi.py.

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

from core.dcgm import DiagResult, DiagTest, EntityResult, HealthIncident, HealthReport, grade_from_text


class DcgmiOutputError(ValueError):
    """dcgmi's output is not a document of the expected shape; the message is one line."""


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
        found.append(
            HealthIncident(
                entity_group=group, entity_id=_int(entity), system=system, grade=grade, message=message
            )
        )
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
