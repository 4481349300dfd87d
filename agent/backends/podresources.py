"""The kubelet's PodResources API on this node: which pod holds which GPU, for a partial drain.

The kubelet serves ``v1.PodResourcesLister/List`` over gRPC on a unix socket
(``/var/lib/kubelet/pod-resources/kubelet.sock``;
https://kubernetes.io/docs/concepts/extend-kubernetes/compute-storage-net/device-plugins/#monitoring-device-plugin-resources).
Its answer names, per container, the device-plugin devices (``nvidia.com/gpu`` with the device plugin's ids:
GPU UUIDs by default, indices with ``DEVICE_ID_STRATEGY=index``, ``<id>::<n>`` for time-sliced replicas) and
the DRA devices of its claims (driver, pool, device).

Only ``List`` is called, and its messages are small, so they are read here by a hand-written decoder of the
protobuf wire format (https://protobuf.dev/programming-guides/encoding/) over ``grpcio``'s generic unary
call: no generated stubs, no protobuf runtime. The fields read, from the kubelet's
``pkg/apis/podresources/v1/api.proto``:

    ListPodResourcesResponse { repeated PodResources pod_resources = 1; }
    PodResources             { string name = 1; string namespace = 2;
                               repeated ContainerResources containers = 3; }
    ContainerResources       { string name = 1; repeated ContainerDevices devices = 2;
                               repeated DynamicResource dynamic_resources = 5; }
    ContainerDevices         { string resource_name = 1; repeated string device_ids = 2; }
    DynamicResource          { string claim_name = 2; string claim_namespace = 3;
                               repeated ClaimResource claim_resources = 4; }
    ClaimResource            { string driver_name = 2; string pool_name = 3; string device_name = 4; }

Every other field is skipped by its wire type, as any protobuf reader does with unknown fields.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from core.gpu_pods import DraKey, GpuPodMap, GpuPodMapError, PodRef, build_map

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
LIST_METHOD = "/v1.PodResourcesLister/List"
GPU_RESOURCE = "nvidia.com/gpu"
NVIDIA_RESOURCE_PREFIX = "nvidia.com/"
# The kubelet's own limit on a List answer is 16 MiB; a node's answer is a few KiB.
MAX_MESSAGE_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class ContainerDevices:
    """One container's devices of one device-plugin resource."""

    resource_name: str
    device_ids: tuple[str, ...]


@dataclass(frozen=True)
class PodDevices:
    """What PodResources says one pod holds: device-plugin devices and DRA devices, all containers."""

    namespace: str
    name: str
    devices: tuple[ContainerDevices, ...] = ()
    dra_devices: tuple[DraKey, ...] = field(default_factory=tuple)


