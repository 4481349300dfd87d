"""The scheduler and the node drainer, reduced to what a GPU fleet needs, on one reconcile pass.

Placement (Nomad docs, "Scheduling" concepts): a node is feasible when it is ``ready``, ``eligible``, not
draining, in one of the job's datacenters, satisfies every job/group/task constraint and has enough free,
healthy device instances for every ``device`` request (instances held by live allocations are taken).
Among feasible nodes the pass bin-packs (fewest free GPUs left first, then name order) and, for a
replacement, avoids the previous allocation's node while another one fits. Service and batch groups keep
``Count`` allocations; system jobs keep one on every feasible node. A placement that fits nowhere waits for
the next pass, as a blocked evaluation would.

Drain (Nomad docs, ``nomad node drain``): service allocations are migrated (stopped and replaced
elsewhere) at once; batch allocations run on and are stopped without replacement at the deadline; system
allocations are stopped last unless ``IgnoreSystemJobs``; the drain completes (strategy cleared, node left
ineligible, ``LastDrain.Status`` ``complete``) when nothing but ignored system allocations remains.
Deviation: the migrate block's ``max_parallel`` and health checks are not waited for.
"""

from __future__ import annotations

import threading
import uuid
from collections import defaultdict
from dataclasses import dataclass

import structlog

from sim.nomad.constraints import device_satisfies, node_satisfies
from sim.nomad.jobs import DeviceRequest, device_requests, group_constraints
from sim.nomad.model import JsonDict, rfc3339, unix_nanos
from sim.nomad.state import NomadState, is_live

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Placement:
    """Where one allocation goes and which device instances it holds, task by task."""

    node: JsonDict
    devices: dict[str, list[JsonDict]]
    free_after: int


def _used_instances(state: NomadState) -> dict[str, set[str]]:
    used: dict[str, set[str]] = defaultdict(set)
    for alloc in state.alloc_refs():
        if not is_live(alloc):
            continue
        for task in alloc["AllocatedResources"]["Tasks"].values():
            for device in task.get("Devices") or []:
                used[alloc["NodeID"]].update(device["DeviceIDs"])
    return used


def _assign_devices(
    node: JsonDict, requests: list[DeviceRequest], used: set[str]
) -> dict[str, list[JsonDict]] | None:
    """Free instances for every request, or None when one cannot be met."""
    taken = set(used)
    assigned: dict[str, list[JsonDict]] = defaultdict(list)
    for request in requests:
        for group in node["NodeResources"].get("Devices") or []:
            if not request.matches(group["Vendor"], group["Type"], group["Name"]):
                continue
            if not device_satisfies(group, request.constraints):
                continue
            free = [i["ID"] for i in group["Instances"] if i.get("Healthy") and i["ID"] not in taken]
            if len(free) >= request.count:
                chosen = free[: request.count]
                taken.update(chosen)
                assigned[request.task].append(
                    {
                        "Vendor": group["Vendor"],
                        "Type": group["Type"],
                        "Name": group["Name"],
                        "DeviceIDs": chosen,
                    }
                )
                break
        else:
            return None
    return dict(assigned)


def _free_gpus(node: JsonDict, used: set[str]) -> int:
    return sum(
        1
        for group in node["NodeResources"].get("Devices") or []
        for instance in group["Instances"]
        if instance.get("Healthy") and instance["ID"] not in used
    )


def _schedulable(node: JsonDict, job: JsonDict) -> bool:
    datacenters = job.get("Datacenters") or ["*"]
    in_datacenter = "*" in datacenters or node["Datacenter"] in datacenters
    return bool(
        node["Status"] == "ready"
        and node["SchedulingEligibility"] == "eligible"
        and node["DrainStrategy"] is None
        and in_datacenter
    )


def _distinct_hosts(job: JsonDict, group: JsonDict) -> bool:
    return any(
        (c.get("Operand") == "distinct_hosts" and str(c.get("RTarget", "true")).lower() != "false")
        for c in group_constraints(job, group)
    )


