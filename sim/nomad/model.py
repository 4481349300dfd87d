"""API-shaped Nomad objects: GPU client nodes, normalised job specs, allocations and their list stubs.

Field names and shapes follow the Nomad HTTP API documentation (developer.hashicorp.com/nomad/api-docs:
``nodes``, ``allocations``, ``jobs``) and the Go ``api`` package's structs: PascalCase keys, times as
RFC 3339 strings on nodes and as Unix nanoseconds on allocations.
"""

from __future__ import annotations

import copy
import hashlib
from datetime import datetime
from typing import Any, Final

JsonDict = dict[str, Any]

NOMAD_VERSION: Final = "1.9.3"
DATACENTER: Final = "dc1"
REGION: Final = "global"
NAMESPACE: Final = "default"
JOB_TYPES: Final = frozenset({"service", "batch", "system"})
GPU_VENDOR: Final = "nvidia"
GPU_TYPE: Final = "gpu"

# Node fields that GET /v1/nodes (NodeListStub) carries; resources only with ?resources=true.
_NODE_STUB_FIELDS: Final = (
    "Address",
    "ID",
    "Datacenter",
    "Name",
    "NodeClass",
    "NodePool",
    "Version",
    "Drain",
    "SchedulingEligibility",
    "Status",
    "StatusDescription",
    "Drivers",
    "HostVolumes",
    "LastDrain",
    "CreateIndex",
    "ModifyIndex",
)

# Allocation fields that list endpoints (AllocListStub) carry: no Job, no PreviousAllocation.
_ALLOC_STUB_FIELDS: Final = (
    "ID",
    "EvalID",
    "Name",
    "Namespace",
    "NodeID",
    "NodeName",
    "JobID",
    "JobType",
    "JobVersion",
    "TaskGroup",
    "DesiredStatus",
    "DesiredDescription",
    "ClientStatus",
    "ClientDescription",
    "DesiredTransition",
    "TaskStates",
    "FollowupEvalID",
    "NextAllocation",
    "RescheduleTracker",
    "PreemptedAllocations",
    "PreemptedByAllocation",
    "CreateIndex",
    "ModifyIndex",
    "CreateTime",
    "ModifyTime",
)


def stable_uuid(key: str) -> str:
    """A UUID-shaped identifier fixed by ``key``, so that a fleet has the same IDs on every run."""
    digest = hashlib.sha256(key.encode()).hexdigest()
    return f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def gpu_uuid(seed: object, node_name: str, slot: int) -> str:
    """The GPU UUID the fake NVML backend gives ``slot`` of ``node_name`` for the same seed."""
    digest = hashlib.sha256(f"{seed}/{node_name}/{slot}".encode()).hexdigest()
    return f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def node_names(count: int, prefix: str = "gpu-node-") -> list[str]:
    """Node names zero-padded to the widest number, exactly as ``sim.kube.fleet.build_fleet`` names them."""
    width = max(len(str(count - 1)), 1)
    return [f"{prefix}{n:0{width}d}" if width > 1 else f"{prefix}{n}" for n in range(count)]


def rfc3339(moment: datetime) -> str:
    """Go's RFC 3339 rendering with nanoseconds trimmed to microseconds."""
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def unix_nanos(moment: datetime) -> int:
    """Nanoseconds since the epoch (allocation CreateTime / ModifyTime)."""
    return int(moment.timestamp() * 1_000_000_000)


def _address(name: str) -> str:
    digest = hashlib.sha256(name.encode()).digest()
    return f"10.{digest[0]}.{digest[1]}.{max(digest[2], 1)}"


def gpu_device_group(node_name: str, gpus: int, seed: object, product: str) -> JsonDict:
    """``NodeResources.Devices[]`` as the NVIDIA device plugin fingerprints one node's GPUs."""
    return {
        "Vendor": GPU_VENDOR,
        "Type": GPU_TYPE,
        "Name": product,
        "Attributes": {
            "memory": {"Int": 81559, "Unit": "MiB"},
            "bar1": {"Int": 131072, "Unit": "MiB"},
            "power": {"Int": 700, "Unit": "W"},
            "cuda_cores": {"Int": 16896},
            "cores_clock": {"Int": 1980, "Unit": "MHz"},
            "memory_clock": {"Int": 2619, "Unit": "MHz"},
            "pci_bandwidth": {"Int": 63015, "Unit": "MB/s"},
            "driver_version": {"String": "550.54.15"},
            "display_state": {"String": "Disabled"},
            "persistence_mode": {"String": "Enabled"},
        },
        "Instances": [
            {
                "ID": gpu_uuid(seed, node_name, slot),
                "Healthy": True,
                "HealthDescription": "",
                "Locality": {"PciBusID": f"00000000:{0x18 + slot * 0x10:02X}:00.0"},
            }
            for slot in range(gpus)
        ],
    }


