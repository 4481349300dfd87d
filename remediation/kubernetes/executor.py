"""``KubernetesExecutor``: applies plan steps to one Node through the official client, and watches it.

Every step is idempotent: it reads what it must, writes only when the node differs from the step, and treats
"already so" as done. API errors never escape ``apply``: a step that cannot be applied within its deadline
comes back ``ok=False`` and the agent loop applies it again on its next tick.

A 403 (RBAC without a verb, or an admission policy denying the change) is not retried pass after pass: it
is logged once as ``kubernetes_forbidden`` naming the verb and resource, every write is held for
``forbidden_hold_s``, and ``problem`` says why meanwhile (the agent turns it into an ``unknown``
``EXECUTOR_FORBIDDEN`` finding). The first write that goes through after the hold ends the problem.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import Any

import structlog
import urllib3.exceptions
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from core.clock import RealClock, utc_now
from core.gpu_pods import DraKey
from core.steps import (
    ApplyReport,
    Cordon,
    Drain,
    EmitEvent,
    NodeFacts,
    RemoveDeviceTaints,
    RemoveTaint,
    SetCondition,
    SetDeviceTaints,
    SetIncidentAnnotation,
    SetStateLabel,
    SetTaint,
    Step,
    StepResult,
    Uncordon,
)
from remediation.executor.common import ExecutorCommon
from remediation.executor.forbidden_hold import ForbiddenHold
from remediation.executor.step_apply import dry_run_report, log_applied, operation_or_answer, skip_reason
from remediation.kubernetes import bodies
from remediation.kubernetes.api import NodeApi
from remediation.kubernetes.device_taints import DeviceTaints
from remediation.kubernetes.drain.runner import DrainRunner, DrainSetup, DrainState
from remediation.kubernetes.errors import (
    KubeConflict,
    KubeExecutorError,
    KubeNotFound,
    KubeRefused,
    api_error,
    is_refusal,
    refusal_of,
)
from remediation.kubernetes.idle import gpu_pods
from remediation.kubernetes.names import CORDONED_ANNOTATION
from remediation.kubernetes.node_view import JsonObject, annotations_of, uid_of
from remediation.kubernetes.node_watch import NodeWatch
from remediation.kubernetes.retry import Failure, RetryPolicy
from remediation.kubernetes.settings import RetrySettings

log = structlog.get_logger(__name__)


class KubernetesExecutor(ExecutorCommon[DrainState]):
    """The ``NodeExecutor`` for one Kubernetes node (``remediation.executor.contract.NodeExecutor``).

    ``watch=False`` skips the watch thread: ``facts()`` then reads the node on every call (one-shot tools).
    ``writes_total`` counts mutating requests sent, ``requests_total`` every request (watch included).
    """

    gpu_workload = "pod"  # what :meth:`gpu_pods` lists, for the diagnostics' "busy" message

    def __init__(
        self,
        api_client: client.ApiClient,
        node_name: str,
        *,
        field_manager: str = "gpuhealth-agent",
        component: str = "gpuhealth-agent",
        retry: RetrySettings | None = None,
        watch: bool = True,
        resync_s: float = 300.0,
        clock: Callable[[], datetime] = utc_now,
        sleep: Callable[[float], None] = time.sleep,
        drain: DrainSetup | None = None,
        forbidden_hold_s: float = 300.0,
        dra_driver: str | None = None,
    ) -> None:
        if not node_name:
            raise KubeExecutorError("the Kubernetes executor needs a node name (set NODE_NAME)")
        self.node_name = node_name
        self.resync_s = resync_s
        self._api_client = api_client
        self._component = component
        settings = retry or RetrySettings()
        self._api: NodeApi = NodeApi(
            api_client, node_name, field_manager=field_manager, request_timeout_s=settings.request_timeout_s
        )
        self._retry = RetryPolicy(settings, sleep=sleep, wall=lambda: clock().timestamp())
        self._clock = clock
        self._hold = ForbiddenHold(forbidden_hold_s, lambda: clock().timestamp())
        self._closed = threading.Event()
        self._owns_client = False
        self._last_resync = clock()
        self._log = log.bind(node=node_name)
        self._watch: NodeWatch = NodeWatch(self._api)
        # Per-GPU quarantine (policy.gpu_quarantine): None keeps to the node taint, as without DRA.
        self._devices: DeviceTaints | None = (
            DeviceTaints(
                self._api.rest,
                node_name,
                clock=clock,
                driver=dra_driver,
                refresh_s=resync_s,
                field_manager=field_manager,
            )
            if dra_driver
            else None
        )
        self._watching = watch
        self._drain: DrainRunner | None = (
            DrainRunner(api_client, node_name, drain, drain.clock or RealClock(), self.dra_devices)
            if drain is not None
            else None
        )
        if watch:
            self._watch.start()

    # --- NodeExecutor ---------------------------------------------------------------------------------------

    def facts(self) -> NodeFacts:
        """The node's facts from the watch cache; read directly until the watch has listed it once.

        Before the node could ever be read (API server down since start), this is ``exists=False``: the
        planner then has nothing to act on, and the next tick tries again.
        """
        return self._with_devices(self._with_drain(self._observed_facts()))

    def _observed_facts(self) -> NodeFacts:
        if self._watching and self._watch.synced:
            return self._watch.facts()
        try:
            self._read_node()
        except KubeNotFound:
            self._watch.record(None)
            return self._watch.facts()
        except ApiException as error:
            self._log.warning("could not read the node", error=_one_line(error))
            if not self._watch.synced:
                return NodeFacts(exists=False)
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as error:
            self._log.warning("could not read the node", error=_one_line(error))
            if not self._watch.synced:
                return NodeFacts(exists=False)
        return self._watch.facts()

    def apply(self, steps: Sequence[Step], *, dry_run: bool = False) -> ApplyReport:
        """Apply ``steps`` in order; each gives a ``StepResult`` (never an exception for API errors)."""
        if dry_run:
            return dry_run_report(steps, self._log)
        report = ApplyReport()
        unavailable: str | None = None
        with self._watch.own_writes():
            for group in _write_groups(steps):
                if unavailable is not None:
                    # One step already spent its deadline on a server that is down or throttling us: the
                    # rest would only do the same, so the loop gets its answer now and re-applies next tick.
                    report.results += [
                        StepResult(step, ok=False, detail=unavailable, attempts=0) for step in group
                    ]
                    continue
                results, server_unavailable = self._apply_group(group)
                report.results += results
                if server_unavailable:
                    unavailable = f"skipped: API server unavailable ({results[-1].detail})"
        return report

    def close(self) -> None:
        """Stop the watch (within a second) and close the client if this executor created it."""
        self._closed.set()
        if self._watching:
            self._watch.close()
        if self._owns_client:
            owned: Any = self._api_client
            owned.close()

    # --- extras for the agent loop and the benchmarks ----------------------------------------------------

    def gpu_pods(self) -> list[str]:
        """Unfinished pods on the node that hold GPUs (one list; only when a diagnostic is due).

        Raises IdleProbeError when the pods cannot be listed."""
        return gpu_pods(self._api_client, self.node_name)

    def needs_resync(self) -> bool:
        """True once every ``resync_s``: time for the loop to re-plan from scratch to repair drift."""
        now = self._clock()
        if (now - self._last_resync).total_seconds() >= self.resync_s:
            self._last_resync = now
            return True
        return False

    # --- steps --------------------------------------------------------------------------------------------

    def _apply_group(self, group: Sequence[Step]) -> tuple[list[StepResult], bool]:
        """The results of one step, or of the node-metadata steps sent as one patch (``_write_groups``),
        and whether it failed because the server is down or throttling us."""
        if len(group) == 1:
            result, unavailable = self._apply_step(group[0])
            return [result], unavailable
        operation = functools.partial(self._set_metadata, group)
        return self._run(group, operation)

    def _apply_step(self, step: Step) -> tuple[StepResult, bool]:
        """The step's result, and whether it failed because the server is down or throttling us."""
        operation = operation_or_answer(step, self._operation, can_drain=self._drain is not None)
        if isinstance(operation, StepResult):
            return operation, False
        results, unavailable = self._run((step,), operation)
        return results[0], unavailable

    def _run(self, steps: Sequence[Step], operation: Callable[[], str]) -> tuple[list[StepResult], bool]:
        """Send ``operation`` (one request, retried by the policy) for ``steps``; each gets its result."""
        held = skip_reason(self._hold)
        if held is not None:
            return [StepResult(step=step, ok=False, detail=held, attempts=0) for step in steps], False
        name = "+".join(type(step).__name__ for step in steps)
        writes_before = self.writes_total
        outcome = self._retry.call(operation, step=name)
        failure = outcome.failure
        if failure is not None:
            detail = self._failed(failure, name)
            results = [StepResult(step=s, ok=False, detail=detail, attempts=outcome.attempts) for s in steps]
            return results, failure.server_unavailable
        detail = outcome.value or "done"
        wrote = self.writes_total > writes_before
        if wrote and self._hold.allowed():
            self._log.info("kubernetes_writes_allowed_again", step=name)
        log_applied(self._log, name, detail, outcome.attempts, wrote=wrote)
        details = [_metadata_detail(s) for s in steps] if len(steps) > 1 else [detail]
        results = [
            StepResult(step=s, ok=True, detail=d, attempts=outcome.attempts)
            for s, d in zip(steps, details, strict=True)
        ]
        return results, False

    def _failed(self, failure: Failure, name: str) -> str:
        """The step's detail; a refusal starts the write hold and is logged once (never the credential)."""
        refusal = failure.refusal
        if refusal is None:
            return failure.describe()
        problem = refusal.describe()
        if self._hold.refused(problem):
            self._log.error(
                "kubernetes_forbidden",
                step=name,
                verb=refusal.verb,
                resource=refusal.resource,
                cause=refusal.cause,
                problem=problem,
            )
        return f"HTTP {failure.status} forbidden: {problem}"  # the "HTTP <status>" lead of every failure

    def _operation(self, step: Step) -> Callable[[], str] | None:
        handlers: dict[type, Callable[[Any], str]] = {
            SetCondition: self._set_condition,
            SetStateLabel: self._set_label,
            SetIncidentAnnotation: self._set_incident,
            SetTaint: self._set_taint,
            RemoveTaint: self._remove_taint,
            Cordon: self._cordon,
            Uncordon: self._uncordon,
            EmitEvent: self._emit_event,
            Drain: self._start_drain,
            SetDeviceTaints: self._set_device_taints,
            RemoveDeviceTaints: self._remove_device_taints,
        }
        handler = handlers.get(type(step))  # RequestPermit: the agent loop asks the aggregator
        return None if handler is None else functools.partial(handler, step)

    def _set_condition(self, step: SetCondition) -> str:
        node, _ = self._known_node()  # conditions merge by type: no resourceVersion, a stale copy is harmless
        if bodies.condition_unchanged(step, node):
            return "unchanged"
        patch = bodies.condition_patch(step, node, self._clock())
        self._patch(patch, status=True)
        return "condition set"

    def _set_label(self, step: SetStateLabel) -> str:
        self._patch(bodies.label_patch(step.state))
        return "label set"

    def _set_incident(self, step: SetIncidentAnnotation) -> str:
        self._patch(bodies.incident_patch(step.incident_id))
        return _incident_detail(step)

    def _set_metadata(self, steps: Sequence[Step]) -> str:
        """The state label and the incident annotation in one merge patch: one write (and one watch event
        at every watcher of the node) instead of two. Details joined by "; ", one per step, in order."""
        labels: dict[str, str] = {}
        annotations: dict[str, str | None] = {}
        for step in steps:
            if isinstance(step, SetStateLabel):
                labels.update(bodies.label_patch(step.state)["metadata"]["labels"])
            elif isinstance(step, SetIncidentAnnotation):
                annotations.update(bodies.incident_patch(step.incident_id)["metadata"]["annotations"])
        self._patch({"metadata": {"labels": labels, "annotations": annotations}})
        return "; ".join(_metadata_detail(step) for step in steps)

    def _cordon(self, _step: Cordon) -> str:
        self._patch(bodies.cordon_patch())
        return "cordoned"

    def _set_taint(self, step: SetTaint) -> str:
        return self._edit_taints(lambda node: bodies.taints_with_ours(node, step, self._clock()), "taint set")

    def _remove_taint(self, _step: RemoveTaint) -> str:
        return self._edit_taints(bodies.taints_without_ours, "taint removed")

    def _edit_taints(self, edit: Callable[[JsonObject], list[JsonObject] | None], done: str) -> str:
        """Taints are an atomic list: edit the node as last seen and write the list back with that
        resourceVersion. The watch's copy saves a read before the write that matters most (a fault's
        taint); when it was stale the server answers 409, and the node is read and edited once more."""
        node, cached = self._known_node()
        while True:
            taints = edit(node)
            if taints is None:
                return "unchanged"
            try:
                self._patch(bodies.taints_patch(node, taints))
            except KubeConflict:
                if not cached:
                    raise  # a fresh read lost the race: the retry policy asks again
                node, cached = self._read_node(), False
                continue
            return done

    def _uncordon(self, _step: Uncordon) -> str:
        node = self._read_node()
        if annotations_of(node).get(CORDONED_ANNOTATION) != "true":
            # Whoever cordoned it now (a human, after our annotation went), it is theirs to undo.
            return "not cordoned by gpuhealth: left as it is"
        self._patch(bodies.uncordon_patch(node))
        return "uncordoned"

    def _emit_event(self, step: EmitEvent) -> str:
        cached = self._watch.node() if self._watch.synced else None
        node_uid = uid_of(cached) if cached is not None else uid_of(self._read_node())
        body = bodies.event_body(
            step, node_name=self.node_name, node_uid=node_uid, component=self._component, now=self._clock()
        )
        try:
            with _refusal_named("create", "events"):
                self._api.create_event(body)
        except KubeConflict as error:
            if error.already_exists:
                return "already recorded"  # same key as an Event a previous run emitted: one Event
            raise
        return "event recorded"

    def _start_drain(self, step: Drain) -> str:
        assert self._drain is not None  # _apply_step answers for an executor without one
        return self._drain.start(step.incident_id, step.deadline_s, gpus=step.gpus)

    def _set_device_taints(self, step: SetDeviceTaints) -> str:
        if self._devices is None:
            return "per-GPU quarantine is off: nothing to taint"
        with _refusal_named("create/patch/delete", "devicetaintrules"):
            return self._devices.set(step)

    def _remove_device_taints(self, _step: RemoveDeviceTaints) -> str:
        if self._devices is None:
            return "per-GPU quarantine is off: nothing to remove"
        with _refusal_named("delete", "devicetaintrules"):
            return self._devices.remove()

    def _with_devices(self, facts: NodeFacts) -> NodeFacts:
        if self._devices is None or not facts.exists:
            return facts
        return dataclasses.replace(facts, **dataclasses.asdict(self._devices.facts()))

    def dra_devices(self) -> dict[DraKey, str]:
        """The node's DRA GPUs as last read: (driver, pool, device) -> UUID; empty when not known or off."""
        if self._devices is None:
            return {}
        return {(d.driver, d.pool, d.device): uuid for uuid, d in self._devices.devices().items()}

    def _with_drain(self, facts: NodeFacts) -> NodeFacts:
        state = self.drain_state
        if state is None or not facts.exists:
            return facts
        return dataclasses.replace(facts, drained_incident=state.incident_id)

    # --- requests -----------------------------------------------------------------------------------------

    def _known_node(self) -> tuple[JsonObject, bool]:
        """The node as the synced watch last saw it (and True), else as read now (and False)."""
        cached = self._watch.node() if self._watch.synced else None
        return (cached, True) if cached is not None else (self._read_node(), False)

    def _read_node(self) -> JsonObject:
        with _refusal_named("get", "nodes"):
            node = self._api.read()
        self._watch.record(node)
        return node

    def _patch(self, body: JsonObject, *, status: bool = False) -> None:
        with _refusal_named("patch", "nodes/status" if status else "nodes"):
            node = self._api.patch_status(body) if status else self._api.patch(body)
        self._watch.record(node, ours=True)