class Scheduler:
    """One reconcile pass over drains and jobs; run it as often as the store changes."""

    def __init__(self, state: NomadState) -> None:
        self.state = state
        self._used: dict[str, set[str]] = {}  # node ID -> device instance IDs held, kept up to date in a pass

    def reconcile(self) -> None:
        """Advance every drain, then bring every job to its desired allocations."""
        with self.state.lock:
            for node in self.state.node_refs():
                if node["DrainStrategy"] is not None:
                    self._advance_drain(node)
            self._used = _used_instances(self.state)
            for job in self.state.job_refs():
                if not job["Stop"]:
                    self._reconcile_job(job)

    # --- drain ----------------------------------------------------------------------------------------

    def _live_on(self, node_id: str) -> list[JsonDict]:
        return [a for a in self.state.alloc_refs() if a["NodeID"] == node_id and is_live(a)]

    def _advance_drain(self, node: JsonDict) -> None:
        strategy = node["DrainStrategy"]
        ignore_system = bool(strategy["IgnoreSystemJobs"])
        deadline = self.state.drain_deadlines.get(node["ID"])
        past_deadline = deadline is not None and self.state.clock.monotonic() >= deadline
        live = self._live_on(node["ID"])
        others = [a for a in live if a["JobType"] != "system"]
        to_stop: list[tuple[JsonDict, bool]] = []
        for alloc in others:
            if alloc["JobType"] == "service":
                to_stop.append((alloc, True))
            elif past_deadline:  # batch: left to finish, stopped without replacement at the deadline
                to_stop.append((alloc, False))
        remaining_others = [a for a in others if all(a is not s for s, _ in to_stop)]
        if not ignore_system and not remaining_others:
            to_stop.extend((a, False) for a in live if a["JobType"] == "system")  # drained last
        if to_stop:
            with self.state.write("allocs", "evals") as index:
                for alloc, replace in to_stop:
                    alloc["DesiredTransition"]["Migrate"] = True
                    self.state.stop_alloc_within(alloc, index, "alloc is being migrated", replace=replace)
        still_live = self._live_on(node["ID"])
        if all(a["JobType"] == "system" and ignore_system for a in still_live):
            with self.state.write("nodes") as index:
                self.state.complete_drain(node, index)
            log.info("nomad sim drain complete", node=node["Name"])

    # --- jobs -----------------------------------------------------------------------------------------

    def _reconcile_job(self, job: JsonDict) -> None:
        for group in job["TaskGroups"]:
            if job["Type"] == "system":
                self._reconcile_system_group(job, group)
            else:
                self._reconcile_counted_group(job, group)
        live = any(a["JobID"] == job["ID"] and is_live(a) for a in self.state.alloc_refs())
        status = "running" if live else "pending"
        if job["Status"] != status:
            with self.state.write("jobs") as index:
                self.state.set_job_status(job, status, index)

    def _group_allocs(self, job: JsonDict, group: JsonDict) -> list[JsonDict]:
        return [
            a for a in self.state.alloc_refs() if a["JobID"] == job["ID"] and a["TaskGroup"] == group["Name"]
        ]

    def _reconcile_counted_group(self, job: JsonDict, group: JsonDict) -> None:
        allocs = self._group_allocs(job, group)
        excess = [a for a in allocs if is_live(a) and _slot(a) >= group["Count"]]
        if excess:
            with self.state.write("allocs") as index:
                for alloc in excess:
                    self.state.stop_alloc_within(
                        alloc, index, "alloc not needed due to job update", replace=False
                    )
            self._used = _used_instances(self.state)
        for slot in range(group["Count"]):
            mine = [a for a in allocs if _slot(a) == slot]
            if any(is_live(a) for a in mine):
                continue
            previous = max(mine, key=lambda a: a["CreateIndex"]) if mine else None
            if previous is not None and (
                previous["ID"] in self.state.no_replace or previous["NextAllocation"]
            ):
                continue
            self._place(job, group, slot, previous, candidates=self.state.node_refs())

    def _reconcile_system_group(self, job: JsonDict, group: JsonDict) -> None:
        allocs = self._group_allocs(job, group)
        covered = {a["NodeID"] for a in allocs if is_live(a)}
        for node in self.state.node_refs():
            if node["ID"] not in covered and _schedulable(node, job):
                self._place(job, group, 0, None, candidates=[node])

    def _place(
        self,
        job: JsonDict,
        group: JsonDict,
        slot: int,
        previous: JsonDict | None,
        *,
        candidates: list[JsonDict],
    ) -> None:
        placement = self._choose(job, group, previous, candidates)
        if placement is None:
            return
        with self.state.write("allocs", "evals") as index:
            alloc = self._new_alloc(job, group, slot, placement, index)
            if previous is not None:
                alloc["PreviousAllocation"] = previous["ID"]
                previous["NextAllocation"] = alloc["ID"]
                previous["ModifyIndex"] = index
            self.state.add_alloc(alloc)
            for task in alloc["AllocatedResources"]["Tasks"].values():
                for device in task["Devices"] or []:
                    self._used.setdefault(alloc["NodeID"], set()).update(device["DeviceIDs"])

    def _choose(
        self, job: JsonDict, group: JsonDict, previous: JsonDict | None, candidates: list[JsonDict]
    ) -> Placement | None:
        used = self._used
        constraints = group_constraints(job, group)
        requests = device_requests(group)
        occupied = (
            {a["NodeID"] for a in self._group_allocs(job, group) if is_live(a)}
            if _distinct_hosts(job, group)
            else set()
        )
        options: list[Placement] = []
        for node in candidates:
            if not _schedulable(node, job) or node["ID"] in occupied or not node_satisfies(node, constraints):
                continue
            held = used.get(node["ID"], set())
            devices = _assign_devices(node, requests, held)
            if devices is None:
                continue
            taken = sum(len(d["DeviceIDs"]) for task in devices.values() for d in task)
            options.append(Placement(node, devices, _free_gpus(node, held) - taken))
        if previous is not None and any(p.node["ID"] != previous["NodeID"] for p in options):
            options = [p for p in options if p.node["ID"] != previous["NodeID"]]  # reschedule penalty
        if not options:
            return None
        return min(options, key=lambda p: (p.free_after, p.node["Name"]))

    def _new_alloc(
        self, job: JsonDict, group: JsonDict, slot: int, placement: Placement, index: int
    ) -> JsonDict:
        now = self.state.clock.now()
        node = placement.node
        tasks = {
            task["Name"]: {
                "Cpu": {"CpuShares": int(task["Resources"].get("CPU") or 100)},
                "Memory": {"MemoryMB": int(task["Resources"].get("MemoryMB") or 300)},
                "Devices": placement.devices.get(task["Name"]) or None,
            }
            for task in group["Tasks"]
        }
        task_states: JsonDict = {
            task["Name"]: {
                "State": "running",
                "Failed": False,
                "Restarts": 0,
                "StartedAt": rfc3339(now),
                "FinishedAt": None,
                "Events": [],
            }
            for task in group["Tasks"]
        }
        return {
            "ID": str(uuid.uuid4()),
            "EvalID": str(uuid.uuid4()),
            "Name": f"{job['ID']}.{group['Name']}[{slot}]",
            "Namespace": job["Namespace"],
            "NodeID": node["ID"],
            "NodeName": node["Name"],
            "JobID": job["ID"],
            "JobType": job["Type"],
            "JobVersion": job["Version"],
            "TaskGroup": group["Name"],
            "DesiredStatus": "run",
            "DesiredDescription": "",
            "ClientStatus": "running",
            "ClientDescription": "Tasks are running",
            "DesiredTransition": {"Migrate": None, "Reschedule": None, "ForceReschedule": None},
            "TaskStates": task_states,
            "FollowupEvalID": "",
            "NextAllocation": "",
            "PreviousAllocation": "",
            "RescheduleTracker": None,
            "PreemptedAllocations": None,
            "PreemptedByAllocation": "",
            "AllocatedResources": {"Tasks": tasks, "Shared": {"DiskMB": 300}},
            "CreateIndex": index,
            "ModifyIndex": index,
            "AllocModifyIndex": index,
            "CreateTime": unix_nanos(now),
            "ModifyTime": unix_nanos(now),
        }


