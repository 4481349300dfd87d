"""kube-scheduler, KWOK and the JobSet, Kueue and Trainer managers on the real control plane:
``sim.realkube.stack``, under the plain name the tests import."""

from sim.realkube.stack import (
    KINDS,
    KWOK_ANNOTATION,
    Controller,
    ControlPlaneUnavailable,
    find_stack,
    how_to_build,
    kwok_config,
    load_yaml,
)

__all__ = [
    "KINDS",
    "KWOK_ANNOTATION",
    "ControlPlaneUnavailable",
    "Controller",
    "find_stack",
    "how_to_build",
    "kwok_config",
    "load_yaml",
]
