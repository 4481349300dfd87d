"""The fault suite's fleet, every part that a fault hits a process of its own.

- the emulated Kubernetes API server (``KubeSim`` with its controllers and the training-job operators), in
  the test's process, with a recorder on its store that sees every change of every node and JobSet;
- the aggregator, ``python -m aggregator`` with its central remediator (drains through the API server with
  its own kubeconfig) and a webhook sink to the alert log, on SQLite or PostgreSQL;
- the agents, ``fault_agent_host.py`` processes (the real agent on fake GPUs), optionally inside a network
  namespace;
- the alert log: an HTTP receiver that keeps every alert document it gets, with its id.

``history()`` gathers what ``fault_invariants.check`` reads. Addresses: loopback by default; a test that
partitions passes the host side of its own veth links (``netns.Link``) as ``api_host`` and ``aggregator_host``.
Everything started is stopped by ``close()`` (the fixture's finalizer), also when a test fails.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import httpx
import yaml
from fault_invariants import Ack, History, NodeSample, ReceivedAlert, StoredAlert, StoredNode
from live_aggregator import free_port
from repo_paths import REPO_ROOT
from sqlalchemy import Engine, create_engine, select
from waiting import SLOW_HANG_GUARD_S, wait_until

from agent.telemetry.http import BoundedHttpServer
from aggregator.store.tables import alert_deliveries, alerts, drains, incidents, nodes
from core.clock import RealClock
from sim.kube.harness import KubeSim

TOKEN = "fault-suite-token-0123456789abcdef"
NS = "train"
JOBSET_KEY = "jobsets.jobset.x-k8s.io"
TAINT = "gpuhealth.io/unhealthy"
STOP_S = 10.0
AGENT_HOST = Path(__file__).with_name("fault_agent_host.py")
AGGREGATOR = Path(__file__).with_name("fault_aggregator.py")
MOMENTS = (
    "before-taint",
    "tainted",
    "drain-ordered",
    "mid-drain",
    "mid-requeue",
    "mid-alert",
    "mid-recovery",
)
FAST_DRAIN = {"poll_interval_s": 0.1, "retry_initial_s": 0.1, "retry_max_s": 0.5, "pod_timeout_s": 20.0}
# The product's default: a first permit waits this long after the node turned bad. The suite's first soak
# ran before the settle existed: GPUHEALTH_FAULT_SETTLE_S=0 replays its runs as they were.
PERMIT_SETTLE_S = float(os.environ.get("GPUHEALTH_FAULT_SETTLE_S", "15") or 15)
# How long a trial waits for its moment: the drain's moments come only after the permit's settle wait, so
# a shorter wait (it was 10 s) never reached them and put the fault in the settle wait instead.
REACH_TIMEOUT_S = PERMIT_SETTLE_S + 25.0


class AlertLog:
    """Every alert document POSTed to it, in arrival order (at-least-once delivery shows as repeats)."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self._lock = threading.Lock()
        self.received: list[ReceivedAlert] = []
        log = self

        class Handler(BaseHTTPRequestHandler):
            timeout = 10.0

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                document = json.loads(self.rfile.read(length))
                with log._lock:
                    log.received.append(
                        ReceivedAlert(
                            id=str(document["id"]),
                            kind=str(document["kind"]),
                            status=str(document["status"]),
                            node=document.get("node"),
                            incident_id=document.get("incident_id"),
                        )
                    )
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_args: Any) -> None:
                return

        self._server = BoundedHttpServer((host, 0), Handler, max_connections=16)
        self.url = f"http://{host}:{self._server.server_address[1]}/alerts"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class ApiRecorder:
    """Every node's taint and cordon and every JobSet's restart count, at each change the store commits."""

    def __init__(self, kube: KubeSim) -> None:
        self._lock = threading.Lock()
        self.start = time.monotonic()
        self.samples: dict[str, list[NodeSample]] = {}
        self.restarts: dict[str, int] = {}
        self._own: dict[str, int] = {}
        self._suspends: dict[str, int] = {}
        self._suspended: dict[str, bool] = {}
        kube.store.add_listener(self._changed)
        for node in kube.store.list("nodes"):
            self._changed("ADDED", "nodes", node)

    def _changed(self, _event: str, resource: str, obj: dict[str, Any]) -> None:
        metadata = obj.get("metadata") or {}
        if resource == "nodes":
            spec = obj.get("spec") or {}
            sample = NodeSample(
                at=time.monotonic() - self.start,
                tainted=any(t.get("key") == TAINT for t in spec.get("taints") or []),
                cordoned=bool(spec.get("unschedulable")),
            )
            with self._lock:
                samples = self.samples.setdefault(str(metadata.get("name")), [])
                if not samples or (samples[-1].tainted, samples[-1].cordoned) != (
                    sample.tainted,
                    sample.cordoned,
                ):
                    samples.append(sample)
        elif resource == JOBSET_KEY:
            # A restart is the JobSet's own (status.restarts) or a suspend toggle (the requeue's fallback).
            name = f"{metadata.get('namespace')}/{metadata.get('name')}"
            own = int((obj.get("status") or {}).get("restarts") or 0)
            suspended = bool((obj.get("spec") or {}).get("suspend"))
            with self._lock:
                was = self._suspended.get(name, False)
                self._suspends[name] = self._suspends.get(name, 0) + (suspended and not was)
                self._suspended[name] = suspended
                self._own[name] = max(self._own.get(name, 0), own)
                self.restarts[name] = self._own[name] + self._suspends[name]

    def now(self) -> float:
        return time.monotonic() - self.start

    def tainted(self, node: str) -> bool:
        with self._lock:
            samples = self.samples.get(node) or []
            return bool(samples) and samples[-1].tainted

    def suspended(self, job: str) -> bool:
        with self._lock:
            return self._suspended.get(job, False)

    def snapshot(self) -> tuple[dict[str, list[NodeSample]], dict[str, int]]:
        with self._lock:
            return {k: list(v) for k, v in self.samples.items()}, dict(self.restarts)