def _slot(alloc: JsonDict) -> int:
    name = str(alloc["Name"])
    return int(name[name.rindex("[") + 1 : -1])


class SchedulerLoop:
    """Runs :meth:`Scheduler.reconcile` on a thread after every change and every ``interval_s``.

    The periodic pass is what lets drain deadlines fire on a manual clock after a test advances it.
    """

    def __init__(self, state: NomadState, interval_s: float = 0.1) -> None:
        self.scheduler = Scheduler(state)
        self.state = state
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the loop thread (idempotent)."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="nomad-sim-scheduler", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the loop and wait for it."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout_s)

    def _run(self) -> None:
        seen = -1
        while not self._stop.is_set():
            # Without a change only a drain deadline can make a pass do something: skip idle passes.
            before = self.state.index()
            if before != seen or self._deadline_pending():
                try:
                    self.scheduler.reconcile()
                except Exception:  # a bug in one pass must not stop scheduling for the rest of the run
                    log.exception("nomad sim reconcile failed")
            # The index from before the pass: anything written during it (ours included) earns another pass.
            seen = before
            self.state.wait_for_change(seen, self.interval_s)

    def _deadline_pending(self) -> bool:
        with self.state.lock:
            return any(deadline is not None for deadline in self.state.drain_deadlines.values())
