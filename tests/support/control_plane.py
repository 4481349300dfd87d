"""The real control plane of the realkube tests: ``sim.realkube.control_plane`` (which
``gpuhealth demo --cluster real`` starts too), under the plain name the tests import."""

from sim.realkube.control_plane import (
    NODE_MONITOR_GRACE_S,
    Binaries,
    ControlPlane,
    ControlPlaneUnavailable,
    find_binaries,
    free_port,
)

__all__ = [
    "NODE_MONITOR_GRACE_S",
    "Binaries",
    "ControlPlane",
    "ControlPlaneUnavailable",
    "find_binaries",
    "free_port",
]
