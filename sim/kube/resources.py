"""The resource types the emulated API server serves, and the discovery documents that describe them.

Discovery follows "API Concepts" → "Discovery API"
(https://kubernetes.io/docs/reference/using-api/api-concepts/#discovery-api): ``/api`` lists the legacy
core versions, ``/apis`` the named groups, and ``/api/v1`` or ``/apis/{group}/{version}`` return an
``APIResourceList`` with each resource's verbs, scope, kind, short names and subresources. ``kubectl``
uses these documents to map a kind to a path and to find ``pods/eviction`` before it drains a node.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sim.kube.protocols import KubeObject

STANDARD_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
STATUS_VERBS = ("get", "patch", "update")


@dataclass(frozen=True)
class Subresource:
    """A subresource other than ``status`` (which :attr:`ResourceType.has_status` covers)."""

    name: str
    kind: str
    verbs: tuple[str, ...]
    group: str = ""
    version: str = ""


@dataclass(frozen=True)
class ResourceType:
    """One served resource: where it lives on the wire and which API-server rules apply to it."""

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    has_status: bool = False
    subresources: tuple[Subresource, ...] = ()
    tracks_generation: bool = False
    # Nodes may carry status on create (the kubelet registers itself that way); other types start empty.
    keeps_status_on_create: bool = False
    # Events (core/v1) accept a PUT to a missing name as a create, as the API server's event registry does.
    create_on_update: bool = False
    custom: bool = False
    # Other served versions of the same stored objects; only ``apiVersion`` differs between them here.
    extra_versions: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    verbs: tuple[str, ...] = STANDARD_VERBS
    # Served over another resource's stored objects (events.k8s.io Events over core Events).
    stored_as: str = ""

    @property
    def store_key(self) -> str:
        """Where the objects live in the store: the own key, or that of the resource served over."""
        return self.stored_as or self.key

    @property
    def key(self) -> str:
        """The store's name for the resource: ``pods`` or ``jobs.batch``."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def api_version(self) -> str:
        """``v1`` for the core group, ``group/version`` otherwise."""
        return group_version(self.group, self.version)

    @property
    def singular(self) -> str:
        """The lower-case kind, which is what the API server reports as ``singularName``."""
        return self.kind.lower()

    @property
    def list_kind(self) -> str:
        """``PodList`` for ``Pod``."""
        return f"{self.kind}List"

    @property
    def versions(self) -> tuple[str, ...]:
        """Every served version, preferred first."""
        return (self.version, *self.extra_versions)

    @property
    def strips_list_item_type(self) -> bool:
        """Built-in list items omit ``kind``/``apiVersion`` on the wire; custom resources keep them."""
        return not self.custom


def group_version(group: str, version: str) -> str:
    """``v1`` for the core group, ``group/version`` otherwise."""
    return f"{group}/{version}" if group else version


_EVICTION = Subresource("eviction", "Eviction", ("create",), group="policy", version="v1")
_BINDING = Subresource("binding", "Binding", ("create",))