class PodResourcesClient:
    """Calls ``List`` on the kubelet's socket; each call opens and closes its own channel (a drain asks
    once, so no connection is kept open between drains)."""

    def __init__(self, socket_path: str = DEFAULT_SOCKET, *, timeout_s: float = 5.0) -> None:
        self.socket_path = socket_path
        self._timeout_s = timeout_s

    def list(self) -> list[PodDevices]:
        """Every pod with its devices; raises ``GpuPodMapError`` when the socket does not answer."""
        import grpc  # loaded only when a partial drain reads it

        grpc_module: Any = grpc  # untyped
        options = [("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)]
        try:
            with grpc_module.insecure_channel(f"unix://{self.socket_path}", options=options) as channel:
                call = channel.unary_unary(
                    LIST_METHOD, request_serializer=_empty_request, response_deserializer=decode_list_response
                )
                answer: list[PodDevices] = call(b"", timeout=self._timeout_s)
                return answer
        except grpc_module.RpcError as error:
            code = error.code() if callable(getattr(error, "code", None)) else None
            name = getattr(code, "name", "UNKNOWN")
            raise GpuPodMapError(f"PodResources List on {self.socket_path} failed: {name}") from error
        except WireError as error:
            raise GpuPodMapError(f"PodResources answer unreadable: {error}") from error


def gpu_pod_map(
    node: str,
    pods: list[PodDevices],
    *,
    dra_devices: Mapping[DraKey, str],
    uuids_by_index: Callable[[], Mapping[int, str]] | None = None,
) -> GpuPodMap:
    """The GPU-to-pod map of PodResources' answer. Every NVIDIA device must resolve to a GPU UUID: an id
    that does not (a MIG device, an index with no GPU list) raises ``GpuPodMapError``, because a partial
    drain that cannot place a pod could keep the very pod that uses the faulty GPU."""
    resolve = _Resolver(dra_devices, uuids_by_index)
    bindings: list[tuple[str, PodRef]] = []
    for pod in pods:
        ref = PodRef(namespace=pod.namespace, name=pod.name)
        for devices in pod.devices:
            if devices.resource_name.startswith(NVIDIA_RESOURCE_PREFIX):
                bindings.extend(
                    (resolve.device_id(devices.resource_name, i), ref) for i in devices.device_ids
                )
        for key in pod.dra_devices:
            uuid = resolve.dra(key)
            if uuid is not None:
                bindings.append((uuid, ref))
    return build_map(node, "podresources", bindings)


class _Resolver:
    def __init__(
        self, dra_devices: Mapping[DraKey, str], uuids_by_index: Callable[[], Mapping[int, str]] | None
    ) -> None:
        self._dra = dra_devices
        self._by_index = uuids_by_index
        self._indices: Mapping[int, str] | None = None
        self._dra_drivers = {driver for driver, _pool, _device in dra_devices}

    def device_id(self, resource: str, device_id: str) -> str:
        plain = device_id.split("::", 1)[0]  # time-slicing replicas: "<id>::<replica>"
        if resource != GPU_RESOURCE:
            raise GpuPodMapError(f"{resource} device {device_id!r} names no whole GPU")
        if plain.startswith("GPU-"):
            return plain
        if plain.isdigit() and self._by_index is not None:
            if self._indices is None:
                self._indices = self._by_index()
            uuid = self._indices.get(int(plain))
            if uuid is not None:
                return uuid
        raise GpuPodMapError(f"{resource} device {device_id!r} matches no GPU of this node")

    def dra(self, key: DraKey) -> str | None:
        """The GPU of a DRA device of our driver; None for other drivers' devices (NICs ...)."""
        if key[0] not in self._dra_drivers:
            return None
        uuid = self._dra.get(key)
        if uuid is None:
            raise GpuPodMapError(f"DRA device {'/'.join(key)} is not among this node's published GPUs")
        return uuid


# --- the wire format ------------------------------------------------------------------------------------


class WireError(ValueError):
    """Bytes that are not a well-formed protobuf message."""


_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5


def _empty_request(_request: bytes) -> bytes:
    return b""  # ListPodResourcesRequest has no fields


def decode_list_response(data: bytes) -> list[PodDevices]:
    """``ListPodResourcesResponse`` -> the pods."""
    return [_pod(value) for number, value in _fields(data) if number == 1 and isinstance(value, bytes)]


def _pod(data: bytes) -> PodDevices:
    name = namespace = ""
    devices: list[ContainerDevices] = []
    dra: list[DraKey] = []
    for number, value in _fields(data):
        if not isinstance(value, bytes):
            continue
        if number == 1:
            name = value.decode()
        elif number == 2:
            namespace = value.decode()
        elif number == 3:
            container_devices, container_dra = _container(value)
            devices.extend(container_devices)
            dra.extend(container_dra)
    return PodDevices(namespace, name, tuple(devices), tuple(dra))


def _container(data: bytes) -> tuple[list[ContainerDevices], list[DraKey]]:
    devices: list[ContainerDevices] = []
    dra: list[DraKey] = []
    for number, value in _fields(data):
        if number == 2 and isinstance(value, bytes):
            strings = _strings(value)
            devices.append(ContainerDevices(strings.get(1, [""])[0], tuple(strings.get(2, []))))
        elif number == 5 and isinstance(value, bytes):
            for claim_number, claim_value in _fields(value):
                if claim_number == 4 and isinstance(claim_value, bytes):
                    strings = _strings(claim_value)
                    driver, pool, device = (strings.get(n, [""])[0] for n in (2, 3, 4))
                    dra.append((driver, pool, device))
    return devices, dra


def _strings(data: bytes) -> dict[int, list[str]]:
    """The length-delimited fields of a message as text, by field number (sub-messages are skipped by the
    callers, who only ask for the string fields' numbers)."""
    found: dict[int, list[str]] = {}
    for number, value in _fields(data):
        if isinstance(value, bytes):
            try:
                found.setdefault(number, []).append(value.decode())
            except UnicodeDecodeError:
                continue  # a sub-message (topology, CDI devices), not a string
    return found


def _fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of each field: varints as int, length-delimited as bytes, fixed skipped."""
    position = 0
    while position < len(data):
        key, position = _varint(data, position)
        number, wire_type = key >> 3, key & 7
        if wire_type == _VARINT:
            value, position = _varint(data, position)
            yield number, value
        elif wire_type == _LEN:
            length, position = _varint(data, position)
            if position + length > len(data):
                raise WireError("a length-delimited field runs past the end")
            yield number, data[position : position + length]
            position += length
        elif wire_type in (_I64, _I32):
            position += 8 if wire_type == _I64 else 4
        else:
            raise WireError(f"unsupported wire type {wire_type}")
        if number == 0 or position > len(data):
            raise WireError("truncated or invalid field")


def _varint(data: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if position >= len(data) or shift > 63:
            raise WireError("truncated varint")
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, position
        shift += 7
