"""Per-GPU quarantine on Kubernetes: the node's GPUs as DRA devices, and our DeviceTaintRules on them.

The NVIDIA DRA driver (``gpu.nvidia.com``) publishes each node's GPUs in ResourceSlices: pool = the node's
name, one device per GPU (``gpu-0`` ...) with the attribute ``uuid``. A DeviceTaintRule
(https://kubernetes.io/docs/concepts/scheduling-eviction/dynamic-resource-allocation/#device-taints-and-tolerations)
selects devices by driver, pool and device name and taints them: ``NoSchedule`` keeps new claims off the
device, ``NoExecute`` also evicts the pods whose claims use it.

Ours are named ``gpuhealth-<node>-<device>`` (a hash when that is too long) and labelled
``app.kubernetes.io/managed-by=gpuhealth`` and ``gpuhealth.io/node=<node>``; the GPU's UUID is in the
``gpuhealth.io/gpu`` annotation. Only rules with both labels are ever updated or deleted: anyone else's rule
on the same device stays. Writes are idempotent like the node taint's: a rule that already says what the
step wants is left alone.

Reading costs: one discovery of the resource.k8s.io versions, then the node's ResourceSlices and our rules
(two field- and label-selected LISTs) once every ``refresh_s``, and our rules again before each write. A
write that fails makes the inventory unknown until the next refresh, so the planner falls back to the node
taint meanwhile instead of trusting device taints that are not there.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import structlog

from core.steps import SetDeviceTaints, TaintEffect
from remediation.kubernetes.errors import KubeNotFound
from remediation.kubernetes.names import (
    DEVICE_TAINT_GPU_ANNOTATION,
    DEVICE_TAINT_NODE_LABEL,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    TAINT_KEY,
)
from remediation.kubernetes.rest import JSON, MERGE_PATCH, JsonObject, RestClient

log = structlog.get_logger(__name__)

GROUP = "resource.k8s.io"
NVIDIA_DRA_DRIVER = "gpu.nvidia.com"
# Newest first: DeviceTaintRule is v1alpha3 in Kubernetes 1.33-1.35, v1beta2 from 1.36; ResourceSlice is v1
# from 1.34. The first version the server lists for each resource is used.
VERSIONS = ("v1", "v1beta2", "v1beta1", "v1alpha3")
_MAX_NAME = 253
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


@dataclass(frozen=True)
class DraDevice:
    """One GPU as the DRA driver publishes it."""

    uuid: str
    driver: str
    pool: str
    device: str


@dataclass(frozen=True)
class DeviceTaintFacts:
    """What the executor adds to ``NodeFacts`` (see its fields of the same names)."""

    dra_gpus: tuple[str, ...] | None = None
    device_taint_gpus: tuple[str, ...] = ()
    device_taint_value: str | None = None
    device_taint_effect: TaintEffect | None = None


@dataclass
class _Inventory:
    devices: dict[str, DraDevice] = field(default_factory=dict)  # by GPU UUID
    rules: dict[str, JsonObject] = field(default_factory=dict)  # ours, by name


class DeviceTaints:
    """The node's DRA GPUs and our DeviceTaintRules; ``facts`` is cached, ``set`` / ``remove`` write."""

    def __init__(
        self,
        rest: RestClient,
        node: str,
        *,
        clock: Callable[[], datetime],
        driver: str = NVIDIA_DRA_DRIVER,
        refresh_s: float = 300.0,
        field_manager: str = "gpuhealth-agent",
    ) -> None:
        self._rest = rest
        self._node = node
        self._driver = driver
        self._clock = clock
        self._refresh_s = refresh_s
        self._field_manager = field_manager
        self._paths: dict[str, str] | None = None
        self._inventory: _Inventory | None = None
        self._read_at: datetime | None = None
        self._log = log.bind(node=node)

    # --- reading ------------------------------------------------------------------------------------------

    def facts(self) -> DeviceTaintFacts:
        """From the cache, read again once ``refresh_s`` passed; unknown (``dra_gpus`` None) when unreadable
        or when the node has no GPU published by the driver."""
        now = self._clock()
        if self._read_at is None or (now - self._read_at).total_seconds() >= self._refresh_s:
            self._read_at = now
            try:
                self._inventory = self._read_inventory()
            except LookupError as error:  # no DRA on this cluster: the node taint, quietly
                self._inventory = None
                self._log.debug("dra_not_served", error=str(error))
            except Exception as error:  # noqa: BLE001 - any failure means "not known": the node taint covers
                self._inventory = None
                self._log.warning("dra_devices_unreadable", error=_one_line(error))
        return _facts_of(self._inventory)

    def devices(self) -> Mapping[str, DraDevice]:
        """The node's DRA GPUs by UUID as last read (empty when not known)."""
        return dict(self._inventory.devices) if self._inventory is not None else {}

    def _read_inventory(self) -> _Inventory:
        devices = self._read_devices()
        return _Inventory(devices=devices, rules=self._read_rules())

    def _read_devices(self) -> dict[str, DraDevice]:
        query = [("fieldSelector", f"spec.nodeName={self._node},spec.driver={self._driver}")]
        body = self._rest.json("GET", self._path("resourceslices"), query=query)
        found: dict[str, DraDevice] = {}
        for slice_ in body.get("items") or []:
            spec = slice_.get("spec") or {}
            pool = str((spec.get("pool") or {}).get("name") or "")
            for device in spec.get("devices") or []:
                uuid = _uuid_of(device)
                if uuid and pool and device.get("name"):
                    found[uuid] = DraDevice(uuid, self._driver, pool, str(device["name"]))
        return found

    def _read_rules(self) -> dict[str, JsonObject]:
        selector = f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE},{DEVICE_TAINT_NODE_LABEL}={node_label(self._node)}"
        body = self._rest.json("GET", self._path("devicetaintrules"), query=[("labelSelector", selector)])
        return {str(rule["metadata"]["name"]): rule for rule in body.get("items") or []}

    def _path(self, resource: str) -> str:
        if self._paths is None:
            self._paths = self._discover()
        path = self._paths.get(resource)
        if path is None:
            raise LookupError(f"the API server serves no {GROUP} {resource}")
        return path

    def _discover(self) -> dict[str, str]:
        """The collection path of each resource in the newest version that serves it."""
        try:
            group = self._rest.json("GET", f"/apis/{GROUP}")
        except KubeNotFound:
            return {}
        served = {str(v.get("version")) for v in group.get("versions") or []}
        paths: dict[str, str] = {}
        for version in (v for v in VERSIONS if v in served):
            listing = self._rest.json("GET", f"/apis/{GROUP}/{version}")
            for resource in listing.get("resources") or []:
                name = str(resource.get("name"))
                if name in ("resourceslices", "devicetaintrules") and name not in paths:
                    paths[name] = f"/apis/{GROUP}/{version}/{name}"
        return paths

    # --- writing ------------------------------------------------------------------------------------------

    def set(self, step: SetDeviceTaints) -> str:
        """Our rules select exactly ``step.gpus`` with the step's taint; others' rules are never touched."""
        return self._write(lambda devices: _desired(step, devices, self._node))

    def remove(self) -> str:
        """Delete every rule of ours on this node."""
        return self._write(lambda _devices: {})

    def _write(self, desired_of: Callable[[Mapping[str, DraDevice]], dict[str, JsonObject]]) -> str:
        try:
            return self._reconcile(desired_of)
        except Exception:
            self._inventory, self._read_at = None, self._clock()  # unknown until the next refresh
            raise

    def _reconcile(self, desired_of: Callable[[Mapping[str, DraDevice]], dict[str, JsonObject]]) -> str:
        inventory = self._inventory or self._read_inventory()
        inventory.rules = self._read_rules()  # fresh before writing: a human may have deleted one
        self._inventory = inventory
        desired = desired_of(inventory.devices)
        changes: list[str] = []
        for name in sorted(set(inventory.rules) - set(desired)):
            self._delete(inventory.rules[name])
            del inventory.rules[name]
            changes.append(f"deleted {name}")
        for name, body in sorted(desired.items()):
            current = inventory.rules.get(name)
            if current is None:
                inventory.rules[name] = self._rest.json(
                    "POST", self._path("devicetaintrules"), **self._send(body)
                )
                changes.append(f"created {name}")
            elif _spec_of(current) != body["spec"]:
                patch = {"spec": body["spec"], "metadata": {"annotations": body["metadata"]["annotations"]}}
                path = f"{self._path('devicetaintrules')}/{name}"
                inventory.rules[name] = self._rest.json("PATCH", path, **self._send(patch, MERGE_PATCH))
                changes.append(f"updated {name}")
        return "; ".join(changes) if changes else "unchanged"

    def _delete(self, rule: JsonObject) -> None:
        metadata = rule["metadata"]
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": metadata.get("uid")}}
        path = f"{self._path('devicetaintrules')}/{metadata['name']}"
        with contextlib.suppress(KubeNotFound):  # already gone: what we wanted
            self._rest.request("DELETE", path, body=body, content_type=JSON).release_conn()

    def _send(self, body: JsonObject, content_type: str = JSON) -> dict[str, Any]:
        return {"body": body, "content_type": content_type, "query": [("fieldManager", self._field_manager)]}