def _spawn(argv: Sequence[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    with log.open("ab") as sink:
        return subprocess.Popen(
            list(argv),
            stdout=sink,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
            cwd=REPO_ROOT,
        )


def _stop(process: subprocess.Popen[bytes] | None) -> None:
    if process is None or process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(STOP_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _kill(process: subprocess.Popen[bytes] | None) -> None:
    if process is not None and process.poll() is None:
        process.send_signal(signal.SIGKILL)
        process.wait(STOP_S)


class AggregatorProcess:
    """``python -m aggregator`` on a free port of ``host``; ``kill()`` is SIGKILL, ``start()`` the same
    configuration again."""

    def __init__(
        self, root: Path, database_url: str, settings: dict[str, Any], host: str = "127.0.0.1"
    ) -> None:
        self.port = free_port()
        self.url = f"http://{host}:{self.port}"
        self.database_url = database_url
        self.config = root / f"aggregator-{self.port}.yaml"
        section = {"host": host, "port": self.port, "token": TOKEN, "database_url": database_url, **settings}
        if host != "127.0.0.1":  # the suite's own veth link to a test namespace: no TLS on a private wire
            section["allow_plain_http"] = True
        self.config.write_text(yaml.safe_dump({"aggregator": section}), encoding="utf-8")
        self.log = root / f"aggregator-{self.port}.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.clock_file = self.config.with_suffix(".clock")  # its wall clock step (stepped_clock)

    def start(self) -> AggregatorProcess:
        script = [sys.executable, str(AGGREGATOR), str(self.config), str(self.clock_file)]
        self.process = _spawn(script, self.log)
        process = self.process

        def ready() -> bool:
            if process.poll() is not None:
                raise AssertionError(f"aggregator exited: {self.log.read_text()[-2000:]}")
            try:
                return httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200
            except httpx.TransportError:
                return False

        wait_until(ready, timeout=SLOW_HANG_GUARD_S, interval=0.05, message="the aggregator to be ready")
        return self

    def kill(self) -> None:
        _kill(self.process)

    def close(self) -> None:
        _stop(self.process)


class AgentHost:
    """One ``fault_agent_host.py`` process for ``nodes``, inside network namespace ``netns`` when given."""

    def __init__(
        self, world: FaultWorld, nodes: Sequence[str], settings: dict[str, Any], netns: str | None
    ) -> None:
        self.world = world
        self.nodes = list(nodes)
        self.netns = netns
        self.spec = world.root / f"agents-{'-'.join(self.nodes)}.json"
        spec = {
            "nodes": self.nodes,
            "control": str(world.control),
            "state_root": str(world.root / "state"),
            "settings": settings,
        }
        self.spec.write_text(json.dumps(spec), encoding="utf-8")
        self.log = world.root / f"agents-{'-'.join(self.nodes)}.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def ready_file(self) -> Path:
        return self.world.control / f"ready-{'-'.join(self.nodes)}"

    def start(self, *, wait: bool = True) -> AgentHost:
        self.ready_file.unlink(missing_ok=True)
        prefix = ["ip", "netns", "exec", self.netns] if self.netns else []
        self.process = _spawn(
            [*prefix, sys.executable, str(AGENT_HOST), str(self.spec)],
            self.log,
            env={"GPUHEALTH_AGGREGATOR_TOKEN": TOKEN},
        )
        if wait:
            process = self.process

            def ready() -> bool:
                if process.poll() is not None:
                    raise AssertionError(f"agent host exited: {self.log.read_text()[-3000:]}")
                return self.ready_file.exists()

            wait_until(ready, timeout=SLOW_HANG_GUARD_S, interval=0.05, message=f"agents of {self.nodes}")
        return self

    def kill(self) -> None:
        _kill(self.process)

    def close(self) -> None:
        _stop(self.process)


@dataclass
class StoreView:
    nodes: dict[str, StoredNode]
    incidents: dict[str, str]
    open_incident: dict[str, str | None]
    alerts: list[StoredAlert]
    undelivered: int
    drains: dict[str, str]  # node -> phase of its latest drain


def read_store(database_url: str) -> StoreView:
    engine = create_engine(database_url)
    try:
        with engine.connect() as conn:
            node_rows = conn.execute(
                select(nodes.c.name, nodes.c.epoch, nodes.c.last_seq, nodes.c.incident_id)
            ).all()
            incident_rows = conn.execute(select(incidents.c.id, incidents.c.node)).all()
            sinks: dict[int, list[str]] = {}
            undelivered = 0
            for alert_id, sink, status in conn.execute(
                select(alert_deliveries.c.alert_id, alert_deliveries.c.sink, alert_deliveries.c.status)
            ).all():
                sinks.setdefault(int(alert_id), []).append(str(sink))
                undelivered += status != "delivered"
            alert_rows = conn.execute(
                select(
                    alerts.c.id,
                    alerts.c.key,
                    alerts.c.kind,
                    alerts.c.status,
                    alerts.c.node,
                    alerts.c.incident_id,
                    alerts.c.routed,
                )
            ).all()
            drain_rows = conn.execute(
                select(drains.c.node, drains.c.phase).order_by(drains.c.permit_id)
            ).all()
    finally:
        engine.dispose()
    return StoreView(
        nodes={r.name: StoredNode(r.name, r.epoch, int(r.last_seq)) for r in node_rows},
        incidents={r.id: r.node for r in incident_rows},
        open_incident={r.name: r.incident_id for r in node_rows},
        alerts=[
            StoredAlert(r.key, r.kind, r.status, r.node, r.incident_id, tuple(sinks.get(int(r.id), [])))
            for r in alert_rows
        ],
        # an alert not yet routed to its sinks has no delivery yet: it is not delivered either
        undelivered=undelivered + sum(1 for r in alert_rows if not r.routed),
        drains={r.node: r.phase for r in drain_rows},
    )


class FaultWorld:
    """The fleet of one fault run; see the module's docstring."""

    def __init__(
        self,
        root: Path,
        *,
        database_url: str | None = None,
        fleet: int = 4,
        api_host: str = "127.0.0.1",
        aggregator_host: str = "127.0.0.1",
        aggregator_settings: dict[str, Any] | None = None,
    ) -> None:
        self.root = root
        self.control = root / "control"
        self.control.mkdir(parents=True, exist_ok=True)
        self.kube = KubeSim(
            clock=RealClock(), nodes=fleet, workloads=True, host=api_host, bookmark_interval_s=0.2
        )
        self.kube.start()
        self.kube.store.create("namespaces", {"metadata": {"name": NS}})
        self.names = sorted(n["metadata"]["name"] for n in self.kube.store.list("nodes"))
        self.recorder = ApiRecorder(self.kube)
        self.kubeconfig = self.kube.write_kubeconfig(root / "kubeconfig")
        self.alert_log = AlertLog(aggregator_host)
        self.database_url = database_url or f"sqlite:///{root / 'aggregator.db'}"
        settings = {
            "budget_min_nodes": 2,
            "permit_settle_s": PERMIT_SETTLE_S,
            "report_interval_s": 1.0,
            "alert_poll_s": 0.2,
            "alert_sinks": [
                {
                    "name": "receiver",
                    "type": "webhook",
                    "url": self.alert_log.url,
                    "timeout_s": 2.0,
                    "backoff_initial_s": 0.2,
                    "backoff_max_s": 1.0,
                    "max_attempts": 1000,
                    "rate_per_minute": 6000,
                    "burst": 100,
                }
            ],
            "remediator": {
                "orchestrator": "kubernetes",
                "kubeconfig": str(self.kubeconfig),
                "name": "remediator-0",
                "poll_s": 0.1,
                "lease_s": 5.0,
                "drain": FAST_DRAIN,
            },
            **(aggregator_settings or {}),
        }
        self.aggregator = AggregatorProcess(root, self.database_url, settings, aggregator_host)
        self._settings, self._aggregator_host = settings, aggregator_host
        self.others: list[AggregatorProcess] = []  # more replicas on the same database (PostgreSQL)
        self.hosts: list[AgentHost] = []
        self.broken: set[str] = set()
        self.replicas = 0
        self.last_unsteady: str | None = None
        self._polling: Engine | None = None

    def replica(self, name: str) -> AggregatorProcess:
        """Another aggregator on the same database, its remediator named ``name`` (not started)."""
        remediator = {**self._settings["remediator"], "name": name}
        other = AggregatorProcess(
            self.root, self.database_url, {**self._settings, "remediator": remediator}, self._aggregator_host
        )
        self.others.append(other)
        return other

    def drain_owner(self, node: str) -> str | None:
        """The remediator that holds ``node``'s latest drain, or None."""
        try:
            with self._engine().connect() as conn:
                row = conn.execute(
                    select(drains.c.owner).where(drains.c.node == node).order_by(drains.c.permit_id.desc())
                ).first()
        except Exception:  # noqa: BLE001
            return None
        return None if row is None or row.owner is None else str(row.owner)

    def agent_settings(self, aggregator_url: str | None = None) -> dict[str, Any]:
        return {
            "interval_s": 1.0,
            "drain_by": "aggregator",
            "policy": {"drain": True, "cordon": True, "drain_deadline_s": 60.0},
            "aggregator": {
                "url": aggregator_url or self.aggregator.url,
                "permit_retry_s": 0.3,
                "timeout_s": 2.0,
                "heartbeat_s": 1.0,
            },
            "http": {"enabled": False},
            "kubernetes": {"kubeconfig": str(self.kubeconfig)},
        }

    def start_agents(
        self,
        nodes: Sequence[str],
        *,
        netns: str | None = None,
        aggregator_url: str | None = None,
        kubeconfig: Path | None = None,
    ) -> AgentHost:
        settings = self.agent_settings(aggregator_url)
        if kubeconfig is not None:
            settings["kubernetes"] = {"kubeconfig": str(kubeconfig)}
        host = AgentHost(self, nodes, settings, netns).start()
        self.hosts.append(host)
        return host

    def start_jobset(self, replicas: int = 2) -> None:
        """A JobSet of ``replicas`` pods, each taking a whole node."""
        container = {"name": "t", "image": "t", "resources": {"limits": {"nvidia.com/gpu": "8"}}}
        pod = {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0, "containers": [container]}
        job = {"spec": {"parallelism": 1, "completions": 1, "backoffLimit": 3, "template": {"spec": pod}}}
        self.kube.store.create(
            JOBSET_KEY,
            {
                "apiVersion": "jobset.x-k8s.io/v1alpha2",
                "kind": "JobSet",
                "metadata": {"name": "llm", "namespace": NS},
                "spec": {"replicatedJobs": [{"name": "workers", "replicas": replicas, "template": job}]},
            },
        )
        self.replicas = replicas
        wait_until(lambda: len(self.running()) == replicas, message="the JobSet's pods to run")

    def running(self) -> list[dict[str, Any]]:
        return [
            pod
            for pod in self.kube.store.list("pods", NS)
            if pod["status"].get("phase") == "Running" and "deletionTimestamp" not in pod["metadata"]
        ]

    def step_clock(self, who: str, seconds: float) -> None:
        """Step the wall clock of ``who`` (a node's agent, or ``aggregator``) by ``seconds`` (monotonic
        clocks do not move, as with a real step)."""
        path = self.aggregator.clock_file if who == "aggregator" else self.control / f"clock-{who}"
        path.write_text(str(seconds), encoding="utf-8")

    def break_node(self, node: str) -> None:
        """GPU 0 of ``node`` falls off the bus (XID 79), for good."""
        self.broken.add(node)
        (self.control / f"lost-{node}").write_text("79", encoding="utf-8")

    def suspended(self, job: str = f"{NS}/llm") -> bool:
        return self.recorder.suspended(job)

    def restarted(self) -> bool:
        return bool(self.recorder.snapshot()[1].get(f"{NS}/llm"))

    def evicted(self, node: str) -> bool:
        """No pod of the JobSet runs on ``node`` any more (evicted or going)."""
        return not any(p["spec"].get("nodeName") == node for p in self.running())

    def drain_phase(self, node: str) -> str | None:
        """The phase of ``node``'s latest central drain in the store, or None (none, or unreadable)."""
        try:
            with self._engine().connect() as conn:
                row = conn.execute(
                    select(drains.c.phase).where(drains.c.node == node).order_by(drains.c.permit_id.desc())
                ).first()
        except Exception:  # noqa: BLE001 - a store that is down has no answer yet
            return None
        return None if row is None else str(row.phase)

    def incident_known(self, node: str) -> bool:
        """The aggregator's store has an open incident on ``node``."""
        try:
            with self._engine().connect() as conn:
                return (
                    conn.execute(select(nodes.c.incident_id).where(nodes.c.name == node)).scalar() is not None
                )
        except Exception:  # noqa: BLE001
            return False

    def alert_pending(self, node: str) -> bool:
        """An alert about ``node`` is stored and the receiver has not got it yet."""
        try:
            with self._engine().connect() as conn:
                keys = {
                    str(k) for (k,) in conn.execute(select(alerts.c.key).where(alerts.c.node == node)).all()
                }
        except Exception:  # noqa: BLE001
            return False
        return bool(keys - {alert.id for alert in self.alert_log.received})

    def _engine(self) -> Engine:
        if self._polling is None:
            self._polling = create_engine(self.database_url)
        return self._polling

    def reach(self, node: str, moment: str, timeout_s: float = REACH_TIMEOUT_S) -> str:
        """Wait until ``node``'s incident reaches ``moment`` (one of :data:`MOMENTS`); returns the moment, or
        ``late:<moment>`` when it went past it unseen (the trial then still counts, at a later moment), or
        ``timeout:<moment>`` when neither happened within ``timeout_s`` (the fault then lands wherever the
        incident is: the tally says so)."""
        reached: Callable[[], bool] = {
            "before-taint": lambda: True,
            "tainted": lambda: self.recorder.tainted(node),
            "drain-ordered": lambda: self.drain_phase(node) in {"requested", "running"},
            "mid-drain": lambda: self.evicted(node) and not self.restarted(),
            "mid-requeue": lambda: self.suspended(),  # noqa: PLW0108 - typed alike
            "mid-alert": lambda: self.alert_pending(node),
            "mid-recovery": self.steady,
        }[moment]
        done: Callable[[], bool] = {
            "before-taint": lambda: False,
            "tainted": lambda: False,
            "drain-ordered": lambda: self.drain_phase(node) not in {None, "requested", "running"},
            "mid-drain": self.restarted,
            "mid-requeue": lambda: self.restarted() and not self.suspended(),
            "mid-alert": lambda: not self.alert_pending(node) and bool(self.alert_log.received),
            "mid-recovery": lambda: False,
        }[moment]
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if reached():
                return moment
            if done():
                return f"late:{moment}"
            time.sleep(0.005)
        return f"timeout:{moment}"

    def unsteady(self) -> str | None:  # noqa: PLR0911 - one return per unmet condition, named
        """Why the fleet is not steady yet, or None when it is: every broken node tainted, cordoned,
        drained, its incident open; the JobSet restarted and running off the broken nodes; every alert
        delivered."""
        try:
            store = read_store(self.database_url)
        except Exception as exc:  # noqa: BLE001 - a database that is failing over is simply not steady yet
            return f"store unreadable: {exc}"
        samples, restarts = self.recorder.snapshot()
        for node in sorted(self.broken):
            last = (samples.get(node) or [NodeSample(0, False, False)])[-1]
            if not (last.tainted and last.cordoned):
                return f"{node}: tainted={last.tainted} cordoned={last.cordoned}"
            if store.open_incident.get(node) is None:
                return f"{node}: no open incident in the store"
            if store.drains.get(node) != "complete":
                return f"{node}: drain {store.drains.get(node)}"
        pods = self.running()
        if self.broken and not restarts.get(f"{NS}/llm"):
            return "the JobSet was not restarted"
        if len(pods) != self.replicas or any(p["spec"].get("nodeName") in self.broken for p in pods):
            return f"JobSet pods running on {sorted(p['spec'].get('nodeName') for p in pods)}"
        if store.undelivered:
            return f"{store.undelivered} alert deliveries pending"
        if self.broken and not store.alerts:
            return "no alert raised"
        return None

    def steady(self) -> bool:
        self.last_unsteady = self.unsteady()
        return self.last_unsteady is None

    def wait_steady(self, within_s: float) -> float | None:
        """Seconds (recorder's clock) at which the fleet was steady, or None after ``within_s``."""
        if wait_until(self.steady, timeout=within_s, interval=0.1):
            return self.recorder.now()
        return None

    def acks(self) -> list[Ack]:
        found: list[Ack] = []
        for journal in sorted(self.control.glob("acks-*.jsonl")):
            for line in journal.read_text(encoding="utf-8").splitlines():
                if line.strip():
                    item = json.loads(line)
                    found.append(
                        Ack(
                            item["node"],
                            item["epoch"],
                            int(item["seq"]),
                            bool(item["accepted"]),
                            item["incident"],
                        )
                    )
        return found

    def history(self, *, healed_at: float | None, steady_at: float | None, within_s: float) -> History:
        """What the run recorded, read in an order that never makes a promise look broken when it held: the
        agents' journals before the store (an ack written after the store was read is not in it yet), the
        store while every alert in it is delivered (the fleet keeps living: an alert raised a moment after the
        steady state, say a node seen stale after the aggregator's restart, is still on its way), and the
        receiver's log last."""
        acks = self.acks()
        store = read_store(self.database_url)
        deadline = time.monotonic() + within_s
        while store.undelivered and steady_at is not None and time.monotonic() < deadline:
            time.sleep(0.1)
            store = read_store(self.database_url)
        samples, restarts = self.recorder.snapshot()
        return History(
            acks=acks,
            nodes=store.nodes,
            incidents=store.incidents,
            alerts=store.alerts,
            received=list(self.alert_log.received),
            samples=samples,
            restarts=restarts,
            broken=set(self.broken),
            healed_at=healed_at,
            steady_at=steady_at,
            steady_within_s=within_s,
        )

    def close(self) -> None:
        if self._polling is not None:
            self._polling.dispose()
        for host in self.hosts:
            host.close()
        for other in self.others:
            other.close()
        self.aggregator.close()
        self.alert_log.close()
        self.kube.stop()
