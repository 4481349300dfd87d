"""Job specs as ``POST /v1/jobs`` takes them: validation, the defaults Nomad fills in, device requests.

Shapes follow the Nomad JSON job specification (developer.hashicorp.com/nomad/api-docs/json-jobs):
``Job`` with ``ID``, ``Type``, ``Datacenters``, ``Constraints``, ``TaskGroups[]`` (``Name``, ``Count``,
``Constraints``, ``ReschedulePolicy``, ``Migrate``, ``Tasks[]`` with ``Resources.Devices[]``).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from sim.nomad.model import JOB_TYPES, NAMESPACE, JsonDict, unix_nanos

# Nomad's default reschedule policies per job type (job specification, "reschedule" block defaults).
_DEFAULT_RESCHEDULE: Final[dict[str, JsonDict]] = {
    "service": {
        "Attempts": 0,
        "Interval": 0,
        "Delay": 30_000_000_000,
        "DelayFunction": "exponential",
        "MaxDelay": 3_600_000_000_000,
        "Unlimited": True,
    },
    "batch": {
        "Attempts": 1,
        "Interval": 86_400_000_000_000,
        "Delay": 5_000_000_000,
        "DelayFunction": "constant",
        "MaxDelay": 0,
        "Unlimited": False,
    },
}
_DEFAULT_MIGRATE: Final[JsonDict] = {
    "MaxParallel": 1,
    "HealthCheck": "checks",
    "MinHealthyTime": 10_000_000_000,
    "HealthyDeadline": 300_000_000_000,
}


class JobSpecError(ValueError):
    """A job spec the API refuses (400 with this message)."""


@dataclass(frozen=True)
class DeviceRequest:
    """One ``device`` block of a task: a name (``gpu``, ``nvidia/gpu``, ``nvidia/gpu/<model>``), a count."""

    task: str
    name: str
    count: int
    constraints: tuple[JsonDict, ...]

    def matches(self, vendor: str, type_: str, model: str) -> bool:
        """Whether a device group of that vendor/type/model answers this request's name."""
        parts = self.name.split("/")
        if len(parts) == 1:
            return parts[0] == type_
        if len(parts) == 2:
            return parts == [vendor, type_]
        return parts[0] == vendor and parts[1] == type_ and "/".join(parts[2:]) == model


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise JobSpecError(message)


def _constraints(value: Any, where: str) -> list[JsonDict]:
    if value is None:
        return []
    _require(isinstance(value, list), f"{where}: Constraints must be a list")
    for item in value:
        _require(isinstance(item, dict), f"{where}: each constraint must be an object")
        _require(isinstance(item.get("Operand", "="), str), f"{where}: Operand must be a string")
    return [dict(item) for item in value]


def _normalise_task(task: Any, group: str) -> JsonDict:
    _require(isinstance(task, dict) and bool(task.get("Name")), f"group {group}: every task needs a Name")
    out: JsonDict = copy.deepcopy(task)
    where = f"task {out['Name']}"
    out.setdefault("Driver", "docker")
    out["Constraints"] = _constraints(out.get("Constraints"), where)
    resources = out.get("Resources") or {}
    _require(isinstance(resources, dict), f"{where}: Resources must be an object")
    devices = resources.get("Devices") or []
    _require(isinstance(devices, list), f"{where}: Resources.Devices must be a list")
    for device in devices:
        _require(isinstance(device, dict) and bool(device.get("Name")), f"{where}: a device needs a Name")
        count = device.get("Count", 1)
        _require(isinstance(count, int) and count >= 1, f"{where}: device Count must be a positive integer")
        device["Count"] = count
        device["Constraints"] = _constraints(device.get("Constraints"), f"{where} device")
    resources["Devices"] = devices
    out["Resources"] = resources
    return out


def _normalise_group(group: Any, job_type: str) -> JsonDict:
    _require(isinstance(group, dict) and bool(group.get("Name")), "every task group needs a Name")
    out: JsonDict = copy.deepcopy(group)
    name = out["Name"]
    count = out.get("Count", 1)
    _require(isinstance(count, int) and count >= 0, f"group {name}: Count must be a non-negative integer")
    out["Count"] = count
    out["Constraints"] = _constraints(out.get("Constraints"), f"group {name}")
    tasks = out.get("Tasks") or []
    _require(isinstance(tasks, list) and bool(tasks), f"group {name}: at least one task is required")
    out["Tasks"] = [_normalise_task(task, name) for task in tasks]
    if job_type in _DEFAULT_RESCHEDULE:
        out["ReschedulePolicy"] = {**_DEFAULT_RESCHEDULE[job_type], **(out.get("ReschedulePolicy") or {})}
    else:
        out["ReschedulePolicy"] = None  # system jobs are never rescheduled
    if job_type == "service":
        out["Migrate"] = {**_DEFAULT_MIGRATE, **(out.get("Migrate") or {})}
    return out


def normalise_job(body: Any, *, now: datetime) -> JsonDict:
    """The stored job for a ``POST /v1/jobs`` body (``{"Job": {...}}``); raises :class:`JobSpecError`."""
    _require(isinstance(body, dict) and isinstance(body.get("Job"), dict), "request body needs a Job object")
    job: JsonDict = copy.deepcopy(body["Job"])
    _require(isinstance(job.get("ID"), str) and bool(job["ID"]), "job ID must be set")
    job_type = job.setdefault("Type", "service")
    _require(job_type in JOB_TYPES, f"job type {job_type!r} is not supported (service, batch, system)")
    job.setdefault("Name", job["ID"])
    job.setdefault("Namespace", NAMESPACE)
    job.setdefault("Region", "global")
    job.setdefault("Priority", 50)
    job.setdefault("Datacenters", ["*"])
    job.setdefault("NodePool", "default")
    job.setdefault("Meta", None)
    job["Constraints"] = _constraints(job.get("Constraints"), "job")
    groups = job.get("TaskGroups") or []
    _require(isinstance(groups, list) and bool(groups), "job must have at least one task group")
    job["TaskGroups"] = [_normalise_group(group, job_type) for group in groups]
    names = [group["Name"] for group in job["TaskGroups"]]
    _require(len(set(names)) == len(names), "task group names must be unique")
    job.update({"ParentID": "", "Stop": False, "Status": "pending", "StatusDescription": "", "Stable": False})
    job["SubmitTime"] = unix_nanos(now)
    return job


def device_requests(group: JsonDict) -> list[DeviceRequest]:
    """Every device request of a task group, task by task."""
    return [
        DeviceRequest(task["Name"], device["Name"], device["Count"], tuple(device["Constraints"]))
        for task in group["Tasks"]
        for device in task["Resources"]["Devices"]
    ]


def group_constraints(job: JsonDict, group: JsonDict) -> list[JsonDict]:
    """Constraints that apply to a group's placement: job, group and every task's."""
    task_constraints = [c for task in group["Tasks"] for c in task["Constraints"]]
    return [*job["Constraints"], *group["Constraints"], *task_constraints]