def rule_name(node: str, device: str) -> str:
    """``gpuhealth-<node>-<device>``, or a stable hash of both when that is not a valid object name."""
    name = f"gpuhealth-{node}-{device}".lower()
    if len(name) <= _MAX_NAME:
        return name
    digest = hashlib.sha256(f"{node}/{device}".encode()).hexdigest()[:32]
    return f"gpuhealth-{digest}"


def node_label(node: str) -> str:
    """The node's name as a label value, or a stable hash of it when the name is no valid label value."""
    if len(node) <= 63 and _LABEL_VALUE.match(node):
        return node
    return "h-" + hashlib.sha256(node.encode()).hexdigest()[:40]


def _desired(step: SetDeviceTaints, devices: Mapping[str, DraDevice], node: str) -> dict[str, JsonObject]:
    bodies: dict[str, JsonObject] = {}
    for uuid in step.gpus:
        device = devices.get(uuid)
        if device is None:
            continue  # no longer published: nothing to select (the planner only asks for published ones)
        name = rule_name(node, device.device)
        bodies[name] = {
            "apiVersion": f"{GROUP}/v1",
            "kind": "DeviceTaintRule",
            "metadata": {
                "name": name,
                "labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE, DEVICE_TAINT_NODE_LABEL: node_label(node)},
                "annotations": {DEVICE_TAINT_GPU_ANNOTATION: uuid},
            },
            "spec": {
                "deviceSelector": {"driver": device.driver, "pool": device.pool, "device": device.device},
                "taint": {"key": TAINT_KEY, "value": step.value, "effect": step.effect},
            },
        }
    return bodies