BUILTIN_RESOURCES: tuple[ResourceType, ...] = (
    ResourceType("", "v1", "Namespace", "namespaces", False, ("ns",), has_status=True),
    ResourceType("", "v1", "Node", "nodes", False, ("no",), has_status=True, keeps_status_on_create=True),
    ResourceType(
        "",
        "v1",
        "Pod",
        "pods",
        True,
        ("po",),
        has_status=True,
        subresources=(_EVICTION, _BINDING),
        tracks_generation=True,
        categories=("all",),
    ),
    # The legacy scheduler binding resource: create-only, it binds the pod named in the body.
    ResourceType("", "v1", "Binding", "bindings", True, verbs=("create",)),
    ResourceType("", "v1", "Event", "events", True, ("ev",), create_on_update=True),
    ResourceType("", "v1", "Service", "services", True, ("svc",), has_status=True, categories=("all",)),
    ResourceType("", "v1", "ConfigMap", "configmaps", True, ("cm",)),
    ResourceType("", "v1", "Secret", "secrets", True),
    ResourceType("", "v1", "ServiceAccount", "serviceaccounts", True, ("sa",)),
    ResourceType(
        "apps",
        "v1",
        "DaemonSet",
        "daemonsets",
        True,
        ("ds",),
        has_status=True,
        tracks_generation=True,
        categories=("all",),
    ),
    ResourceType(
        "apps",
        "v1",
        "Deployment",
        "deployments",
        True,
        ("deploy",),
        has_status=True,
        tracks_generation=True,
        categories=("all",),
    ),
    ResourceType(
        "apps",
        "v1",
        "ReplicaSet",
        "replicasets",
        True,
        ("rs",),
        has_status=True,
        tracks_generation=True,
        categories=("all",),
    ),
    ResourceType(
        "apps",
        "v1",
        "StatefulSet",
        "statefulsets",
        True,
        ("sts",),
        has_status=True,
        tracks_generation=True,
        categories=("all",),
    ),
    ResourceType(
        "policy",
        "v1",
        "PodDisruptionBudget",
        "poddisruptionbudgets",
        True,
        ("pdb",),
        has_status=True,
        tracks_generation=True,
    ),
    ResourceType("coordination.k8s.io", "v1", "Lease", "leases", True),
    ResourceType(
        "batch", "v1", "Job", "jobs", True, has_status=True, tracks_generation=True, categories=("all",)
    ),
    ResourceType(
        "batch",
        "v1",
        "CronJob",
        "cronjobs",
        True,
        ("cj",),
        has_status=True,
        tracks_generation=True,
        categories=("all",),
    ),
    ResourceType("events.k8s.io", "v1", "Event", "events", True, ("ev",), stored_as="events"),
    # DeviceTaintRule: alpha in 1.33 (v1alpha3), beta in 1.36 (v1beta2); the kubernetes 37 client also
    # ships resource.k8s.io/v1, so that is preferred and the older versions serve the same objects.
    ResourceType(
        "resource.k8s.io",
        "v1",
        "DeviceTaintRule",
        "devicetaintrules",
        False,
        has_status=True,
        tracks_generation=True,
        extra_versions=("v1beta2", "v1alpha3"),
    ),
    # DRA: the drivers' ResourceSlices (v1 from 1.34) and the claims the scheduler allocates from them.
    ResourceType(
        "resource.k8s.io",
        "v1",
        "ResourceSlice",
        "resourceslices",
        False,
        tracks_generation=True,
        extra_versions=("v1beta2",),
    ),
    ResourceType(
        "resource.k8s.io",
        "v1",
        "ResourceClaim",
        "resourceclaims",
        True,
        has_status=True,
        tracks_generation=True,
        extra_versions=("v1beta2",),
    ),
)


@dataclass(frozen=True)
class CustomResource:
    """A custom resource registered at start-up, as an installed CRD would make it served."""

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool = True
    short_names: tuple[str, ...] = ()
    status_subresource: bool = True

    def to_resource_type(self) -> ResourceType:
        """The CRD's resource; CRDs always track ``metadata.generation``."""
        return ResourceType(
            self.group,
            self.version,
            self.kind,
            self.plural,
            self.namespaced,
            tuple(self.short_names),
            has_status=self.status_subresource,
            tracks_generation=True,
            custom=True,
        )


class UnknownResourceError(LookupError):
    """No such resource is served (HTTP 404 from the API server)."""


