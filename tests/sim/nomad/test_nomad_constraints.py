"""Constraint operands and targets, as job-specification/constraint and /device document them.

Pages cited: developer.hashicorp.com/nomad/docs/job-specification/constraint ("operator" values),
/docs/runtime/interpolation (node attributes and metadata), /docs/job-specification/device.
"""

from __future__ import annotations

import pytest

from core.clock import ManualClock
from sim.nomad.constraints import check, device_satisfies, node_satisfies, node_target
from sim.nomad.model import gpu_node


@pytest.mark.parametrize(
    ("operand", "left", "right", "expected"),
    [
        ("=", "healthy", "healthy", True),
        ("=", None, "healthy", False),
        ("!=", None, "healthy", True),  # an unset target differs from every value
        ("!=", "healthy", "healthy", False),
        (">", "10", "9", True),  # numbers compare as numbers
        ("<", "b", "a", False),  # text compares lexically
        ("regexp", "gpu-node-12", r"^gpu-node-1\d$", True),
        ("regexp", None, ".*", False),
        ("set_contains", "a,b,c", "a,c", True),
        ("set_contains_any", "a,b", "c,b", True),
        ("version", "1.9.3", ">= 1.5, < 2.0", True),
        ("semver", "1.4.0", ">= 1.5", False),
        ("is_set", "x", None, True),
        ("is_not_set", None, None, True),
        ("frobnicate", "a", "a", False),  # unknown operands never match
    ],
)
def test_operands(operand: str, left: str | None, right: str | None, expected: bool) -> None:
    """Each operand's documented meaning."""
    assert check(operand, left, right) is expected


def test_node_targets_interpolate_attributes_meta_and_node_fields() -> None:
    """``${attr.*}``, ``${meta.*}``, ``${node.unique.name}``, ``${node.datacenter}``; literals stay."""
    node = gpu_node("gpu-node-3", gpus=1, index=1, now=ManualClock().now())
    node["Meta"] = {"gpuhealth.state": "healthy"}
    assert node_target(node, "${meta.gpuhealth.state}") == "healthy"
    assert node_target(node, "${meta.absent}") is None
    assert node_target(node, "${attr.kernel.name}") == "linux"
    assert node_target(node, "${node.unique.name}") == "gpu-node-3"
    assert node_target(node, "${node.datacenter}") == "dc1"
    assert node_target(node, "literal") == "literal"
    unhealthy = [{"LTarget": "${meta.gpuhealth.state}", "RTarget": "unhealthy", "Operand": "!="}]
    assert node_satisfies(node, unhealthy)


def test_device_attributes_compare_with_units() -> None:
    """job-specification/device: ``${device.attr.memory} >= 40 GiB`` converts units (80 GB card passes,
    100 GiB does not); ``${device.model}`` matches the model name."""
    node = gpu_node("gpu-node-0", gpus=1, index=1, now=ManualClock().now())
    group = node["NodeResources"]["Devices"][0]
    attr = "${device.attr.memory}"
    assert device_satisfies(group, ({"LTarget": attr, "RTarget": "40 GiB", "Operand": ">="},))
    assert not device_satisfies(group, ({"LTarget": attr, "RTarget": "100 GiB", "Operand": ">="},))
    assert device_satisfies(
        group, ({"LTarget": "${device.model}", "RTarget": "H100 80GB HBM3", "Operand": "="},)
    )
