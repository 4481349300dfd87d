"""Field validation the API server applies to every write, as ``details.causes`` entries (HTTP 422).

Names follow "Object Names and IDs"
(https://kubernetes.io/docs/concepts/overview/working-with-objects/names/): most names are RFC 1123
subdomains, namespaces RFC 1123 labels. Labels and annotations follow "Labels and Selectors" → "Syntax and
character set" (https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#syntax-and-character-set)
and "Annotations". Taints follow "Taints and Tolerations"
(https://kubernetes.io/docs/concepts/scheduling-eviction/taint-and-toleration/). Pod updates follow "Pod
update and replacement" (https://kubernetes.io/docs/concepts/workloads/pods/#pod-update-and-replacement).
"""

from __future__ import annotations

import json
import re
from typing import Any

from sim.kube.errors import field_error
from sim.kube.protocols import KubeObject

Cause = dict[str, str]

_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = rf"{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*"
_QUALIFIED_NAME = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_VALUE = rf"({_QUALIFIED_NAME})?"

_SUBDOMAIN_RE = re.compile(f"^{_DNS1123_SUBDOMAIN}$")
_LABEL_RE = re.compile(f"^{_DNS1123_LABEL}$")
_QUALIFIED_NAME_RE = re.compile(f"^{_QUALIFIED_NAME}$")
_LABEL_VALUE_RE = re.compile(f"^{_LABEL_VALUE}$")

_SUBDOMAIN_MESSAGE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    f"'{_DNS1123_SUBDOMAIN}')"
)
_LABEL_MESSAGE = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start "
    f"and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    f"'{_DNS1123_LABEL}')"
)
_QUALIFIED_NAME_MESSAGE = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    f"alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
    f"'{_QUALIFIED_NAME}')"
)
_LABEL_VALUE_MESSAGE = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must "
    f"start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used "
    f"for validation is '{_QUALIFIED_NAME}')"
)
_MAX_ANNOTATIONS_BYTES = 256 * 1024
_TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_POD_UPDATE_MESSAGE = (
    "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,"
    "`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),"
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"
)


def _invalid(field: str, value: Any, message: str) -> Cause:
    return field_error("FieldValueInvalid", field, f"Invalid value: {json.dumps(value)}: {message}")


def validate_name(name: str, *, label: bool) -> list[Cause]:
    """``metadata.name``: an RFC 1123 label (namespaces) or subdomain (everything else here)."""
    if label:
        if len(name) > 63 or not _LABEL_RE.match(name):
            return [_invalid("metadata.name", name, _LABEL_MESSAGE)]
    elif len(name) > 253 or not _SUBDOMAIN_RE.match(name):
        return [_invalid("metadata.name", name, _SUBDOMAIN_MESSAGE)]
    return []


def _qualified_key_causes(field: str, key: str) -> list[Cause]:
    prefix, _, name = key.rpartition("/")
    if "/" in prefix or (prefix == "" and key.startswith("/")):
        return [_invalid(field, key, "a qualified name must consist of one name part and an optional prefix")]
    causes: list[Cause] = []
    if prefix and (len(prefix) > 253 or not _SUBDOMAIN_RE.match(prefix)):
        causes.append(_invalid(field, key, f"prefix part {_SUBDOMAIN_MESSAGE}"))
    if not name or len(name) > 63 or not _QUALIFIED_NAME_RE.match(name):
        causes.append(_invalid(field, key, _QUALIFIED_NAME_MESSAGE))
    return causes


def validate_metadata(metadata: dict[str, Any]) -> list[Cause]:
    """Labels (key and value syntax) and annotations (key syntax, 256 KiB in total)."""
    causes: list[Cause] = []
    labels = metadata.get("labels") or {}
    if not isinstance(labels, dict):
        return [_invalid("metadata.labels", labels, "must be a map of strings")]
    for key, value in labels.items():
        causes.extend(_qualified_key_causes("metadata.labels", str(key)))
        if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE_RE.match(value):
            causes.append(_invalid("metadata.labels", value, _LABEL_VALUE_MESSAGE))
    annotations = metadata.get("annotations") or {}
    if not isinstance(annotations, dict):
        return [*causes, _invalid("metadata.annotations", annotations, "must be a map of strings")]
    total = 0
    for key, value in annotations.items():
        causes.extend(_qualified_key_causes("metadata.annotations", str(key)))
        total += len(str(key)) + len(str(value))
    if total > _MAX_ANNOTATIONS_BYTES:
        causes.append(
            field_error(
                "FieldValueTooLong",
                "metadata.annotations",
                f"Too long: may not be more than {_MAX_ANNOTATIONS_BYTES} bytes",
            )
        )
    return causes