def _incident_detail(step: SetIncidentAnnotation) -> str:
    return "annotation set" if step.incident_id is not None else "annotation removed"


def _metadata_detail(step: Step) -> str:
    """A merged metadata step's own result text, as it would read had it been sent alone."""
    return _incident_detail(step) if isinstance(step, SetIncidentAnnotation) else "label set"


_METADATA_STEPS = (SetStateLabel, SetIncidentAnnotation)


def _write_groups(steps: Sequence[Step]) -> list[tuple[Step, ...]]:
    """The steps in order, one per group, except that a run of plain metadata steps (the state label and
    the incident annotation, which the planner puts next to each other) is one group: the executor sends
    it as one merge patch. Neither carries a resourceVersion, so merging them changes no conflict rule."""
    groups: list[tuple[Step, ...]] = []
    for step in steps:
        previous = groups[-1] if groups else ()
        mergeable = (
            isinstance(step, _METADATA_STEPS) and previous and isinstance(previous[-1], _METADATA_STEPS)
        )
        if mergeable and not any(type(other) is type(step) for other in previous):
            groups[-1] = (*previous, step)
        else:
            groups.append((step,))
    return groups


@contextlib.contextmanager
def _refusal_named(verb: str, resource: str) -> Iterator[None]:
    """A refusal inside (a 403, or an admission policy's 422) becomes ``KubeRefused`` naming ``verb`` and
    ``resource`` (what RBAC must grant, or what the policy refused)."""
    try:
        yield
    except ApiException as error:
        if isinstance(error, KubeRefused) or not is_refusal(error):
            raise
        raise KubeRefused(error, refusal_of(error, verb=verb, resource=resource)) from error


def _one_line(error: BaseException) -> str:
    if isinstance(error, ApiException):
        return api_error(error).one_line()
    return f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"


def executor_from_kubeconfig(path: str | None, node_name: str, **kwargs: Any) -> KubernetesExecutor:
    """An executor for ``node_name`` configured from a kubeconfig file, or in-cluster when ``path`` is None.

    ``kwargs`` go to :class:`KubernetesExecutor`. Raises :class:`KubeExecutorError` with one line when the
    configuration cannot be loaded.
    """
    configuration = client.Configuration()
    loader: Any = config  # the config helpers are untyped
    try:
        if path is None:
            loader.load_incluster_config(client_configuration=configuration)
        else:
            loader.load_kube_config(config_file=path, client_configuration=configuration)
    except (ConfigException, OSError, ValueError) as error:
        where = "in-cluster configuration" if path is None else f"kubeconfig {path}"
        raise KubeExecutorError(f"cannot load {where}: {_one_line(error)}") from error
    api_client = client.ApiClient(configuration)
    executor = KubernetesExecutor(api_client, node_name, **kwargs)
    executor._owns_client = True
    return executor
