"""A thin typed facade over python-nomad: the only module of gpuhealth that imports ``nomad``.

Everything the Nomad executor sends goes through :class:`NomadApi`, over HTTP to the local client agent
(which forwards to the servers): the node, its eligibility and drain, its allocations, the allocations of
a job, stopping an allocation, the client's dynamic metadata (Nomad 1.5+, no python-nomad wrapper: a
``Requester`` subclass), and a blocking query on the node. python-nomad's exceptions become our own tree
(``remediation/nomad/errors.py``); the ACL token travels in the ``X-Nomad-Token`` header only and never
appears in a message. ``writes_total`` and ``requests_total`` count what was sent (benchmarks, tests).
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Mapping
from http import HTTPStatus
from typing import Any, TypeVar

import nomad
import requests
import urllib3
import urllib3.connection
from nomad.api import exceptions as nomad_exceptions
from nomad.api.base import Requester
from requests.adapters import HTTPAdapter

from remediation.nomad.errors import (
    NomadConfigError,
    NomadError,
    NomadForbidden,
    NomadNotFound,
    NomadRejected,
    NomadUnavailable,
)
from remediation.nomad.settings import NomadSettings

JsonObject = dict[str, Any]
Result = TypeVar("Result")

NANOSECONDS = 1_000_000_000
INDEX_HEADER = "X-Nomad-Index"
BLOCKING_SLACK_S = 5.0  # Nomad adds up to wait/16 of jitter to a blocking query: read a little longer


class _TrackedConnections:
    """The sockets a session's connections opened, so a blocking query in flight can be cut on close."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()

    def add(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.add(sock)

    def abort(self) -> None:
        with self._lock:
            sockets, self._sockets = self._sockets, set()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


def _abortable_session(tracked: _TrackedConnections) -> requests.Session:
    """A session whose connections register their sockets with ``tracked`` (for the watch's long polls)."""

    class TrackedHTTPConnection(urllib3.connection.HTTPConnection):
        def connect(self) -> None:
            super().connect()
            tracked.add(self.sock)

    class TrackedHTTPSConnection(urllib3.connection.HTTPSConnection):
        def connect(self) -> None:
            super().connect()
            tracked.add(self.sock)

    class TrackedHTTPPool(urllib3.HTTPConnectionPool):
        ConnectionCls = TrackedHTTPConnection

    class TrackedHTTPSPool(urllib3.HTTPSConnectionPool):
        ConnectionCls = TrackedHTTPSConnection

    class Adapter(HTTPAdapter):
        def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
            super().init_poolmanager(*args, **kwargs)
            self.poolmanager.pool_classes_by_scheme = {"http": TrackedHTTPPool, "https": TrackedHTTPSPool}

    session = requests.Session()
    session.mount("http://", Adapter())
    session.mount("https://", Adapter())
    return session


class _ClientMetadata(Requester):  # type: ignore[misc]  # python-nomad is untyped
    """``/v1/client/metadata``: the node's dynamic metadata, served by its client agent."""

    ENDPOINT = "client"


class NomadApi:
    """The calls the executor makes, each raising only :class:`NomadError` subclasses."""

    def __init__(self, settings: NomadSettings, token: str | None) -> None:
        self.settings = settings
        self._session = requests.Session()
        options = client_options(settings, token)
        self._client = nomad.Nomad(**options, session=self._session)
        self._metadata = _ClientMetadata(**self._client.requester_settings)
        # The watch's long polls get their own connections, which close() cuts (no query outlives us).
        self._watch_connections = _TrackedConnections()
        self._watch_session = _abortable_session(self._watch_connections)
        self._watch = nomad.api.Node(**{**self._client.requester_settings, "session": self._watch_session})
        self._count_lock = threading.Lock()
        self.writes_total = 0
        self.requests_total = 0

    # --- the local agent ------------------------------------------------------------------------------------

    def local_node_id(self) -> str:
        """This machine's node id, from the local client agent (``/v1/agent/self``: stats.client.node_id)."""
        agent = self._call(self._client.agent.get_agent)
        client = (agent.get("stats") or {}).get("client") or {}
        node_id = client.get("node_id") if isinstance(client, Mapping) else None
        if not node_id:
            raise NomadConfigError(
                f"the Nomad agent at {self.settings.address} is not a client (no stats.client.node_id)"
            )
        return str(node_id)

    # --- the node -------------------------------------------------------------------------------------------

    def get_node(self, node_id: str) -> JsonObject:
        """``GET /v1/node/:id``."""
        node: JsonObject = self._call(self._client.node.get_node, node_id)
        return node

    def watch_node(self, node_id: str, index: int, wait_s: float) -> tuple[JsonObject, int]:
        """A blocking query: the node once its modify index passes ``index`` (or after ``wait_s``), and the
        index to wait on next time."""
        params = {"index": str(index), "wait": f"{max(int(wait_s * 1000), 1)}ms"} if index > 0 else {}

        def query() -> requests.Response:
            response: requests.Response = self._watch.request(
                node_id, method="get", params=params, timeout=wait_s + BLOCKING_SLACK_S
            )
            return response

        response = self._call(query)
        try:
            next_index = int(response.headers.get(INDEX_HEADER, "0"))
            node: JsonObject = response.json()
        except ValueError as exc:
            raise NomadUnavailable(f"unreadable answer to the node query: {exc}") from None
        return node, next_index

    def node_id_named(self, name: str) -> str | None:
        """The id of the node called ``name`` (``GET /v1/nodes`` on a server), or None when none is."""
        nodes: list[JsonObject] = self._call(self._client.nodes.get_nodes)
        return next((str(node["ID"]) for node in nodes if node.get("Name") == name), None)

    def set_eligibility(self, node_id: str, *, eligible: bool) -> int:
        """``POST /v1/node/:id/eligibility``; returns the node's new modify index (0 when not told)."""
        answer = self._call(self._client.node.eligible_node, node_id, eligible=eligible, write=True)
        index = answer.get("NodeModifyIndex", 0) if isinstance(answer, Mapping) else 0
        return int(index) if isinstance(index, int) else 0

    def drain(
        self, node_id: str, *, deadline_s: float, ignore_system_jobs: bool, meta: Mapping[str, str]
    ) -> None:
        """``POST /v1/node/:id/drain`` with a deadline and ``Meta`` (python-nomad has no Meta argument)."""
        body = {
            "NodeID": node_id,
            "DrainSpec": {
                "Deadline": int(deadline_s * NANOSECONDS),
                "IgnoreSystemJobs": ignore_system_jobs,
            },
            "Meta": dict(meta),
        }
        self._call(self._client.node.request, node_id, "drain", json=body, method="post", write=True)

    def cancel_drain(self, node_id: str) -> None:
        """Cancel the node's drain (``DrainSpec: null``); eligibility stays as it is."""
        self._call(self._client.node.drain_node_with_spec, node_id, None, write=True)

    def node_allocations(self, node_id: str) -> list[JsonObject]:
        """``GET /v1/node/:id/allocations`` (every allocation ever placed there that Nomad still keeps)."""
        allocations: list[JsonObject] = self._call(self._client.node.get_allocations, node_id)
        return allocations

    # --- jobs and allocations -----------------------------------------------------------------------------

    def get_job(self, job_id: str, namespace: str | None) -> JsonObject:
        """``GET /v1/job/:id`` in ``namespace``."""
        job: JsonObject = self._call(self._client.job.get_job, job_id, namespace=namespace)
        return job

    def job_allocations(self, job_id: str, namespace: str | None) -> list[JsonObject]:
        """``GET /v1/job/:id/allocations`` in ``namespace``."""
        allocations: list[JsonObject] = self._call(
            self._client.job.get_allocations, job_id, namespace=namespace
        )
        return allocations

    def stop_allocation(self, allocation_id: str) -> None:
        """``POST /v1/allocation/:id/stop``: the allocation stops and the scheduler places it again."""
        self._call(self._client.allocation.stop_allocation, allocation_id, write=True)

    # --- dynamic node metadata ----------------------------------------------------------------------------

    def read_metadata(self, node_id: str | None = None) -> dict[str, str]:
        """The node's metadata (``GET /v1/client/metadata``; without ``node_id``: the local client's)."""
        answer = self._call(self._metadata_request, node_id, "get", None)
        return _meta_of(answer)

    def write_metadata(self, node_id: str | None, changes: Mapping[str, str | None]) -> dict[str, str]:
        """Set (a string) or delete (None) dynamic metadata keys; returns the node's metadata after it."""
        body = {"Meta": dict(changes)}
        answer = self._call(self._metadata_request, node_id, "post", body, write=True)
        return _meta_of(answer)

    def _metadata_request(self, node_id: str | None, method: str, body: JsonObject | None) -> JsonObject:
        params = {"node_id": node_id} if node_id else None
        response: requests.Response = self._metadata.request(
            "metadata", method=method, params=params, json=body
        )
        answer: JsonObject = response.json() if response.content else {}
        return answer

    # --- plumbing -------------------------------------------------------------------------------------------

    def close(self) -> None:
        """Close the HTTP connections, cutting a blocking query in flight."""
        self._watch_connections.abort()
        self._watch_session.close()
        self._session.close()

    def _call(
        self, function: Callable[..., Result], *args: Any, write: bool = False, **kwargs: Any
    ) -> Result:
        with self._count_lock:
            self.requests_total += 1
            self.writes_total += int(write)
        try:
            return function(*args, **kwargs)
        except nomad_exceptions.BaseNomadException as exc:
            raise _mapped(exc) from None
        except (requests.RequestException, OSError) as exc:  # TimeoutNomadException and raw socket errors
            raise NomadUnavailable(_transport_reason(exc)) from None
        except ValueError as exc:  # an answer that is not JSON (a proxy's error page)
            raise NomadUnavailable(f"unreadable answer: {exc}") from None


def client_options(settings: NomadSettings, token: str | None) -> dict[str, Any]:
    """python-nomad's constructor arguments from our settings (TLS included); NomadConfigError when they
    cannot work."""
    address = settings.address.rstrip("/")
    if not address.startswith(("http://", "https://")):
        raise NomadConfigError(f"nomad.address must start with http:// or https://, not {address!r}")
    tls = settings.tls
    verify: bool | str = str(tls.ca_file) if tls.ca_file is not None and tls.verify else tls.verify
    if (tls.cert_file is None) != (tls.key_file is None):
        raise NomadConfigError("nomad.tls: set both cert_file and key_file, or neither")
    cert = (str(tls.cert_file), str(tls.key_file)) if tls.cert_file and tls.key_file else ()
    return {
        "address": address,
        "secure": address.startswith("https://"),
        "token": token,
        "namespace": settings.namespace,
        "region": settings.region,
        "timeout": settings.retry.request_timeout_s,
        "verify": verify,
        # python-nomad falls back to NOMAD_CLIENT_CERT/KEY when this is empty; a placeholder pair that it
        # then drops ("all(cert)" is false) keeps the choice ours.
        "cert": cert or ("", ""),
    }


def _meta_of(answer: JsonObject) -> dict[str, str]:
    """The effective metadata in a ``/v1/client/metadata`` answer (``Meta``: static and dynamic merged)."""
    meta = answer.get("Meta")
    if not isinstance(meta, Mapping):
        return {}
    return {str(key): str(value) for key, value in meta.items() if value is not None}


def _mapped(exc: Any) -> NomadError:
    """Our exception for a python-nomad one: by HTTP status, or a transport error when there was none."""
    response = getattr(exc, "nomad_resp", None)
    if not isinstance(response, requests.Response):
        return NomadUnavailable(_transport_reason(response if isinstance(response, BaseException) else exc))
    status = response.status_code
    text = _short(response.text) or response.reason or "error"
    if status == HTTPStatus.FORBIDDEN:
        return NomadForbidden(f"permission denied: {text}", status=status)
    if status == HTTPStatus.NOT_FOUND:
        return NomadNotFound(text, status=status)
    if status == HTTPStatus.TOO_MANY_REQUESTS or status >= HTTPStatus.INTERNAL_SERVER_ERROR:
        return NomadUnavailable(text, status=status)
    return NomadRejected(text, status=status)


def _transport_reason(exc: BaseException) -> str:
    """The error's class and first line; requests' messages name the URL but never headers (the token)."""
    inner = exc
    while inner.__context__ is not None and not str(inner):
        inner = inner.__context__
    first = str(inner).splitlines()[0] if str(inner) else ""
    return _short(f"{type(exc).__name__}: {first}" if first else type(exc).__name__)


def _short(text: str, limit: int = 200) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."