@dataclass
class ResourceRegistry:
    """Every resource type the server serves, addressable by store key or by URL parts."""

    types: list[ResourceType] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._by_key: dict[str, ResourceType] = {}
        self._by_path: dict[tuple[str, str, str], ResourceType] = {}
        for resource_type in list(self.types):
            self._index(resource_type)

    @classmethod
    def with_builtins(cls, custom: Iterable[CustomResource] = ()) -> ResourceRegistry:
        """The built-in types plus the given custom resources."""
        registry = cls(list(BUILTIN_RESOURCES))
        for resource in custom:
            registry.add(resource.to_resource_type())
        return registry

    def add(self, resource_type: ResourceType) -> None:
        """Serve one more type; a second type under the same group/version/plural is refused."""
        if resource_type.key in self._by_key:
            raise ValueError(f"resource {resource_type.key} is already registered")
        if resource_type not in self.types:
            self.types.append(resource_type)
        self._index(resource_type)

    def _index(self, resource_type: ResourceType) -> None:
        self._by_key[resource_type.key] = resource_type
        for version in resource_type.versions:
            self._by_path[(resource_type.group, version, resource_type.plural)] = resource_type

    def by_key(self, key: str) -> ResourceType:
        """The type stored under ``key`` (``pods``, ``jobs.batch``)."""
        try:
            return self._by_key[key]
        except KeyError:
            raise UnknownResourceError(f"the server could not find the requested resource ({key})") from None

    def by_path(self, group: str, version: str, plural: str) -> ResourceType:
        """The type served at ``/apis/{group}/{version}/{plural}`` (group empty for ``/api/v1``)."""
        try:
            return self._by_path[(group, version, plural)]
        except KeyError:
            raise UnknownResourceError("the server could not find the requested resource") from None

    def group_versions(self) -> dict[str, list[str]]:
        """Named groups (not the core group) and their served versions, preferred first."""
        groups: dict[str, list[str]] = {}
        for resource_type in self.types:
            if not resource_type.group:
                continue
            versions = groups.setdefault(resource_type.group, [])
            for version in resource_type.versions:
                if version not in versions:
                    versions.append(version)
        return groups

    def in_group_version(self, group: str, version: str) -> list[ResourceType]:
        """The types served at one group/version, in registration order."""
        return [t for t in self.types if t.group == group and version in t.versions]


def api_versions_document(server_address: str) -> KubeObject:
    """``GET /api``: the legacy core group's versions."""
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    }


def _group_entry(group: str, versions: list[str]) -> dict[str, Any]:
    entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {"name": group, "versions": entries, "preferredVersion": entries[0]}


def api_group_list_document(registry: ResourceRegistry) -> KubeObject:
    """``GET /apis``: every named group with its versions and preferred version."""
    groups = [_group_entry(group, versions) for group, versions in registry.group_versions().items()]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group_document(registry: ResourceRegistry, group: str) -> KubeObject | None:
    """``GET /apis/{group}``, or None when the group is not served."""
    versions = registry.group_versions().get(group)
    if versions is None:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group_entry(group, versions)}


def _resource_entry(resource_type: ResourceType) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": resource_type.plural,
        "singularName": resource_type.singular,
        "namespaced": resource_type.namespaced,
        "kind": resource_type.kind,
        "verbs": list(resource_type.verbs),
    }
    if resource_type.short_names:
        entry["shortNames"] = list(resource_type.short_names)
    if resource_type.categories:
        entry["categories"] = list(resource_type.categories)
    return entry


def _subresource_entries(resource_type: ResourceType) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = []
    if resource_type.has_status:
        entries.append(
            {
                "name": f"{resource_type.plural}/status",
                "singularName": "",
                "namespaced": resource_type.namespaced,
                "kind": resource_type.kind,
                "verbs": list(STATUS_VERBS),
            }
        )
    for sub in resource_type.subresources:
        entry: dict[str, Any] = {
            "name": f"{resource_type.plural}/{sub.name}",
            "singularName": "",
            "namespaced": resource_type.namespaced,
            "kind": sub.kind,
            "verbs": list(sub.verbs),
        }
        if sub.group or sub.version:
            entry["group"] = sub.group
            entry["version"] = sub.version
        entries.append(entry)
    return entries


def api_resource_list_document(registry: ResourceRegistry, group: str, version: str) -> KubeObject | None:
    """``GET /api/v1`` or ``/apis/{group}/{version}``, or None when that group/version is not served."""
    types = registry.in_group_version(group, version)
    if not types:
        return None
    resources: list[dict[str, Any]] = []
    for resource_type in types:
        resources.append(_resource_entry(resource_type))
        resources.extend(_subresource_entries(resource_type))
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version(group, version),
        "resources": resources,
    }
