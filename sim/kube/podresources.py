"""A node's kubelet PodResources service, emulated: real gRPC on a unix socket, answers from the emulator.

``List`` answers what the kubelet's device manager would: every pod of the node that is not finished, with
the ``nvidia.com/gpu`` devices its containers were allocated (GPU UUIDs, the NVIDIA device plugin's default
ids). Allocation follows the device manager: a pod keeps the GPUs it got, a new pod takes the lowest free
ones, and a pod that left frees them. The messages are written with the protobuf wire format by hand (the
fields ``agent/backends/podresources.py`` lists), so no stubs are generated.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sim.kube.protocols import KubeObject, ObjectStore

GPU_RESOURCE = "nvidia.com/gpu"
_FINISHED = frozenset({"Succeeded", "Failed"})


class PodResourcesServer:
    """``v1.PodResourcesLister/List`` for one node; ``start`` binds the socket, ``stop`` closes it."""

    def __init__(self, store: ObjectStore, node: str, uuids: Sequence[str], socket_path: str) -> None:
        self.store = store
        self.node = node
        self.uuids = list(uuids)
        self.socket_path = socket_path
        self.calls = 0
        self._lock = threading.Lock()
        self._allocated: dict[str, list[str]] = {}  # pod uid -> GPU UUIDs
        self._server: Any = None

    def start(self) -> PodResourcesServer:
        import grpc

        grpc_module: Any = grpc
        server = grpc_module.server(ThreadPoolExecutor(max_workers=2))
        handler = grpc_module.unary_unary_rpc_method_handler(
            self._list, request_deserializer=bytes, response_serializer=bytes
        )
        server.add_generic_rpc_handlers(
            [grpc_module.method_handlers_generic_handler("v1.PodResourcesLister", {"List": handler})]
        )
        server.add_insecure_port(f"unix://{self.socket_path}")
        server.start()
        self._server = server
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=None).wait()
            self._server = None

    def allocations(self) -> dict[str, list[str]]:
        """``namespace/name`` -> the GPUs the pod holds now."""
        with self._lock:
            pods = self._allocate()
        return {_key(pod): self._allocated[_uid(pod)] for pod in pods if _uid(pod) in self._allocated}

    def _list(self, _request: bytes, _context: Any) -> bytes:
        with self._lock:
            self.calls += 1
            pods = self._allocate()
            return b"".join(_field(1, _pod_message(pod, self._allocated.get(_uid(pod), []))) for pod in pods)

    def _allocate(self) -> list[KubeObject]:
        pods = [
            pod
            for pod in self.store.list("pods")
            if (pod.get("spec") or {}).get("nodeName") == self.node
            and (pod.get("status") or {}).get("phase") not in _FINISHED
        ]
        present = {_uid(pod) for pod in pods}
        for uid in [uid for uid in self._allocated if uid not in present]:
            del self._allocated[uid]
        for pod in sorted(pods, key=lambda p: str(p["metadata"].get("creationTimestamp", ""))):
            wanted = _gpus_requested(pod)
            if wanted and _uid(pod) not in self._allocated:
                taken = {uuid for gpus in self._allocated.values() for uuid in gpus}
                free = [uuid for uuid in self.uuids if uuid not in taken]
                self._allocated[_uid(pod)] = free[:wanted]
        return pods


def _gpus_requested(pod: KubeObject) -> int:
    total = 0
    for container in (pod.get("spec") or {}).get("containers") or []:
        limits = (container.get("resources") or {}).get("limits") or {}
        total += int(str(limits.get(GPU_RESOURCE, 0)))
    return total


def _pod_message(pod: KubeObject, gpus: list[str]) -> bytes:
    metadata = pod["metadata"]
    containers = (pod.get("spec") or {}).get("containers") or [{"name": "main"}]
    body = _text(1, str(metadata["name"])) + _text(2, str(metadata.get("namespace", "")))
    for index, container in enumerate(containers):
        devices = b""
        if gpus and index == 0:
            devices = _field(2, _text(1, GPU_RESOURCE) + b"".join(_text(2, uuid) for uuid in gpus))
        body += _field(3, _text(1, str(container.get("name", ""))) + devices)
    return body


def _uid(pod: KubeObject) -> str:
    return str(pod["metadata"].get("uid", ""))


def _key(pod: KubeObject) -> str:
    return f"{pod['metadata'].get('namespace', '')}/{pod['metadata']['name']}"


def _text(number: int, value: str) -> bytes:
    return _field(number, value.encode())


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)