def gpu_node(
    name: str, *, gpus: int, index: int, now: datetime, seed: object = 0, product: str = "H100 80GB HBM3"
) -> JsonDict:
    """A ready, eligible Nomad client node with ``gpus`` NVIDIA GPUs, as ``GET /v1/node/:id`` shows it."""
    address = _address(name)
    return {
        "ID": stable_uuid(f"nomad-node/{name}"),
        "Name": name,
        "Datacenter": DATACENTER,
        "NodeClass": "",
        "NodePool": "default",
        "ComputedClass": "v1:" + stable_uuid(f"class/{gpus}/{product}")[:18].replace("-", ""),
        "HTTPAddr": f"{address}:4646",
        "Address": address,
        "TLSEnabled": False,
        "Version": NOMAD_VERSION,
        "Attributes": {
            "kernel.name": "linux",
            "kernel.version": "5.15.0-1063-nvidia",
            "os.name": "ubuntu",
            "os.version": "22.04",
            "cpu.arch": "amd64",
            "cpu.numcores": "192",
            "memory.totalbytes": str(2 * 1024**4),
            "unique.hostname": name,
            "unique.network.ip-address": address,
            "nomad.version": NOMAD_VERSION,
            "driver.docker": "1",
        },
        "Meta": {},
        "Drivers": {
            "docker": {"Detected": True, "Healthy": True, "HealthDescription": "Healthy", "Attributes": {}}
        },
        "HostVolumes": {},
        "NodeResources": {
            "Cpu": {"CpuShares": 384000, "TotalCpuCores": 192, "ReservableCpuCores": []},
            "Memory": {"MemoryMB": 2 * 1024 * 1024},
            "Disk": {"DiskMB": 7_000_000},
            "Networks": [],
            "Devices": [gpu_device_group(name, gpus, seed, product)] if gpus else [],
        },
        "ReservedResources": {"Cpu": {"CpuShares": 0}, "Memory": {"MemoryMB": 0}, "Disk": {"DiskMB": 0}},
        "Links": {},
        "Drain": False,
        "DrainStrategy": None,
        "SchedulingEligibility": "eligible",
        "Status": "ready",
        "StatusDescription": "",
        "StatusUpdatedAt": int(now.timestamp()),
        "LastDrain": None,
        "Events": [node_event("Node registered", "Cluster", now, index)],
        "CreateIndex": index,
        "ModifyIndex": index,
    }


def node_event(
    message: str, subsystem: str, now: datetime, index: int, details: JsonDict | None = None
) -> JsonDict:
    """One entry of a node's ``Events`` list."""
    return {
        "Message": message,
        "Subsystem": subsystem,
        "Details": details,
        "Timestamp": rfc3339(now),
        "CreateIndex": index,
    }


def node_stub(node: JsonDict, *, resources: bool = False) -> JsonDict:
    """The ``GET /v1/nodes`` entry for ``node``."""
    stub = {key: copy.deepcopy(node[key]) for key in _NODE_STUB_FIELDS}
    if resources:
        stub["NodeResources"] = copy.deepcopy(node["NodeResources"])
        stub["ReservedResources"] = copy.deepcopy(node["ReservedResources"])
    return stub


def alloc_stub(alloc: JsonDict, *, resources: bool = False) -> JsonDict:
    """The list-endpoint entry for ``alloc``."""
    stub = {key: copy.deepcopy(alloc.get(key)) for key in _ALLOC_STUB_FIELDS}
    if resources:
        stub["AllocatedResources"] = copy.deepcopy(alloc["AllocatedResources"])
    return stub


def job_stub(job: JsonDict) -> JsonDict:
    """The ``GET /v1/jobs`` entry for ``job``."""
    keys = (
        "ID",
        "ParentID",
        "Name",
        "Namespace",
        "Datacenters",
        "NodePool",
        "Type",
        "Priority",
        "Periodic",
        "ParameterizedJob",
        "Stop",
        "Status",
        "StatusDescription",
        "Version",
        "CreateIndex",
        "ModifyIndex",
        "JobModifyIndex",
        "SubmitTime",
    )
    stub = {key: copy.deepcopy(job.get(key)) for key in keys}
    stub["Periodic"] = bool(job.get("Periodic"))
    stub["ParameterizedJob"] = bool(job.get("ParameterizedJob"))
    return stub