def _spec_of(rule: JsonObject) -> JsonObject:
    """The parts of a rule's spec we write (the server adds ``timeAdded`` to the taint)."""
    spec = rule.get("spec") or {}
    taint = spec.get("taint") or {}
    return {
        "deviceSelector": {
            key: (spec.get("deviceSelector") or {}).get(key) for key in ("driver", "pool", "device")
        },
        "taint": {key: taint.get(key) for key in ("key", "value", "effect")},
    }


_EFFECTS: dict[str, TaintEffect] = {"NoSchedule": "NoSchedule", "NoExecute": "NoExecute"}


def _facts_of(inventory: _Inventory | None) -> DeviceTaintFacts:
    if inventory is None:
        return DeviceTaintFacts()
    gpus: list[str] = []
    taints: set[tuple[str, str]] = set()
    for rule in inventory.rules.values():
        uuid = ((rule.get("metadata") or {}).get("annotations") or {}).get(DEVICE_TAINT_GPU_ANNOTATION)
        taint = (rule.get("spec") or {}).get("taint") or {}
        gpus.append(str(uuid or rule["metadata"]["name"]))
        taints.add((str(taint.get("value")), str(taint.get("effect"))))
    value, effect = next(iter(taints)) if len(taints) == 1 else (None, None)
    return DeviceTaintFacts(
        # No GPU published by the driver: not a DRA node (the node taint stays), though rules of ours left
        # from before are still reported so that they can go.
        dra_gpus=tuple(sorted(inventory.devices)) if inventory.devices else None,
        device_taint_gpus=tuple(sorted(gpus)),
        device_taint_value=value,
        device_taint_effect=_EFFECTS.get(effect or ""),
    )


def _uuid_of(device: JsonObject) -> str | None:
    """The ``uuid`` attribute (v1 and v1beta2 keep attributes on the device, v1beta1 under ``basic``)."""
    attributes = device.get("attributes") or (device.get("basic") or {}).get("attributes") or {}
    value = (attributes.get("uuid") or {}).get("string")
    return str(value) if value else None


def _one_line(error: BaseException) -> str:
    text = str(error).splitlines()[0] if str(error) else ""
    return f"{type(error).__name__}: {text}"
