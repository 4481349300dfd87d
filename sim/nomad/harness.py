"""``NomadSim``: the emulated Nomad cluster (HTTP API, store, scheduler, ACL, faults) as one object.

Typical use in a test::

    with running_nomad_sim(nodes=4, acl=True) as sim:
        nomad_client = sim.client(sim.management_token)
        nomad_client.nodes.get_nodes()
        local = sim.client(sim.create_token("agent", 'node { policy = "write" }'), node="gpu-node-0")

Everything runs in this process: uvicorn serves HTTP on 127.0.0.1 from a background thread and the
scheduler reconciles from another. Drain deadlines follow ``clock``, so a test with a
:class:`~core.clock.ManualClock` moves time instead of sleeping.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from types import TracebackType
from typing import TYPE_CHECKING, Any

import structlog

from core.clock import Clock, RealClock
from sim.kube.faults import FaultInjector
from sim.nomad.acl import Acl, PolicyError
from sim.nomad.endpoints import Endpoints
from sim.nomad.http import NomadApp
from sim.nomad.jobs import JobSpecError, normalise_job
from sim.nomad.model import JsonDict, node_names
from sim.nomad.scheduler import SchedulerLoop
from sim.nomad.server import HttpServer
from sim.nomad.state import NomadState, is_live
from sim.nomad.workload_identity import WorkloadIdentities

if TYPE_CHECKING:
    import nomad

log = structlog.get_logger(__name__)


class NomadSim:
    """An emulated Nomad region: one server address, per-node client addresses, GPU nodes, scheduler."""

    def __init__(
        self,
        *,
        nodes: int = 16,
        gpus_per_node: int = 8,
        acl: bool = False,
        clock: Clock | None = None,
        controllers: bool = True,
        port: int = 0,
        gpu_seed: object = 0,
        scheduler_interval_s: float = 0.1,
    ) -> None:
        """``gpu_seed``: GPU instance IDs equal the fake NVML backend's UUIDs for the same seed and node."""
        if nodes < 0 or gpus_per_node < 0:
            raise ValueError("nodes and gpus_per_node must not be negative")
        self.clock: Clock = clock or RealClock()
        self.state = NomadState(self.clock)
        for name in node_names(nodes):
            self.state.add_node(name, gpus=gpus_per_node, seed=gpu_seed)
        self.acl = Acl(enabled=acl)
        self.management_token: str | None = None
        if acl:
            self.management_token = self.acl.bootstrap(self.clock.now(), self.state.index()).secret_id
        self.faults = FaultInjector(self.clock)
        # Signs tasks' JWTs; its public keys are served at /.well-known/jwks.json.
        self.workload_identities = WorkloadIdentities()
        endpoints = Endpoints(self.state, self.acl, lambda: self.address, self.workload_identities)
        self.app = NomadApp(self.state, self.acl, self.faults, endpoints.routes())
        self.server = HttpServer(self.app, port=port, on_start=self.app.open, on_stop=self.app.close)
        self.faults.bind_listener(self.server.stop, self.server.start)
        self.scheduler = SchedulerLoop(self.state, interval_s=scheduler_interval_s)
        self._controllers = controllers

    # --- lifecycle ------------------------------------------------------------------------------------

    def start(self) -> NomadSim:
        """Serve HTTP and (unless ``controllers=False``) run the scheduler."""
        self.server.start()
        if self._controllers:
            self.scheduler.start()
        log.info(
            "nomad sim started", address=self.address, nodes=len(self.state.node_refs()), acl=self.acl.enabled
        )
        return self

    def stop(self) -> None:
        """Stop the scheduler and the listener."""
        self.scheduler.stop()
        self.server.stop()

    def __enter__(self) -> NomadSim:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()

    # --- addresses and clients ------------------------------------------------------------------------

    @property
    def address(self) -> str:
        """The server's HTTP address, ``http://127.0.0.1:PORT``."""
        return self.server.url

    def client_address(self, node_name: str) -> str:
        """The address of ``node_name``'s local client agent (the same server, path-prefixed)."""
        self.state.node_id(node_name)  # unknown names fail here rather than at the first request
        return f"{self.address}/local/{node_name}"

    def node_id(self, name: str) -> str:
        """The Nomad node ID of ``name``."""
        return self.state.node_id(name)

    def client(self, token: str | None = None, node: str | None = None, timeout: int = 10) -> nomad.Nomad:
        """python-nomad configured for the server (or for ``node``'s local client agent)."""
        import nomad

        address = self.client_address(node) if node else self.address
        return nomad.Nomad(address=address, token=token, timeout=timeout)

    # --- ACL ------------------------------------------------------------------------------------------

    def create_token(self, name: str, rules: str) -> str:
        """A client token with one policy made from ``rules`` (HCL or JSON); returns its secret."""
        if not self.acl.enabled:
            raise RuntimeError("ACLs are off: start the sim with acl=True")
        try:
            self.acl.set_policy(f"{name}-policy", rules)
        except PolicyError as error:
            raise ValueError(str(error)) from None
        return self.acl.add_token(
            name, "client", [f"{name}-policy"], self.clock.now(), self.state.index()
        ).secret_id

    # --- jobs and waiting -----------------------------------------------------------------------------

    def register_job(self, job: JsonDict) -> str:
        """Register a Nomad JSON job (``{"Job": {...}}`` or the bare job object); returns the job ID."""
        body = job if "Job" in job else {"Job": job}
        try:
            normalised = normalise_job(body, now=self.clock.now())
        except JobSpecError as error:
            raise ValueError(str(error)) from None
        self.state.register_job(normalised)
        return str(normalised["ID"])

    def live_allocations(self, job_id: str) -> list[JsonDict]:
        """The job's allocations that are placed and running."""
        return [a for a in self.state.allocations(job_id=job_id) if is_live(a)]

    def wait_placed(self, job_id: str, count: int, timeout: float = 5.0) -> list[JsonDict]:
        """Wait until ``job_id`` has ``count`` running allocations; returns them (TimeoutError otherwise)."""
        deadline = time.monotonic() + timeout
        while True:
            since = self.state.index()
            live = self.live_allocations(job_id)
            if len(live) >= count:
                return live
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(
                    f"job {job_id}: {len(live)} of {count} allocations placed after {timeout} s"
                )
            self.state.wait_for_change(since, min(remaining, 0.1))

    def wait_for(self, predicate: Any, timeout: float = 5.0) -> None:
        """Wait until ``predicate()`` is true, re-checking on every change (TimeoutError otherwise)."""
        deadline = time.monotonic() + timeout
        while not predicate():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("condition not met in time")
            self.state.wait_for_change(self.state.index(), min(remaining, 0.1))

    # --- faults and counters --------------------------------------------------------------------------

    def outage(self, seconds: float, refuse_connections: bool = False) -> None:
        """Every request answers 503 for ``seconds``, or the port refuses connections for that long."""
        self.faults.outage(seconds, refuse_connections=refuse_connections)

    @property
    def mutating_requests(self) -> dict[str, int]:
        """Mutating requests served, by ``METHOD /path/template`` (for benchmarks)."""
        return dict(self.app.mutating_requests)

    @property
    def read_requests(self) -> dict[str, int]:
        """Read requests served, by ``METHOD /path/template``."""
        return dict(self.app.read_requests)


@contextlib.contextmanager
def running_nomad_sim(
    *,
    nodes: int = 16,
    gpus_per_node: int = 8,
    acl: bool = False,
    clock: Clock | None = None,
    controllers: bool = True,
    **options: Any,
) -> Iterator[NomadSim]:
    """A started :class:`NomadSim` for the duration of a ``with`` block (the basis of pytest fixtures)."""
    sim = NomadSim(
        nodes=nodes, gpus_per_node=gpus_per_node, acl=acl, clock=clock, controllers=controllers, **options
    )
    sim.start()
    try:
        yield sim
    finally:
        sim.stop()
