"""Wire a real :class:`~agent.loop.Agent` from :class:`~agent.settings.AgentSettings`.

NVML backend + XID watcher (+ kernel-log follower when enabled), the state file, the state machine
resumed from it, and the executor of the configured orchestrator (Kubernetes or Nomad; each client library is
imported only on its own orchestrator's nodes). ``library`` and ``api_client`` let the demo, the tests and
the benchmarks pass a ``FakeNvml`` and a ``KubeSim`` client instead of the driver and a cluster.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

import structlog

from agent.backends.dcgm.dcgmi import DcgmiHealthSource, DcgmiProcesses, DiagRun, run_diag
from agent.backends.dcgm.exporter import ExporterSource
from agent.backends.kernel_log import JournalFollower, KmsgFollower
from agent.backends.nvml.backend import NvmlBackend
from agent.backends.nvml.seam import NvmlLibrary
from agent.backends.nvml.xid_watcher import XidBuffer, XidWatcher
from agent.diagnostics.runner import DiagnosticsRunner, IdleProbe
from agent.diagnostics.state import DiagnosticsStore
from agent.loop import Agent, AgentParts, FindingSource
from agent.recovery.actions import NodeActions
from agent.recovery.wiring import with_recovery
from agent.settings import (
    AGGREGATOR_TOKEN_ENV,
    AgentSettings,
    DcgmSettings,
    KernelLogSettings,
    aggregator_token,
    with_profile,
)
from agent.sources.fabric import FabricEvents, FabricSource, FabricTrends
from agent.sources.wakeups import EventThread, XidCallback, XidFeed
from agent.sources.watchdog import Deadline, WatchedReadings, WatchedSnapshots, detector_stats
from agent.state.machine import HealthStateMachine
from agent.state.resume import AggregatorRecord, LostState, record_from
from agent.state.store import StateStore
from agent.telemetry.metrics import AgentMetrics
from agent.uplink.central_drain import CentralDrain, CentralDrainExecutor
from agent.uplink.client import AggregatorClient, AggregatorError, NotFound, tls_context
from agent.uplink.link import AggregatorLink
from agent.uplink.outbox import ReportOutbox
from agent.uplink.permit_gate import PermitGate
from core.clock import Clock, RealClock
from core.dcgm import DcgmReadings
from core.gpu_pods import DraKey, GpuPodMap
from core.plan_memory import RemediationMemory
from core.settings import SettingsError
from remediation.executor.contract import NodeExecutor
from remediation.executor.problem import ExecutorProblemFindings
from remediation.plan.profiles import NodeGroup
from remediation.plan.shadow import ShadowGate

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from remediation.kubernetes.drain.runner import DrainSetup

log = structlog.get_logger(__name__)

STATE_FILE_NAME = "state.json"
OUTBOX_FILE_NAME = "outbox.json"
DIAGNOSTICS_FILE_NAME = "diagnostics.json"
AGGREGATOR_RETRIES = 1  # the sender thread retries the outbox itself; one attempt keeps it responsive
XID_WAIT_MS = 200  # the watcher's longest NVML wait: few wake-ups when idle, a stop within 0.2 s


def build_agent(
    settings: AgentSettings,
    *,
    library: NvmlLibrary | None = None,
    api_client: ApiClient | None = None,
    clock: Clock | None = None,
    executor: NodeExecutor | None = None,
    recovery_actions: NodeActions | None = None,
) -> Agent:
    """An agent with the real parts (or the given fake NVML / API client / executor); not started yet.

    ``recovery_actions`` replaces the node's real reset / reboot / validation (commands, kured's sentinel,
    ``dcgmi``) when ``recovery.enabled``: a simulated node passes ``SimulatedNodeRecovery``.
    """
    chosen_clock: Clock = clock or RealClock()
    settings, profile = with_profile(settings, _node_group(settings, api_client))
    log.info("profile_chosen", node=settings.node_name, profile=profile.name, shadow=profile.shadow)
    if executor is None and settings.orchestrator == "nomad":
        executor, settings = _nomad_executor(settings, chosen_clock)
    node = settings.node_name
    wake = threading.Event()
    buffer = XidBuffer()
    nvml_library = library if library is not None else _real_library()
    backend = NvmlBackend(
        nvml_library,
        node_name=node,
        expected_gpu_count=settings.expected_gpu_count,
        clock=chosen_clock.now,
        xid_buffer=buffer,
    )
    fabric = FabricSource(backend, sysfs_root=settings.fabric.sysfs_root) if settings.fabric.enabled else None
    feed = XidFeed(
        wake=wake,
        nvml_buffer=buffer,
        watcher_factory=lambda sink: XidWatcher(
            nvml_library, sink=sink, clock=chosen_clock.now, timeout_ms=XID_WAIT_MS
        ),
        follower_factory=_follower_factory(
            settings.kernel_log, fabric.events if fabric is not None else None
        ),
        monotonic=chosen_clock.monotonic,
    )
    _ensure_directory(settings.state_dir)
    store = StateStore(settings.state_dir / STATE_FILE_NAME)
    saved = store.load()
    if saved is not None:
        log.info("state_resumed", node=node, state=saved.health.state.value)
    link, permits = _aggregator_parts(settings, chosen_clock)
    sources, source_closers = _dcgm_sources(settings.dcgm, chosen_clock, settings.detector_timeout_s)
    chosen_executor = executor or _executor(settings, api_client, chosen_clock)
    acting = _central_drain(settings, chosen_executor, link, permits, chosen_clock)
    nvml_deadline = Deadline("nvml", settings.detector_timeout_s, monotonic=chosen_clock.monotonic)
    watched_nvml = WatchedSnapshots(
        fabric if fabric is not None else backend, nvml_deadline, node=node, now=chosen_clock.now
    )
    deadlines = (nvml_deadline, *(source.deadline for source in sources))
    parts = AgentParts(
        source=watched_nvml,
        executor=with_recovery(acting, settings, nvml_library, actions=recovery_actions, wake=wake),
        state_machine=HealthStateMachine(node, settings.debounce, clock=chosen_clock.now, initial=saved),
        policy=settings.policy,
        store=store,
        memory=saved.memory if saved is not None else RemediationMemory(),
        checks=settings.checks,
        feed=feed,
        wake=wake,
        link=link,
        permits=permits,
        recovery=settings.recovery.rules(),
        reading_sources=sources,
        finding_sources=(
            *((FabricTrends(settings.checks),) if fabric is not None else ()),
            *_executor_problem_sources(chosen_executor),
            *((feed,) if settings.kernel_log.enabled else ()),
        ),
        diagnostics=diagnostics_runner(settings, chosen_executor, chosen_clock, wake),
        shadow=ShadowGate(profile.acting_policy, recovery=profile.acting_recovery)
        if profile.shadow
        else None,
        lost_state=None
        if saved is not None
        else LostState(node, _record_reader(link), clock=chosen_clock.now),
    )
    metrics = AgentMetrics(node)
    metrics.watch_detectors(detector_stats(deadlines))
    if link is not None:
        metrics.watch_outbox(link.outbox.stats)
    return Agent(
        node,
        parts,
        interval_s=settings.interval_s,
        dry_run=settings.dry_run,
        clock=chosen_clock,
        metrics=metrics,
        closers=(backend.close, *source_closers, *((link.close,) if link is not None else ())),
    )


def _node_group(settings: AgentSettings, api_client: ApiClient | None) -> NodeGroup:
    """What the node is, for its profile: as configured; on Kubernetes, the Node's labels when none were
    given and profiles are defined (one read at start-up)."""
    group = settings.node_group
    if not settings.profiles.definitions or settings.orchestrator != "kubernetes" or group.labels:
        return group
    from remediation.kubernetes.node_labels import read_node_labels  # the client loads on Kubernetes only

    labels = read_node_labels(api_client, settings.kubernetes.kubeconfig, settings.node_name)
    return group.model_copy(update={"labels": labels})


def _dcgm_sources(
    section: DcgmSettings, clock: Clock, timeout_s: float
) -> tuple[tuple[WatchedReadings, ...], tuple[Callable[[], object], ...]]:
    """The enabled DCGM reading sources (dcgm-exporter, dcgmi health), each under the watchdog's deadline,
    and what closes them."""
    sources: list[WatchedReadings] = []
    closers: list[Callable[[], object]] = []
    if section.exporter.enabled:
        exporter = ExporterSource(
            section.exporter.url,
            timeout_s=section.exporter.timeout_s,
            every_s=section.exporter.every_s,
            monotonic=clock.monotonic,
        )
        # the scrape has its own HTTP timeout; the deadline is never shorter than it
        deadline = Deadline(
            "dcgm_exporter", max(timeout_s, section.exporter.timeout_s + 1.0), monotonic=clock.monotonic
        )
        sources.append(
            WatchedReadings(exporter, deadline, stalled=lambda why: DcgmReadings(exporter_error=why))
        )
        closers.append(exporter.close)
    if section.dcgmi.enabled:
        dcgmi = DcgmiHealthSource(
            path=section.dcgmi.path,
            host=section.dcgmi.host,
            timeout_s=section.dcgmi.timeout_s,
            every_s=section.dcgmi.health_every_s,
            monotonic=clock.monotonic,
        )
        # dcgmi's own timeout kills a run that never ends; the loop waits for it at most timeout_s
        deadline = Deadline("dcgmi", timeout_s, monotonic=clock.monotonic)
        sources.append(WatchedReadings(dcgmi, deadline, stalled=lambda why: DcgmReadings(health_error=why)))
    return tuple(sources), tuple(closers)


def diagnostics_runner(
    settings: AgentSettings, executor: NodeExecutor, clock: Clock, wake: threading.Event
) -> DiagnosticsRunner | None:
    """Deep diagnostics (scheduled and on demand) with ``dcgmi`` from the dcgm section; None when both are
    off. The executor tells whether the node is idle when it can (Kubernetes, Nomad); otherwise only forced
    on-demand runs start."""
    section = settings.diagnostics
    if not (section.enabled or section.on_demand):
        return None
    path, host = settings.dcgm.dcgmi.path, settings.dcgm.dcgmi.host
    processes = DcgmiProcesses()  # the runner's close() ends a run still going at shutdown

    def diag(level: int, timeout_s: float) -> DiagRun:
        return run_diag(level, timeout_s, path=path, host=host, processes=processes)

    return DiagnosticsRunner(
        settings.node_name,
        section,
        clock=clock,
        diag=diag,
        probe=executor if isinstance(executor, IdleProbe) else None,
        store=DiagnosticsStore(settings.state_dir / DIAGNOSTICS_FILE_NAME),
        wake=wake,
        processes=processes,
    )


def _aggregator_parts(settings: AgentSettings, clock: Clock) -> tuple[AggregatorLink | None, PermitGate]:
    """The report link and the permit gate; without an aggregator URL, no link and a gate that never grants.

    Raises SettingsError when the token file cannot be read.
    """
    section = settings.aggregator
    if section.url is None:
        log.info("aggregator_not_configured", node=settings.node_name)
        return None, PermitGate(settings.node_name, None, clock=clock, retry_s=section.permit_retry_s)
    token = aggregator_token(section)  # fails at start, naming the file, when it cannot be read
    # From a file, the token is read for every request (a projected ServiceAccount token for Kubernetes
    # TokenReview rotates; so may a Secret): only a token from the environment is fixed.
    from_file = section.token_file if token and not os.environ.get(AGGREGATOR_TOKEN_ENV, "").strip() else None
    verify = None
    if section.url.startswith("https://"):  # loading CAs costs tens of ms: only for a TLS link
        try:
            verify = tls_context(section.ca_file, section.client_cert_file, section.client_key_file)
        except AggregatorError as exc:
            raise SettingsError(f"aggregator: {exc}") from None
    elif section.ca_file or section.client_cert_file:
        log.warning("aggregator_tls_files_unused", reason="aggregator.url is plain HTTP", url=section.url)
    client = AggregatorClient(
        section.url,
        None if from_file else token,
        timeout_s=section.timeout_s,
        retries=AGGREGATOR_RETRIES,
        token_file=from_file,
        verify=verify,
    )
    outbox = ReportOutbox(settings.state_dir / OUTBOX_FILE_NAME, max_reports=section.outbox_max_reports)
    link = AggregatorLink(
        settings.node_name,
        client,
        outbox,
        clock=clock,
        heartbeat_s=section.heartbeat_s,
        interval_s=settings.interval_s,
        orchestrator=settings.orchestrator,
        labels=section.labels,
    )
    gate = PermitGate(settings.node_name, client, clock=clock, retry_s=section.permit_retry_s)
    log.info(
        "aggregator_configured",
        node=settings.node_name,
        url=_without_userinfo(section.url),
        token_set=bool(token),
    )
    return link, gate


def _record_reader(link: AggregatorLink | None) -> Callable[[], AggregatorRecord | None] | None:
    """Reads the aggregator's record of this node once, for a start without a state file; None (and a
    warning) when the aggregator cannot say: the node's own marks then decide alone."""
    if link is None:
        return None

    def read() -> AggregatorRecord | None:
        try:
            return record_from(link.client.node(link.node))
        except NotFound:
            return AggregatorRecord()  # the aggregator never heard of the node: nothing open there
        except AggregatorError as exc:
            log.warning("aggregator_record_unavailable", node=link.node, error=str(exc))
            return None

    return read


