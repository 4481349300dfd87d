"""Constraint evaluation as the Nomad scheduler's feasibility checks do it.

Targets (job specification, "constraint" block and "Interpreted runtime variables"): ``${attr.<key>}``,
``${meta.<key>}``, ``${node.unique.id}``, ``${node.unique.name}``, ``${node.datacenter}``,
``${node.class}``, ``${node.pool}``, ``${node.region}``; inside a ``device`` block also
``${device.attr.<key>}``, ``${device.vendor}``, ``${device.type}``, ``${device.model}``. A target without
``${`` is a literal. Operands: ``=``/``==``/``is``, ``!=``/``not``, ``<``/``<=``/``>``/``>=`` (numeric when
both sides are numbers, else lexical), ``regexp``, ``set_contains``, ``set_contains_all``,
``set_contains_any``, ``version``/``semver`` (comma-separated comparisons), ``is_set``, ``is_not_set``.
``distinct_hosts`` is a placement rule, handled by the scheduler.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Final

from sim.nomad.model import REGION, JsonDict

PLACEMENT_OPERANDS: Final = frozenset({"distinct_hosts"})
_TARGET = re.compile(r"^\$\{([^}]+)\}$")
_VERSION_CLAUSE = re.compile(r"^\s*(>=|<=|!=|>|<|=|~>)?\s*v?([0-9][0-9A-Za-z.\-+]*)\s*$")


def node_target(node: JsonDict, target: str) -> str | None:
    """The value of a node target (``None`` when it is not set); literals stand for themselves."""
    match = _TARGET.match(target.strip())
    if match is None:
        return target
    key = match.group(1)
    fixed = {
        "node.unique.id": node["ID"],
        "node.unique.name": node["Name"],
        "node.datacenter": node["Datacenter"],
        "node.class": node["NodeClass"],
        "node.pool": node["NodePool"],
        "node.region": REGION,
    }
    if key in fixed:
        return str(fixed[key])
    for prefix, table in (("attr.", node["Attributes"]), ("meta.", node["Meta"])):
        if key.startswith(prefix):
            value = table.get(key[len(prefix) :])
            return None if value is None else str(value)
    return None


# Units Nomad device attributes carry, as multiples of their base unit (bytes, hertz, watts, bytes/s).
_UNITS: Final[dict[str, float]] = {
    "B": 1,
    "KB": 1e3,
    "MB": 1e6,
    "GB": 1e9,
    "TB": 1e12,
    "KiB": 1024.0,
    "MiB": 1024.0**2,
    "GiB": 1024.0**3,
    "TiB": 1024.0**4,
    "Hz": 1,
    "KHz": 1e3,
    "kHz": 1e3,
    "MHz": 1e6,
    "GHz": 1e9,
    "mW": 1e-3,
    "W": 1,
    "kW": 1e3,
    "B/s": 1,
    "KB/s": 1e3,
    "MB/s": 1e6,
    "GB/s": 1e9,
    "KiB/s": 1024.0,
    "MiB/s": 1024.0**2,
    "GiB/s": 1024.0**3,
}


def _device_attribute(attribute: Mapping[str, Any]) -> str | float | None:
    """A typed device attribute as a comparable value: numbers in their base unit, text as is."""
    for kind in ("Int", "Float"):
        if attribute.get(kind) is not None:
            return float(attribute[kind]) * _UNITS.get(str(attribute.get("Unit") or ""), 1.0)
    for kind in ("String", "Bool"):
        if attribute.get(kind) is not None:
            return str(attribute[kind]).lower() if kind == "Bool" else str(attribute[kind])
    return None


def device_target(group: JsonDict, target: str, unit: str = "") -> str | float | None:
    """The value of a device target for one device group (numbers as floats in base units).

    A unitless literal is read in ``unit`` (the other side's unit): lenient where Nomad would refuse
    to compare a unitless number with a unit-carrying attribute.
    """
    match = _TARGET.match(target.strip())
    if match is None:
        return _number_or_text(target, unit)
    key = match.group(1)
    fixed = {"device.vendor": group["Vendor"], "device.type": group["Type"], "device.model": group["Name"]}
    if key in fixed:
        return str(fixed[key])
    if key.startswith("device.attr."):
        attribute = (group.get("Attributes") or {}).get(key[len("device.attr.") :])
        return None if attribute is None else _device_attribute(attribute)
    return None


def _number_or_text(text: str, unit: str = "") -> str | float:
    """A literal right-hand side: ``80 GiB`` in base units; a bare number is taken in ``unit``."""
    number, _, given_unit = text.strip().partition(" ")
    try:
        value = float(number)
    except ValueError:
        return text
    return value * _UNITS.get(given_unit.strip() or unit, 1.0)


def _ordered(left: Any, right: Any, compare: Callable[[Any, Any], bool]) -> bool:
    if left is None or right is None:
        return False
    try:
        return compare(float(left), float(right))
    except (TypeError, ValueError):
        return compare(str(left), str(right))


def _version_tuple(text: str) -> tuple[int, ...]:
    core = re.split(r"[-+]", text, maxsplit=1)[0]
    return tuple(int(part) if part.isdigit() else 0 for part in core.split("."))


def _version_matches(value: Any, spec: Any) -> bool:
    if value is None or spec is None:
        return False
    have = _version_tuple(str(value).lstrip("v"))
    for clause in str(spec).split(","):
        match = _VERSION_CLAUSE.match(clause)
        if match is None:
            return False
        operator, want_text = match.group(1) or "=", match.group(2)
        want = _version_tuple(want_text)
        width = max(len(have), len(want))
        left, right = have + (0,) * (width - len(have)), want + (0,) * (width - len(want))
        checks = {
            "=": left == right,
            "!=": left != right,
            ">": left > right,
            ">=": left >= right,
            "<": left < right,
            "<=": left <= right,
            "~>": left >= right and left[: len(want) - 1] == right[: len(want) - 1],
        }
        if not checks[operator]:
            return False
    return True


def _set(value: Any) -> set[str]:
    return {part.strip() for part in str(value).split(",") if part.strip()}


def _equal(left: Any, right: Any) -> bool:
    return left is not None and right is not None and str(left) == str(right)


def _not_equal(left: Any, right: Any) -> bool:
    return not _equal(left, right)  # an unset target differs from any value


def _regexp(left: Any, right: Any) -> bool:
    try:
        return re.search(str(right), str(left)) is not None
    except re.error:
        return False


def _needs_both(test: Callable[[Any, Any], bool]) -> Callable[[Any, Any], bool]:
    return lambda left, right: left is not None and right is not None and test(left, right)


_OPERANDS: Final[dict[str, Callable[[Any, Any], bool]]] = {
    "=": _equal,
    "==": _equal,
    "is": _equal,
    "!=": _not_equal,
    "not": _not_equal,
    "<": lambda a, b: _ordered(a, b, lambda x, y: bool(x < y)),
    "<=": lambda a, b: _ordered(a, b, lambda x, y: bool(x <= y)),
    ">": lambda a, b: _ordered(a, b, lambda x, y: bool(x > y)),
    ">=": lambda a, b: _ordered(a, b, lambda x, y: bool(x >= y)),
    "is_set": lambda left, _right: left is not None,
    "is_not_set": lambda left, _right: left is None,
    "regexp": _needs_both(_regexp),
    "set_contains": _needs_both(lambda a, b: _set(b) <= _set(a)),
    "set_contains_all": _needs_both(lambda a, b: _set(b) <= _set(a)),
    "set_contains_any": _needs_both(lambda a, b: bool(_set(b) & _set(a))),
    "version": _version_matches,
    "semver": _version_matches,
}


def check(operand: str, left: Any, right: Any) -> bool:
    """One constraint test; an unknown operand is never satisfied."""
    test = _OPERANDS.get(operand)
    return test is not None and test(left, right)


def node_satisfies(node: JsonDict, constraints: list[JsonDict]) -> bool:
    """Whether ``node`` passes every (non-placement) constraint."""
    for constraint in constraints:
        operand = constraint.get("Operand") or "="
        if operand in PLACEMENT_OPERANDS:
            continue
        left = node_target(node, str(constraint.get("LTarget") or ""))
        right = node_target(node, str(constraint.get("RTarget") or ""))
        if not check(operand, left, right):
            return False
    return True


def _unit_of(group: JsonDict, target: str) -> str:
    match = _TARGET.match(target.strip())
    if match is None or not match.group(1).startswith("device.attr."):
        return ""
    attribute = (group.get("Attributes") or {}).get(match.group(1)[len("device.attr.") :]) or {}
    return str(attribute.get("Unit") or "")


def device_satisfies(group: JsonDict, constraints: tuple[JsonDict, ...]) -> bool:
    """Whether a device group passes every constraint of a ``device`` block."""
    for constraint in constraints:
        operand = constraint.get("Operand") or "="
        left_target = str(constraint.get("LTarget") or "")
        left = device_target(group, left_target)
        right = device_target(group, str(constraint.get("RTarget") or ""), _unit_of(group, left_target))
        if not check(operand, left, right):
            return False
    return True
