"""The emulator's state store: nodes, jobs and allocations under one raft-like index.

Every write bumps one global index and stamps ``ModifyIndex`` on what it changed; each table (``nodes``,
``jobs``, ``allocs``) remembers the index of its last write, which is what ``X-Nomad-Index`` reports for
list endpoints. Readers get deep copies, so callers never see a half-applied change. Waiters — blocking
HTTP queries on the server's event loop and threads such as the scheduler — are woken on every commit.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import threading
import uuid
from collections.abc import Iterator
from datetime import timedelta

from core.clock import Clock
from sim.nomad import errors
from sim.nomad.model import JsonDict, gpu_node, node_event, rfc3339, unix_nanos

TABLES = ("nodes", "jobs", "allocs", "evals")


class NomadState:
    """Thread-safe store of API-shaped objects; the scheduler and the HTTP layer share it."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._index = 1
        self._table_index = dict.fromkeys(TABLES, 1)
        self._nodes: dict[str, JsonDict] = {}
        self._names: dict[str, str] = {}
        self._static_meta: dict[str, dict[str, str]] = {}
        self._dynamic_meta: dict[str, dict[str, str | None]] = {}
        self._jobs: dict[str, JsonDict] = {}
        self._allocs: dict[str, JsonDict] = {}
        self._async_waiters: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()
        self.no_replace: set[str] = set()  # allocations whose stop must not be followed by a replacement
        self.drain_deadlines: dict[
            str, float | None
        ] = {}  # node ID -> monotonic deadline (None: no deadline)

    # --- transactions and waiting ---------------------------------------------------------------------

    @contextlib.contextmanager
    def write(self, *tables: str) -> Iterator[int]:
        """Hold the lock for one write; yields the new index, stamped on ``tables`` and announced after."""
        with self._lock:
            before = (self._index, dict(self._table_index))
            self._index += 1
            for table in tables:
                self._table_index[table] = self._index
            try:
                yield self._index
            except BaseException:
                # A refused write (404, 400) changed nothing: the index must not move either.
                self._index, self._table_index = before
                raise
            self._changed.notify_all()
        self.wake_waiters()

    def wake_waiters(self) -> None:
        """Set every async waiter's event (a commit, or the server closing its open blocking queries)."""
        with self._lock:
            waiters = list(self._async_waiters)
        for loop, event in waiters:
            with contextlib.suppress(RuntimeError):  # the loop already closed
                loop.call_soon_threadsafe(event.set)

    @property
    def lock(self) -> threading.RLock:
        """The store's lock, for callers that read several objects consistently."""
        return self._lock

    def index(self, table: str | None = None) -> int:
        """The global index, or the index of a table's last write."""
        with self._lock:
            return self._index if table is None else self._table_index[table]

    def wait_for_change(self, since: int, timeout_s: float) -> bool:
        """Block a thread until the global index passes ``since``; False on timeout."""
        with self._changed:
            return self._changed.wait_for(lambda: self._index > since, timeout_s)

    @contextlib.contextmanager
    def async_waiter(self) -> Iterator[asyncio.Event]:
        """An :class:`asyncio.Event` set (on the current loop) whenever anything is committed."""
        event = asyncio.Event()
        entry = (asyncio.get_running_loop(), event)
        with self._lock:
            self._async_waiters.add(entry)
        try:
            yield event
        finally:
            with self._lock:
                self._async_waiters.discard(entry)

    # --- nodes ----------------------------------------------------------------------------------------

    def add_node(self, name: str, *, gpus: int, seed: object = 0, product: str = "H100 80GB HBM3") -> str:
        """Register a GPU client node; returns its ID."""
        with self.write("nodes") as index:
            node = gpu_node(name, gpus=gpus, index=index, now=self.clock.now(), seed=seed, product=product)
            self._nodes[node["ID"]] = node
            self._names[name] = node["ID"]
            self._static_meta[node["ID"]] = dict(node["Meta"])
            self._dynamic_meta[node["ID"]] = {}
            return str(node["ID"])

    def _node_ref(self, name_or_id: str) -> JsonDict:
        node_id = self._names.get(name_or_id, name_or_id)
        node = self._nodes.get(node_id)
        if node is None:
            raise errors.not_found("node")
        return node

    def node_by_id(self, node_id: str) -> JsonDict:
        """The node with exactly this ID (the HTTP API does not look nodes up by name)."""
        with self._lock:
            node = self._nodes.get(node_id)
            if node is None:
                raise errors.not_found("node")
            return copy.deepcopy(node)

    def node(self, name_or_id: str) -> JsonDict:
        """A node by name or ID, as ``GET /v1/node/:id`` shows it."""
        with self._lock:
            return copy.deepcopy(self._node_ref(name_or_id))

    def node_id(self, name: str) -> str:
        """The ID of the node called ``name``."""
        with self._lock:
            return str(self._node_ref(name)["ID"])

    def nodes(self) -> list[JsonDict]:
        """Every node, in registration order."""
        with self._lock:
            return [copy.deepcopy(node) for node in self._nodes.values()]

    def node_refs(self) -> list[JsonDict]:
        """The stored node objects themselves (scheduler use, under :attr:`lock`)."""
        return list(self._nodes.values())

    def touch_node(self, node: JsonDict, index: int, event: tuple[str, str] | None = None) -> None:
        """Stamp a node changed within a write; optionally append a node event (message, subsystem)."""
        node["ModifyIndex"] = index
        if event is not None:
            node["Events"].append(node_event(event[0], event[1], self.clock.now(), index))
            del node["Events"][:-10]  # Nomad keeps the latest ten node events

    def set_eligibility(self, node_id: str, eligible: bool) -> JsonDict:
        """``POST /v1/node/:id/eligibility``; a draining node cannot be made eligible."""
        with self.write("nodes") as index:
            node = self._nodes.get(node_id)
            if node is None:
                raise errors.not_found("node")
            if eligible and node["DrainStrategy"] is not None:
                raise errors.bad_request(
                    "can not set node's scheduling eligibility to eligible while it is draining"
                )
            wanted = "eligible" if eligible else "ineligible"
            if node["SchedulingEligibility"] != wanted:
                node["SchedulingEligibility"] = wanted
                message = (
                    "Node marked as eligible for scheduling"
                    if eligible
                    else "Node marked as ineligible for scheduling"
                )
                self.touch_node(node, index, (message, "Cluster"))
            return self.node_update_response(index)

    def node_update_response(self, index: int) -> JsonDict:
        """The body node writes answer with."""
        return {
            "EvalCreateIndex": index,
            "EvalIDs": [str(uuid.uuid4())],
            "Index": index,
            "NodeModifyIndex": index,
        }

    def set_drain(
        self,
        node_id: str,
        spec: JsonDict | None,
        *,
        mark_eligible: bool,
        meta: dict[str, str] | None,
        accessor: str,
    ) -> JsonDict:
        """``POST /v1/node/:id/drain``: start, update or (``spec`` None) cancel a drain."""
        with self.write("nodes") as index:
            node = self._nodes.get(node_id)
            if node is None:
                raise errors.not_found("node")
            now = self.clock.now()
            if spec is None:
                self._cancel_drain(node, index, mark_eligible=mark_eligible, meta=meta)
            else:
                self._start_drain(node, index, spec, meta=meta, accessor=accessor)
            node["Drain"] = node["DrainStrategy"] is not None
            node["StatusUpdatedAt"] = int(now.timestamp())
            return self.node_update_response(index)

    def _start_drain(
        self, node: JsonDict, index: int, spec: JsonDict, *, meta: dict[str, str] | None, accessor: str
    ) -> None:
        now = self.clock.now()
        deadline_ns = int(spec.get("Deadline") or 0)
        started = node["DrainStrategy"]["StartedAt"] if node["DrainStrategy"] else rfc3339(now)
        if deadline_ns < 0:
            force = rfc3339(now)
        elif deadline_ns > 0:
            force = rfc3339(now + timedelta(microseconds=deadline_ns / 1000))
        else:
            force = "0001-01-01T00:00:00Z"
        node["DrainStrategy"] = {
            "Deadline": deadline_ns,
            "IgnoreSystemJobs": bool(spec.get("IgnoreSystemJobs", False)),
            "ForceDeadline": force,
            "StartedAt": started,
        }
        # The deadline on the emulator's monotonic clock, kept beside the API object; -1 forces at once.
        self.drain_deadlines[node["ID"]] = (
            self.clock.monotonic() + deadline_ns / 1e9
            if deadline_ns > 0
            else (0.0 if deadline_ns < 0 else None)
        )
        node["SchedulingEligibility"] = "ineligible"
        previous = node["LastDrain"] or {}
        node["LastDrain"] = {
            "Status": "draining",
            "StartedAt": previous.get("StartedAt") if previous.get("Status") == "draining" else rfc3339(now),
            "UpdatedAt": rfc3339(now),
            "AccessorID": accessor,
            "Meta": dict(meta or {}),
        }
        self.touch_node(node, index, ("Node drain strategy set", "Drain"))

    def _cancel_drain(
        self, node: JsonDict, index: int, *, mark_eligible: bool, meta: dict[str, str] | None
    ) -> None:
        if node["DrainStrategy"] is not None:
            node["DrainStrategy"] = None
            self.drain_deadlines.pop(node["ID"], None)
            if node["LastDrain"] is not None:
                node["LastDrain"]["Status"] = "canceled"
                node["LastDrain"]["UpdatedAt"] = rfc3339(self.clock.now())
                if meta:
                    node["LastDrain"]["Meta"] = dict(meta)
            self.touch_node(node, index, ("Node drain disabled", "Drain"))
        if mark_eligible:
            node["SchedulingEligibility"] = "eligible"
            self.touch_node(node, index)

    def complete_drain(self, node: JsonDict, index: int) -> None:
        """The drainer's last step (within a write): strategy cleared, node stays ineligible."""
        node["DrainStrategy"] = None
        node["Drain"] = False
        self.drain_deadlines.pop(node["ID"], None)
        if node["LastDrain"] is not None:
            node["LastDrain"]["Status"] = "complete"
            node["LastDrain"]["UpdatedAt"] = rfc3339(self.clock.now())
        self.touch_node(node, index, ("Node drain complete", "Drain"))

    def metadata(self, node_id: str) -> JsonDict:
        """``GET /v1/client/metadata``: merged, dynamic and static node metadata."""
        with self._lock:
            node = self._nodes.get(node_id)
            if node is None:
                raise errors.not_found("node")
            return {
                "Meta": dict(node["Meta"]),
                "Dynamic": dict(self._dynamic_meta[node_id]),
                "Static": dict(self._static_meta[node_id]),
            }

    def apply_metadata(self, node_id: str, updates: dict[str, str | None]) -> JsonDict:
        """``POST /v1/client/metadata``: set keys, ``None`` unsets; the node's Meta changes at once."""
        with self.write("nodes") as index:
            node = self._nodes.get(node_id)
            if node is None:
                raise errors.not_found("node")
            dynamic = self._dynamic_meta[node_id]
            dynamic.update(updates)
            merged = dict(self._static_meta[node_id])
            for key, value in dynamic.items():
                if value is None:
                    merged.pop(key, None)
                else:
                    merged[key] = value
            node["Meta"] = merged
            self.touch_node(node, index)
        return self.metadata(node_id)

    # --- jobs -----------------------------------------------------------------------------------------

    def job(self, job_id: str) -> JsonDict:
        """A registered job, as ``GET /v1/job/:id`` shows it."""
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None:
                raise errors.not_found("job")
            return copy.deepcopy(job)

    def jobs(self) -> list[JsonDict]:
        """Every registered job."""
        with self._lock:
            return [copy.deepcopy(job) for job in self._jobs.values()]

    def job_refs(self) -> list[JsonDict]:
        """The stored job objects (scheduler use, under :attr:`lock`)."""
        return list(self._jobs.values())

    def register_job(self, job: JsonDict) -> JsonDict:
        """``POST /v1/jobs``: store a normalised job; a changed spec (or a stopped job) is a new version.

        A new version gets fresh allocations for every slot whose allocation has ended, which is how a
        batch job whose allocations were stopped for good (drain deadline, deregister) is run again.
        """
        with self.write("jobs", "evals") as index:
            previous = self._jobs.get(job["ID"])
            job = copy.deepcopy(job)
            changed = previous is None or previous["Stop"] or _spec(previous) != _spec(job)
            if previous is None:
                job["Version"], job["CreateIndex"] = 0, index
            else:
                job["Version"] = previous["Version"] + (1 if changed else 0)
                job["CreateIndex"] = previous["CreateIndex"]
            job["ModifyIndex"] = job["JobModifyIndex"] = index
            job["Status"] = previous["Status"] if previous and not previous["Stop"] else "pending"
            self._jobs[job["ID"]] = job
            if changed:
                self.no_replace -= {a["ID"] for a in self._allocs.values() if a["JobID"] == job["ID"]}
            return {
                "EvalID": str(uuid.uuid4()),
                "EvalCreateIndex": index,
                "JobModifyIndex": index,
                "Warnings": "",
                "Index": index,
                "LastContact": 0,
                "KnownLeader": False,
            }

    def deregister_job(self, job_id: str, *, purge: bool) -> JsonDict:
        """``DELETE /v1/job/:id``: stop the job's allocations; ``purge`` also forgets the job."""
        with self.write("jobs", "allocs", "evals") as index:
            job = self._jobs.get(job_id)
            if job is None:
                raise errors.not_found("job")
            for alloc in self._allocs.values():
                if alloc["JobID"] == job_id and is_live(alloc):
                    self.stop_alloc_within(alloc, index, "alloc not needed due to job update", replace=False)
            job.update({"Stop": True, "Status": "dead", "ModifyIndex": index, "JobModifyIndex": index})
            if purge:
                del self._jobs[job_id]
            return {
                "EvalID": str(uuid.uuid4()),
                "EvalCreateIndex": index,
                "JobModifyIndex": index,
                "Index": index,
            }

    # --- allocations ----------------------------------------------------------------------------------

    def allocation(self, alloc_id: str) -> JsonDict:
        """One allocation with its job, as ``GET /v1/allocation/:id`` shows it."""
        with self._lock:
            alloc = self._allocs.get(alloc_id)
            if alloc is None:
                raise errors.not_found("alloc")
            return self._with_job(alloc)

    def _with_job(self, alloc: JsonDict) -> JsonDict:
        full = copy.deepcopy(alloc)
        full["Job"] = copy.deepcopy(self._jobs.get(alloc["JobID"]))
        return full

    def allocations(self, job_id: str | None = None, node_id: str | None = None) -> list[JsonDict]:
        """Allocations (with their job), optionally of one job and/or on one node, oldest first."""
        with self._lock:
            return [
                self._with_job(alloc)
                for alloc in self._allocs.values()
                if (job_id is None or alloc["JobID"] == job_id)
                and (node_id is None or alloc["NodeID"] == node_id)
            ]

    def alloc_refs(self) -> list[JsonDict]:
        """The stored allocation objects (scheduler use, under :attr:`lock`)."""
        return list(self._allocs.values())

    def add_alloc(self, alloc: JsonDict) -> None:
        """Insert a placed allocation (within a write)."""
        self._allocs[alloc["ID"]] = alloc

    def stop_allocation(self, alloc_id: str) -> JsonDict:
        """``POST /v1/allocation/:id/stop``: the allocation stops and is replaced by the scheduler."""
        with self.write("allocs", "evals") as index:
            alloc = self._allocs.get(alloc_id)
            if alloc is None:
                raise errors.not_found("alloc")
            if is_live(alloc):
                alloc["DesiredTransition"]["Migrate"] = True
                self.stop_alloc_within(alloc, index, "alloc is being migrated", replace=True)
            return {"EvalID": str(uuid.uuid4()), "Index": index}

    def stop_alloc_within(self, alloc: JsonDict, index: int, description: str, *, replace: bool) -> None:
        """Stop an allocation inside a write: desired stop, client complete; remember whether to replace."""
        alloc["DesiredStatus"] = "stop"
        alloc["DesiredDescription"] = description
        alloc["ClientStatus"] = "complete"
        alloc["ClientDescription"] = "All tasks have completed"
        for task_state in alloc["TaskStates"].values():
            task_state["State"] = "dead"
            task_state["FinishedAt"] = rfc3339(self.clock.now())
        alloc["ModifyIndex"] = index
        alloc["ModifyTime"] = unix_nanos(self.clock.now())
        if not replace:
            self.no_replace.add(alloc["ID"])

    def set_job_status(self, job: JsonDict, status: str, index: int) -> None:
        """Change a job's status within a write (pending / running / dead)."""
        if job["Status"] != status:
            job["Status"] = status
            job["ModifyIndex"] = index


_BOOKKEEPING = frozenset(
    {
        "Version",
        "CreateIndex",
        "ModifyIndex",
        "JobModifyIndex",
        "Status",
        "StatusDescription",
        "SubmitTime",
        "Stable",
    }
)


def _spec(job: JsonDict) -> JsonDict:
    """A job without the fields the server maintains: what decides whether a registration changed it."""
    return {key: value for key, value in job.items() if key not in _BOOKKEEPING}


def is_live(alloc: JsonDict) -> bool:
    """Whether an allocation still holds its place: desired run and not finished on the client."""
    return bool(alloc["DesiredStatus"] == "run" and alloc["ClientStatus"] in ("pending", "running"))