def _without_userinfo(url: str) -> str:
    """The URL as it may be logged: a ``user:password@`` part is dropped (no secrets in logs)."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def _ensure_directory(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # the agent still marks its node; only restarts lose the incident
        log.error("state_dir_unusable", path=str(path), error=exc.strerror or str(exc))


def _real_library() -> NvmlLibrary:
    from agent.backends.nvml.seam import real_library

    return real_library()


def _executor(settings: AgentSettings, api_client: ApiClient | None, clock: Clock) -> NodeExecutor:
    """The Kubernetes executor of this node, from the given API client or the kubeconfig / in-cluster
    configuration."""
    # The kubernetes client loads on Kubernetes nodes only, as python-nomad loads on Nomad nodes only.
    from remediation.kubernetes.executor import KubernetesExecutor, executor_from_kubeconfig

    options: dict[str, Any] = {
        "retry": settings.kubernetes.retry,
        "resync_s": settings.kubernetes.resync_s,
        "forbidden_hold_s": settings.kubernetes.forbidden_hold_s,
        "clock": clock.now,
        "drain": drain_setup(settings, clock),
        "dra_driver": settings.kubernetes.dra_driver if _reads_dra(settings) else None,
    }
    if api_client is not None:
        return KubernetesExecutor(api_client, settings.node_name, **options)
    return executor_from_kubeconfig(settings.kubernetes.kubeconfig, settings.node_name, **options)


def _nomad_executor(settings: AgentSettings, clock: Clock) -> tuple[NodeExecutor, AgentSettings]:
    """The Nomad executor of the local node, and the settings with the node's Nomad name when none was set.

    Raises NomadConfigError with one line when the local Nomad agent cannot tell us our node.
    """
    from remediation.nomad.connect import connect_nomad_executor  # python-nomad loads on Nomad nodes only
    from remediation.nomad.drain import NomadDrainSetup

    drain = (
        NomadDrainSetup(
            namespace=settings.nomad.namespace,
            monotonic=clock.monotonic,
            same_fault_window_s=settings.requeue.same_fault_window_s,
        )
        if drains_itself(settings)
        else None
    )
    executor = connect_nomad_executor(settings.nomad, drain=drain)
    if "node_name" not in settings.model_fields_set and not os.environ.get("NODE_NAME"):
        settings = settings.model_copy(update={"node_name": executor.node_name})
    return executor, settings


def drains_itself(settings: AgentSettings) -> bool:
    """Whether the agent drains and requeues with its own credentials (``drain_by: agent``)."""
    return settings.policy.drain and settings.drain_by == "agent"


def _central_drain(
    settings: AgentSettings,
    executor: NodeExecutor,
    link: AggregatorLink | None,
    gate: PermitGate,
    clock: Clock,
) -> NodeExecutor:
    """``executor`` with its ``Drain`` ordered from the central remediator when ``drain_by: aggregator``."""
    if not settings.policy.drain or settings.drain_by != "aggregator":
        return executor
    client = link.client if link is not None else None
    central = CentralDrain(settings.node_name, client, gate, monotonic=clock.monotonic, sleep=time.sleep)
    return CentralDrainExecutor(executor, central)


def _executor_problem_sources(executor: NodeExecutor) -> tuple[FindingSource, ...]:
    """While the executor says it cannot act (a refused token), the verdict turns unknown."""
    return (ExecutorProblemFindings(executor),)


def drain_setup(settings: AgentSettings, clock: Clock) -> DrainSetup | None:
    """What the executor needs to drain the node itself, or None while ``policy.drain`` is off (the default)
    or the central remediator drains (``drain_by: aggregator``)."""
    if not drains_itself(settings):
        return None
    from remediation.kubernetes.drain.runner import DrainSetup

    return DrainSetup(
        drain_policy=settings.drain,
        requeue_policy=settings.requeue,
        clock=clock,
        gpu_pods=_gpu_pod_reader(settings) if settings.policy.partial_drain else None,
    )


def _reads_dra(settings: AgentSettings) -> bool:
    """Whether the executor reads the node's DRA GPUs: for device taints, and to place DRA-claimed GPUs
    of a partial drain."""
    policy = settings.policy
    return policy.gpu_quarantine != "off" or (policy.drain and policy.partial_drain)


def _gpu_pod_reader(settings: AgentSettings) -> Callable[[Mapping[DraKey, str]], GpuPodMap]:
    """Reads the kubelet's PodResources on this node when a partial drain starts."""
    from agent.backends.podresources import PodResourcesClient, gpu_pod_map

    client = PodResourcesClient(settings.kubernetes.pod_resources_socket)

    def read(dra_devices: Mapping[DraKey, str]) -> GpuPodMap:
        return gpu_pod_map(settings.node_name, client.list(), dra_devices=dra_devices)

    return read


def _follower_factory(settings: KernelLogSettings, fabric: FabricEvents | None) -> Any:
    if not settings.enabled:
        return None
    sink = fabric.push if fabric is not None else None
    if settings.source == "journal":

        def journal(callback: XidCallback) -> EventThread:
            return JournalFollower(callback, fabric=sink)

        return journal

    def kmsg(callback: XidCallback) -> EventThread:
        return KmsgFollower(callback, path=settings.path, fabric=sink)

    return kmsg