def validate_node(node: KubeObject) -> list[Cause]:
    """Node taints: a qualified key, a known effect, and no two taints with the same key and effect."""
    causes: list[Cause] = []
    taints = (node.get("spec") or {}).get("taints") or []
    seen: set[tuple[str, str]] = set()
    for index, taint in enumerate(taints):
        field = f"spec.taints[{index}]"
        key = str(taint.get("key") or "")
        effect = taint.get("effect")
        if not key:
            causes.append(field_error("FieldValueRequired", f"{field}.key", "Required value"))
        else:
            causes.extend(_qualified_key_causes(f"{field}.key", key))
        value = str(taint.get("value") or "")
        if value and (len(value) > 63 or not _LABEL_VALUE_RE.match(value)):
            causes.append(_invalid(f"{field}.value", value, _LABEL_VALUE_MESSAGE))
        if effect not in _TAINT_EFFECTS:
            supported = ", ".join(f'"{e}"' for e in _TAINT_EFFECTS)
            causes.append(
                field_error(
                    "FieldValueNotSupported",
                    f"{field}.effect",
                    f"Unsupported value: {json.dumps(effect)}: supported values: {supported}",
                )
            )
        if (key, str(effect)) in seen:
            causes.append(
                field_error(
                    "FieldValueDuplicate",
                    f"{field}",
                    f"Duplicate value: {json.dumps({'key': key, 'effect': effect})}: "
                    "taints must be unique by key and effect pair",
                )
            )
        seen.add((key, str(effect)))
    return causes


def validate_core_event_create(event: KubeObject, namespace: str | None) -> list[Cause]:
    """A core/v1 Event lives in its involved object's namespace; one about a cluster-scoped object (a
    Node) in ``default`` (the API server's ``legacyValidateEvent``)."""
    involved = event.get("involvedObject") or {}
    involved_namespace = str(involved.get("namespace") or "")
    own = namespace or ""
    matches = own == involved_namespace if involved_namespace else own in ("", "default")
    if matches:
        return []
    return [_invalid("involvedObject.namespace", involved_namespace, "does not match event.namespace")]


def validate_pod_create(pod: KubeObject) -> list[Cause]:
    """A pod needs at least one container, each with a name and an image."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return [field_error("FieldValueRequired", "spec", "Required value")]
    containers = spec.get("containers")
    if not containers:
        return [field_error("FieldValueRequired", "spec.containers", "Required value")]
    causes: list[Cause] = []
    for index, container in enumerate(containers):
        if not container.get("name"):
            causes.append(
                field_error("FieldValueRequired", f"spec.containers[{index}].name", "Required value")
            )
        if not container.get("image"):
            causes.append(
                field_error("FieldValueRequired", f"spec.containers[{index}].image", "Required value")
            )
    return causes


def _without_mutable_pod_fields(spec: dict[str, Any], old_tolerations: list[Any]) -> dict[str, Any]:
    stripped = {
        k: v for k, v in spec.items() if k not in ("activeDeadlineSeconds", "terminationGracePeriodSeconds")
    }
    for list_name in ("containers", "initContainers"):
        if list_name in stripped:
            stripped[list_name] = [{k: v for k, v in c.items() if k != "image"} for c in stripped[list_name]]
    tolerations = stripped.pop("tolerations", None) or []
    # Only additions are allowed: the old tolerations must still be there, in order, as a prefix.
    stripped["__tolerations_prefix"] = tolerations[: len(old_tolerations)]
    stripped.pop("schedulingGates", None)
    return stripped


def validate_pod_update(old: KubeObject, new: KubeObject) -> list[Cause]:
    """Most of a pod's spec is immutable once created; ``spec.nodeName`` in particular."""
    old_spec = old.get("spec") or {}
    new_spec = new.get("spec") or {}
    old_tolerations = old_spec.get("tolerations") or []
    old_view = _without_mutable_pod_fields(old_spec, old_tolerations)
    old_view["__tolerations_prefix"] = old_tolerations
    if old_view != _without_mutable_pod_fields(new_spec, old_tolerations):
        return [field_error("FieldValueForbidden", "spec", f"Forbidden: {_POD_UPDATE_MESSAGE}")]
    return []


# A suspended Job that never started may have its pod template's scheduling directives changed (Kueue does, on
# admission); everything else in the template, and the selector, is immutable (the API reference, JobSpec).
_JOB_SCHEDULING_DIRECTIVES = ("nodeSelector", "affinity", "tolerations", "schedulingGates")


def _template_without_scheduling_directives(template: dict[str, Any]) -> dict[str, Any]:
    spec = {k: v for k, v in (template.get("spec") or {}).items() if k not in _JOB_SCHEDULING_DIRECTIVES}
    metadata = {
        k: v for k, v in (template.get("metadata") or {}).items() if k not in ("labels", "annotations")
    }
    return {**template, "spec": spec, "metadata": metadata}


def validate_job_update(old: KubeObject, new: KubeObject) -> list[Cause]:
    """``spec.template`` and ``spec.selector`` of a Job are immutable, but for the scheduling directives
    (node selector, affinity, tolerations, scheduling gates, labels and annotations) of a suspended Job
    that has not started."""
    old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
    causes: list[Cause] = []
    if old_spec.get("selector") != new_spec.get("selector"):
        causes.append(_invalid("spec.selector", new_spec.get("selector"), "field is immutable"))
    old_template, new_template = old_spec.get("template") or {}, new_spec.get("template") or {}
    if old_template != new_template:
        unstarted = bool(old_spec.get("suspend")) and not (old.get("status") or {}).get("startTime")
        if not unstarted or _template_without_scheduling_directives(
            old_template
        ) != _template_without_scheduling_directives(new_template):
            causes.append(
                field_error("FieldValueInvalid", "spec.template", "Invalid value: field is immutable")
            )
    return causes
