"""A real Kubernetes control plane for the tests and ``gpuhealth demo --cluster real``: etcd,
kube-apiserver and kube-controller-manager, with kube-scheduler and KWOK when they are built, and the JobSet,
Kueue and Trainer managers on demand.

The binaries come from ``tools/build-control-plane.sh`` (built from Go modules into a cache directory);
``GPUHEALTH_CONTROL_PLANE_BIN`` names the directory holding them, otherwise the script is asked (``--check``,
which never builds) where its warm cache is. :func:`find_binaries` says why they cannot be used.

:class:`ControlPlane` starts the three processes on free loopback ports in a temporary directory, each in its
own process group, with everything they need made here: a CA and the API server's serving certificate, the
service-account signing key, client certificates for the people and nodes of a test, a static token for the
admin. The API server runs with ``--authorization-mode=Node,RBAC`` and the admission plugins
``NodeRestriction`` and ``ValidatingAdmissionPolicy``; the controller manager runs the controllers the
tests need, each with its own service-account credentials. :meth:`ControlPlane.stop` ends the process
groups and removes the directory: nothing is left behind.

When ``tools/build-kube-stack.sh`` has built them (``sim.realkube.stack.find_stack``), kube-scheduler places
the pods and KWOK runs the nodes a test makes with ``kwok.x-k8s.io/node=fake`` (``sim.realkube.stack``
says how); :meth:`ControlPlane.controller` starts a JobSet, Kueue or Trainer manager the first time it is
asked for and keeps it while the plane runs.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import structlog
import yaml
from cryptography.hazmat.primitives import serialization
from kubernetes import client

from sim.realkube.certificates import CertificateAuthority, new_key, pem_of_key
from sim.realkube.stack import (
    KINDS,
    START_ORDER,
    Controller,
    ControlPlaneUnavailable,
    find_stack,
    free_port,
    how_to_build,
    kwok_config,
)

__all__ = [
    "NODE_MONITOR_GRACE_S",
    "Binaries",
    "ControlPlane",
    "ControlPlaneUnavailable",
    "find_binaries",
    "free_port",
]

log = structlog.get_logger("control_plane")

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO_ROOT / "tools" / "build-control-plane.sh"
BIN_ENV = "GPUHEALTH_CONTROL_PLANE_BIN"
NAMES = ("etcd", "kube-apiserver", "kube-controller-manager")
HOW_TO_BUILD = (
    "real control plane not built: run tools/build-control-plane.sh (about 10 min cold, from Go modules), "
    f"or set {BIN_ENV} to a directory holding etcd, kube-apiserver and kube-controller-manager"
)
START_TIMEOUT_S = 120.0  # hang guard: the API server is ready in about 10 s on an idle 2-core machine
STOP_TIMEOUT_S = 15.0

# The controllers the tests rely on (kube-controller-manager --controllers; 1.37 names).
CONTROLLERS = (
    "job-controller",
    "deployment-controller",
    "disruption-controller",
    "garbage-collector-controller",
    "serviceaccount-token-controller",
    "serviceaccount-controller",
    "namespace-controller",
    "daemonset-controller",
    "replicaset-controller",
    "node-lifecycle-controller",
    "pod-garbage-collector-controller",
    "root-ca-certificate-publisher-controller",
)
NODE_MONITOR_GRACE_S = 25
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"


@dataclass(frozen=True)
class Binaries:
    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    crd_dir: Path  # CRDs the chart's dry-run needs (ServiceMonitor, PodMonitor)


def find_binaries() -> Binaries:
    """The built binaries; raises :class:`ControlPlaneUnavailable` with a one-line how-to otherwise."""
    directory = os.environ.get(BIN_ENV)
    paths: dict[str, Path] = {}
    if directory:
        paths = {name: Path(directory) / name for name in NAMES}
        paths["crds"] = Path(directory) / "crds"
    else:
        try:
            done = subprocess.run(
                [str(BUILD_SCRIPT), "--check"], capture_output=True, text=True, timeout=60, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ControlPlaneUnavailable(f"{HOW_TO_BUILD} ({exc})") from exc
        if done.returncode != 0:
            raise ControlPlaneUnavailable(HOW_TO_BUILD)
        for line in done.stdout.splitlines():
            name, _, path = line.partition("=")
            paths[name] = Path(path)
    missing = [name for name in NAMES if not (name in paths and os.access(paths[name], os.X_OK))]
    if missing:
        raise ControlPlaneUnavailable(f"{HOW_TO_BUILD} (missing: {', '.join(missing)})")
    return Binaries(
        paths["etcd"], paths["kube-apiserver"], paths["kube-controller-manager"], paths.get("crds", Path())
    )


# --- the processes ------------------------------------------------------------------------------------------


@dataclass
class _Process:
    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    log_file: IO[bytes]

    def tail(self, lines: int = 30) -> str:
        self.log_file.flush()
        text = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])

    def stop(self) -> None:
        """SIGTERM to the process group, SIGKILL after the hang guard."""
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(STOP_TIMEOUT_S)
        self.log_file.close()


class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager on loopback; see the module docstring."""

    def __init__(
        self,
        binaries: Binaries,
        *,
        controllers: tuple[str, ...] = CONTROLLERS,
        stack: dict[str, Path] | None = None,
    ) -> None:
        self.binaries = binaries
        self.controllers = controllers
        self.stack = find_stack() if stack is None else stack
        self.managers: dict[str, Controller] = {}
        self.root = Path(tempfile.mkdtemp(prefix="gpuhealth-cp-"))
        self.ca = CertificateAuthority.create()
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.admin_token = secrets.token_urlsafe(32)
        self.processes: list[_Process] = []
        self._client_certs: dict[tuple[str, tuple[str, ...]], tuple[Path, Path]] = {}
        self.ca_file = self.root / "ca.crt"
        self.ca_file.write_bytes(self.ca.pem())

    # --- start / stop ----------------------------------------------------------------------------------

    def start(self) -> ControlPlane:
        try:
            self._start_etcd()
            self._start_apiserver()
            self._wait_ready()
            self._start_controller_manager()
            if "kube-scheduler" in self.stack:
                self._start_scheduler()
            if "kwok" in self.stack:
                self._start_kwok()
        except BaseException:
            self.stop()
            raise
        log.info("control_plane_started", url=self.url, root=str(self.root))
        return self

    @property
    def scheduler(self) -> bool:
        """kube-scheduler places the pods (else nobody does: ``fake_kubelet`` binds them)."""
        return "kube-scheduler" in self.stack

    @property
    def kwok(self) -> bool:
        """KWOK runs the nodes annotated ``kwok.x-k8s.io/node=fake``."""
        return "kwok" in self.stack

    def controller(self, name: str, *, feature_gates: dict[str, bool] | None = None) -> Controller:
        """The JobSet, Kueue or Trainer manager, started on first use (with the ones it works with that are
        built: Trainer makes JobSets, Kueue integrates with both); :class:`ControlPlaneUnavailable` when it
        is not built. ``feature_gates`` (``--feature-gates``): a running manager with other gates is
        restarted with these (``None``: whatever it runs with, its defaults when it starts)."""
        if name not in self.stack:
            raise ControlPlaneUnavailable(how_to_build(name))
        if name not in self.managers:
            wanted = {name, *(("jobset",) if name != "jobset" else ())}
            if name == "kueue":
                wanted |= {"trainer"}
            for each in START_ORDER:
                if each in wanted and each in self.stack and each not in self.managers:
                    gates = dict(feature_gates or {}) if each == name else {}
                    made = Controller(self, KINDS[each], self.stack[each], feature_gates=gates)
                    self.managers[each] = made.start()
        manager = self.managers[name]
        if feature_gates is not None and feature_gates != manager.feature_gates:
            manager.restart(feature_gates)
        return manager

    def end(self, name: str) -> None:
        """Stop the process ``name`` (SIGTERM to its group) and forget it."""
        for process in [p for p in self.processes if p.name == name]:
            process.stop()
            self.processes.remove(process)

    def stop(self) -> None:
        """The managers, scheduler and KWOK, controller manager, API server, etcd, in that order; then the
        directory goes."""
        for manager in reversed(list(self.managers.values())):
            with contextlib.suppress(Exception):  # the processes stop below all the same
                manager.stop()
        self.managers.clear()
        for process in reversed(self.processes):
            process.stop()
        self.processes.clear()
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def spawn(self, name: str, argv: list[str], *, env: dict[str, str] | None = None) -> _Process:
        """``argv`` in its own process group, its output in ``<root>/<name>.log``; ``env`` added to ours."""
        log_path = self.root / f"{name}.log"
        log_file = log_path.open("ab")
        popen = subprocess.Popen(
            argv,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, **env} if env else None,
        )
        process = _Process(name, popen, log_path, log_file)
        self.processes.append(process)
        return process

    def _start_etcd(self) -> None:
        client_port, peer_port = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client_port}"
        peer = f"http://127.0.0.1:{peer_port}"
        self.spawn(
            "etcd",
            [
                str(self.binaries.etcd),
                "--name=default",
                f"--data-dir={self.root / 'etcd'}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=default={peer}",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
        )

    def _start_apiserver(self) -> None:
        serving_cert, serving_key = self.ca.issue("kube-apiserver", server=True)
        (self.root / "serving.crt").write_bytes(serving_cert)
        (self.root / "serving.key").write_bytes(serving_key)
        sa_key = new_key()
        (self.root / "sa.key").write_bytes(pem_of_key(sa_key))
        (self.root / "sa.pub").write_bytes(
            sa_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
        # token,user,uid,"group1,group2": the admin the fixture and the controller manager use.
        (self.root / "tokens.csv").write_text(f'{self.admin_token},admin,admin,"system:masters"\n')
        self.apiserver = self.spawn(
            "kube-apiserver",
            [
                str(self.binaries.kube_apiserver),
                f"--etcd-servers={self.etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.port}",
                f"--cert-dir={self.root / 'apiserver-certs'}",
                f"--tls-cert-file={self.root / 'serving.crt'}",
                f"--tls-private-key-file={self.root / 'serving.key'}",
                f"--client-ca-file={self.ca_file}",
                f"--token-auth-file={self.root / 'tokens.csv'}",
                "--authorization-mode=Node,RBAC",
                "--enable-admission-plugins=NodeRestriction,ValidatingAdmissionPolicy",
                f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
                f"--service-account-key-file={self.root / 'sa.pub'}",
                f"--service-account-signing-key-file={self.root / 'sa.key'}",
                "--service-cluster-ip-range=10.96.0.0/16",
                "--endpoint-reconciler-type=none",
                # As kubeadm and the managed offerings run it: the chart's GPU-reset variation is privileged.
                "--allow-privileged=true",
                "--profiling=false",
            ],
        )

    def _start_controller_manager(self) -> None:
        kubeconfig = self.write_kubeconfig(self.root / "controller-manager.kubeconfig")
        self.spawn(
            "kube-controller-manager",
            [
                str(self.binaries.kube_controller_manager),
                f"--kubeconfig={kubeconfig}",
                f"--controllers={','.join(self.controllers)}",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={self.root / 'sa.key'}",
                f"--root-ca-file={self.ca_file}",
                "--leader-elect=false",
                # 25 s rather than 50 s without a Lease renewal before a node is NotReady (the fake kubelets
                # renew every 10 s), so the heartbeat test need not wait a minute.
                f"--node-monitor-grace-period={NODE_MONITOR_GRACE_S}s",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                f"--cert-dir={self.root / 'controller-manager-certs'}",
                "--profiling=false",
            ],
        )

    def _start_scheduler(self) -> None:
        kubeconfig = self.write_kubeconfig(self.root / "scheduler.kubeconfig", user="system:kube-scheduler")
        self.spawn(
            "kube-scheduler",
            [
                str(self.stack["kube-scheduler"]),
                f"--kubeconfig={kubeconfig}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                f"--cert-dir={self.root / 'scheduler-certs'}",
                "--profiling=false",
            ],
        )

    def _start_kwok(self) -> None:
        config = self.root / "kwok.yaml"
        port = free_port()
        config.write_text(kwok_config(self.stack["kwok"].parent / "stage", port))
        kubeconfig = self.write_kubeconfig(self.root / "kwok.kubeconfig")
        self.spawn("kwok", [str(self.stack["kwok"]), f"--kubeconfig={kubeconfig}", f"--config={config}"])
        # Up once its server answers (its controllers start before it); a bad configuration ends it first.
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            self.check_running()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5):
                    return
            except urllib.error.HTTPError:
                return
            except (urllib.error.URLError, OSError):
                time.sleep(0.1)
        raise RuntimeError(f"kwok not serving after {START_TIMEOUT_S} s")

    def _wait_ready(self) -> None:
        context = ssl.create_default_context(cafile=str(self.ca_file))
        request = urllib.request.Request(  # noqa: S310 - always https://127.0.0.1
            f"{self.url}/readyz", headers={"Authorization": f"Bearer {self.admin_token}"}
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        last = "no answer"
        while time.monotonic() < deadline:
            for process in self.processes:
                if process.popen.poll() is not None:
                    raise RuntimeError(
                        f"{process.name} exited ({process.popen.returncode}):\n{process.tail()}"
                    )
            try:
                with urllib.request.urlopen(request, context=context, timeout=5) as answer:  # noqa: S310
                    if answer.status == 200:
                        return
            except (urllib.error.URLError, OSError) as exc:
                last = str(exc)
            time.sleep(0.2)
        raise RuntimeError(
            f"kube-apiserver not ready after {START_TIMEOUT_S} s ({last}):\n{self.apiserver.tail()}"
        )

    def check_running(self) -> None:
        """Fail loudly when one of the processes died (with the end of its log)."""
        for process in self.processes:
            if process.popen.poll() is not None:
                raise RuntimeError(f"{process.name} exited ({process.popen.returncode}):\n{process.tail()}")

    # --- identities and clients ---------------------------------------------------------------------------

    def client_cert(self, user: str, groups: tuple[str, ...] = ()) -> tuple[Path, Path]:
        """Certificate and key files of a client certificate for ``user`` in ``groups`` (made once)."""
        key = (user, groups)
        if key not in self._client_certs:
            cert_pem, key_pem = self.ca.issue(user, groups)
            stem = secrets.token_hex(6)
            cert_path, key_path = self.root / f"client-{stem}.crt", self.root / f"client-{stem}.key"
            cert_path.write_bytes(cert_pem)
            key_path.write_bytes(key_pem)
            self._client_certs[key] = (cert_path, key_path)
        return self._client_certs[key]

    def configuration(
        self, *, token: str | None = None, user: str | None = None, groups: tuple[str, ...] = ()
    ) -> client.Configuration:
        """A client configuration: the admin by default, a bearer ``token``, or a certificate for ``user``."""
        if user is not None:
            cert, key = self.client_cert(user, groups)
            config = client.Configuration(host=self.url, ssl_ca_cert=str(self.ca_file))
            config.cert_file, config.key_file = str(cert), str(key)
            return config
        bearer = {"authorization": f"Bearer {token or self.admin_token}"}
        return client.Configuration(host=self.url, api_key=bearer, ssl_ca_cert=str(self.ca_file))

    def api_client(
        self, *, token: str | None = None, user: str | None = None, groups: tuple[str, ...] = ()
    ) -> client.ApiClient:
        return client.ApiClient(self.configuration(token=token, user=user, groups=groups))

    def node_client(self, node: str) -> client.ApiClient:
        """The kubelet's identity for ``node`` (Node authorizer and NodeRestriction apply)."""
        return self.api_client(user=f"system:node:{node}", groups=("system:nodes",))

    def kubeconfig(
        self, *, token: str | None = None, user: str | None = None, groups: tuple[str, ...] = ()
    ) -> dict[str, Any]:
        """A kubeconfig for the admin, a bearer ``token``, or a client certificate for ``user`` in
        ``groups``."""
        import base64

        credentials: dict[str, str] = {"token": token or self.admin_token}
        if user is not None:
            cert, key = self.client_cert(user, groups)
            credentials = {"client-certificate": str(cert), "client-key": str(key)}

        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "realkube",
                    "cluster": {
                        "server": self.url,
                        "certificate-authority-data": base64.b64encode(self.ca.pem()).decode(),
                    },
                }
            ],
            "users": [{"name": "user", "user": credentials}],
            "contexts": [{"name": "realkube", "context": {"cluster": "realkube", "user": "user"}}],
            "current-context": "realkube",
        }

    def write_kubeconfig(
        self, path: Path, *, token: str | None = None, user: str | None = None, groups: tuple[str, ...] = ()
    ) -> Path:
        path.write_text(yaml.safe_dump(self.kubeconfig(token=token, user=user, groups=groups)))
        path.chmod(0o600)
        return path
