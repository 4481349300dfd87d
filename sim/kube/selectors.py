"""Label and field selectors with the API server's syntax, validation and matching rules.

Label selectors follow "Labels and Selectors"
(https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors): equality
(``=``, ``==``, ``!=``) and set-based (``in``, ``notin``, ``key``, ``!key``) requirements, comma-joined
as a logical AND; ``!=`` and ``notin`` also match objects that lack the key. The string parser also
accepts the ``>`` / ``<`` integer comparisons that apimachinery's parser knows.

Field selectors follow "Field Selectors"
(https://kubernetes.io/docs/concepts/overview/working-with-objects/field-selectors/): ``=``, ``==`` and
``!=`` only, on the few fields each resource supports; any other field is refused with the server's
``field label not supported: <field>``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from sim.kube.protocols import KubeObject

__all__ = [
    "FieldRequirement",
    "FieldSelector",
    "LabelRequirement",
    "LabelSelector",
    "Operator",
    "SelectorError",
    "label_selector_from_spec",
    "parse_field_selector",
    "parse_label_selector",
    "supported_field_selectors",
]


class SelectorError(ValueError):
    """A label or field selector that the API server would refuse (HTTP 400 BadRequest)."""


class Operator(StrEnum):
    """Requirement operators, named as in ``metav1.LabelSelectorRequirement`` where one exists."""

    EQUALS = "="
    NOT_EQUALS = "!="
    IN = "in"
    NOT_IN = "notin"
    EXISTS = "exists"
    DOES_NOT_EXIST = "!"
    GREATER_THAN = "gt"
    LESS_THAN = "lt"


# Label syntax from "Labels and Selectors" → "Syntax and character set".
_NAME_RE = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_MAX_NAME = 63
_MAX_PREFIX = 253


def _validate_label_key(key: str) -> None:
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > _MAX_PREFIX or not _DNS_SUBDOMAIN_RE.match(prefix)):
        raise SelectorError(f"invalid label key {key!r}: prefix part must be a DNS-1123 subdomain")
    if not name or len(name) > _MAX_NAME or not _NAME_RE.match(name):
        raise SelectorError(
            f"invalid label key {key!r}: name part must be 63 characters or less, alphanumeric, '-', '_' "
            "or '.', starting and ending with an alphanumeric character"
        )


def _validate_label_value(value: str) -> None:
    if value and (len(value) > _MAX_NAME or not _NAME_RE.match(value)):
        raise SelectorError(
            f"invalid label value {value!r}: must be 63 characters or less, empty or alphanumeric, '-', "
            "'_' or '.', starting and ending with an alphanumeric character"
        )


def _as_int(value: str, key: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise SelectorError(f"for 'Gt', 'Lt' operators on {key!r}, the value must be an integer") from None


@dataclass(frozen=True)
class LabelRequirement:
    """One requirement of a label selector: ``key``, operator and values."""

    key: str
    operator: Operator
    values: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _validate_label_key(self.key)
        for value in self.values:
            _validate_label_value(value)
        if self.operator in (Operator.EQUALS, Operator.NOT_EQUALS) and len(self.values) != 1:
            raise SelectorError(f"exact-match operators on {self.key!r} need exactly one value")
        if self.operator in (Operator.IN, Operator.NOT_IN) and not self.values:
            raise SelectorError(f"for 'in', 'notin' operators on {self.key!r}, values set can't be empty")
        if self.operator in (Operator.EXISTS, Operator.DOES_NOT_EXIST) and self.values:
            raise SelectorError(f"values set must be empty for exists and does not exist on {self.key!r}")
        if self.operator in (Operator.GREATER_THAN, Operator.LESS_THAN):
            if len(self.values) != 1:
                raise SelectorError(
                    f"for 'Gt', 'Lt' operators on {self.key!r}, exactly one value is required"
                )
            _as_int(self.values[0], self.key)

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether ``labels`` satisfy this requirement (absent keys satisfy ``!=`` and ``notin``)."""
        present = self.key in labels
        value = labels.get(self.key)
        match self.operator:
            case Operator.EQUALS | Operator.IN:
                return present and value in self.values
            case Operator.NOT_EQUALS | Operator.NOT_IN:
                return not present or value not in self.values
            case Operator.EXISTS:
                return present
            case Operator.DOES_NOT_EXIST:
                return not present
            case Operator.GREATER_THAN | Operator.LESS_THAN:
                return present and _compare_int(value, self.operator, int(self.values[0]))

    def __str__(self) -> str:
        match self.operator:
            case Operator.EXISTS:
                return self.key
            case Operator.DOES_NOT_EXIST:
                return f"!{self.key}"
            case Operator.EQUALS | Operator.NOT_EQUALS:
                return f"{self.key}{self.operator.value}{self.values[0]}"
            case Operator.GREATER_THAN:
                return f"{self.key}>{self.values[0]}"
            case Operator.LESS_THAN:
                return f"{self.key}<{self.values[0]}"
            case _:
                return f"{self.key} {self.operator.value} ({','.join(self.values)})"


def _compare_int(value: str | None, operator: Operator, bound: int) -> bool:
    try:
        number = int(value or "")
    except ValueError:
        return False  # a non-integer label value never satisfies Gt/Lt, as in apimachinery
    return number > bound if operator is Operator.GREATER_THAN else number < bound


@dataclass(frozen=True)
class LabelSelector:
    """A conjunction of label requirements; ``nothing`` marks the null selector that matches no object."""

    requirements: tuple[LabelRequirement, ...] = ()
    nothing: bool = False

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        """Whether an object with these labels is selected."""
        if self.nothing:
            return False
        given = labels or {}
        return all(requirement.matches(given) for requirement in self.requirements)

    @property
    def empty(self) -> bool:
        """True for the selector that matches everything."""
        return not self.nothing and not self.requirements

    def __str__(self) -> str:
        return ",".join(str(requirement) for requirement in self.requirements)


# --- label selector string parser -------------------------------------------------------------------

_TOKEN_RE = re.compile(r"\s*(?:(?P<op>==|!=|=|\(|\)|,|!|>|<)|(?P<word>[^\s!=,()<>]+))")


def _tokenize(text: str) -> list[str]:
    tokens: list[str] = []
    position = 0
    while position < len(text):
        if text[position:].strip() == "":
            break
        found = _TOKEN_RE.match(text, position)
        if found is None:  # pragma: no cover - the pattern accepts every non-space character
            raise SelectorError(f"unable to parse requirement: unexpected character at {position}")
        tokens.append(found.group("op") or found.group("word"))
        position = found.end()
    return tokens


class _LabelParser:
    """Recursive-descent parser over the lexeme list, one requirement at a time."""

    def __init__(self, text: str) -> None:
        self._text = text
        self._tokens = _tokenize(text)
        self._index = 0

    def _peek(self) -> str | None:
        return self._tokens[self._index] if self._index < len(self._tokens) else None

    def _next(self) -> str | None:
        lexeme = self._peek()
        self._index += 1
        return lexeme

    def _fail(self, detail: str) -> SelectorError:
        return SelectorError(f"unable to parse requirement: {detail} (selector {self._text!r})")

    def _identifier(self, after: str) -> str:
        lexeme = self._next()
        if lexeme is None or lexeme in {"==", "!=", "=", "(", ")", ",", "!", ">", "<"}:
            raise self._fail(f"found {lexeme or 'end of string'!r}, expected: identifier after {after!r}")
        return lexeme

    def parse(self) -> tuple[LabelRequirement, ...]:
        requirements: list[LabelRequirement] = []
        while self._peek() is not None:
            requirements.append(self._requirement())
            lexeme = self._next()
            if lexeme is None:
                break
            if lexeme != ",":
                raise self._fail(f"found {lexeme!r}, expected: ',' or end of string")
            if self._peek() is None:
                raise self._fail("found end of string, expected: identifier after ','")
        return tuple(requirements)

    def _requirement(self) -> LabelRequirement:
        if self._peek() == "!":
            self._next()
            return LabelRequirement(self._identifier("!"), Operator.DOES_NOT_EXIST)
        key = self._identifier("start of requirement")
        operator = self._peek()
        if operator in (None, ","):
            return LabelRequirement(key, Operator.EXISTS)
        self._next()
        if operator in ("=", "=="):
            return LabelRequirement(key, Operator.EQUALS, (self._value(),))
        if operator == "!=":
            return LabelRequirement(key, Operator.NOT_EQUALS, (self._value(),))
        if operator in (">", "<"):
            kind = Operator.GREATER_THAN if operator == ">" else Operator.LESS_THAN
            return LabelRequirement(key, kind, (self._identifier(operator),))
        if operator in ("in", "notin"):
            kind = Operator.IN if operator == "in" else Operator.NOT_IN
            return LabelRequirement(key, kind, self._value_set())
        raise self._fail(f"found {operator!r}, expected: in, notin, =, ==, !=, gt, lt")

    def _value(self) -> str:
        """A single value; an empty value (``key=``) is legal and means the empty string."""
        lexeme = self._peek()
        if lexeme is None or lexeme == ",":
            return ""
        if lexeme in {"==", "!=", "=", "(", ")", "!", ">", "<"}:
            raise self._fail(f"found {lexeme!r}, expected: identifier for value")
        self._next()
        return lexeme

    def _value_set(self) -> tuple[str, ...]:
        if self._next() != "(":
            raise self._fail("found no '(', expected: '(' after 'in' or 'notin'")
        values: list[str] = []
        expect_value = True
        while True:
            lexeme = self._next()
            if lexeme is None:
                raise self._fail("found end of string, expected: ')'")
            if lexeme == ")":
                if expect_value and values:
                    values.append("")  # "in (a,)" carries an empty value, as apimachinery reads it
                return tuple(values)
            if lexeme == ",":
                if expect_value:
                    values.append("")
                expect_value = True
                continue
            if not expect_value or lexeme in {"==", "!=", "=", "(", "!", ">", "<"}:
                raise self._fail(f"found {lexeme!r}, expected: ',' or ')'")
            values.append(lexeme)
            expect_value = False


def parse_label_selector(text: str) -> LabelSelector:
    """Parse a ``labelSelector`` query parameter; the empty string selects everything."""
    return LabelSelector(_LabelParser(text).parse())


_SPEC_OPERATORS = {
    "In": Operator.IN,
    "NotIn": Operator.NOT_IN,
    "Exists": Operator.EXISTS,
    "DoesNotExist": Operator.DOES_NOT_EXIST,
}


def label_selector_from_spec(spec: Mapping[str, Any] | None) -> LabelSelector:
    """Convert a ``metav1.LabelSelector`` (``matchLabels`` + ``matchExpressions``).

    As ``metav1.LabelSelectorAsSelector`` does: ``None`` selects nothing and ``{}`` selects everything.
    The policy/v1 PodDisruptionBudget reference states the same: "A null selector will match no pods,
    while an empty ({}) selector will select all pods within its namespace."
    """
    if spec is None:
        return LabelSelector(nothing=True)
    if not isinstance(spec, Mapping):
        raise SelectorError("label selector must be an object with matchLabels and matchExpressions")
    requirements = [
        LabelRequirement(str(key), Operator.EQUALS, (str(value),))
        for key, value in sorted((spec.get("matchLabels") or {}).items())
    ]
    for expression in spec.get("matchExpressions") or []:
        requirements.append(_requirement_from_expression(expression))
    return LabelSelector(tuple(requirements))


def _requirement_from_expression(expression: Mapping[str, Any]) -> LabelRequirement:
    operator_name = expression.get("operator")
    operator = _SPEC_OPERATORS.get(str(operator_name))
    if operator is None:
        raise SelectorError(f"{operator_name!r} is not a valid label selector operator")
    values = tuple(str(value) for value in expression.get("values") or [])
    return LabelRequirement(str(expression.get("key", "")), operator, values)


# --- field selectors ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _FieldSpec:
    """Where a selectable field lives in the object and how the server renders a missing value."""

    path: tuple[str, ...]
    default: str = ""


_META_FIELDS = {
    "metadata.name": _FieldSpec(("metadata", "name")),
    "metadata.namespace": _FieldSpec(("metadata", "namespace")),
}

# Per-resource selectable fields, from each type's field label conversion function in Kubernetes'
# pkg/apis/*/v1/conversion.go and the registry's ToSelectableFields (the documentation points there).
_RESOURCE_FIELDS: dict[str, dict[str, _FieldSpec]] = {
    "pods": {
        **_META_FIELDS,
        "spec.nodeName": _FieldSpec(("spec", "nodeName")),
        "spec.restartPolicy": _FieldSpec(("spec", "restartPolicy")),
        "spec.schedulerName": _FieldSpec(("spec", "schedulerName")),
        "spec.serviceAccountName": _FieldSpec(("spec", "serviceAccountName")),
        "spec.hostNetwork": _FieldSpec(("spec", "hostNetwork"), "false"),
        "status.phase": _FieldSpec(("status", "phase")),
        "status.podIP": _FieldSpec(("status", "podIP")),
        "status.nominatedNodeName": _FieldSpec(("status", "nominatedNodeName")),
    },
    # Cluster-scoped core types list their own fields and do not accept metadata.namespace.
    "nodes": {
        "metadata.name": _META_FIELDS["metadata.name"],
        "spec.unschedulable": _FieldSpec(("spec", "unschedulable"), "false"),
    },
    "namespaces": {
        "metadata.name": _META_FIELDS["metadata.name"],
        "status.phase": _FieldSpec(("status", "phase")),
    },
    "events": {
        **_META_FIELDS,
        **{
            f"involvedObject.{part}": _FieldSpec(("involvedObject", part))
            for part in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
        },
        "reason": _FieldSpec(("reason",)),
        "reportingComponent": _FieldSpec(("reportingComponent",)),
        "source": _FieldSpec(("source", "component")),
        "type": _FieldSpec(("type",)),
    },
    "events.events.k8s.io": {
        **_META_FIELDS,
        **{
            f"regarding.{part}": _FieldSpec(("regarding", part))
            for part in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
        },
        "reason": _FieldSpec(("reason",)),
        "reportingController": _FieldSpec(("reportingController",)),
        "deprecatedSource": _FieldSpec(("deprecatedSource", "component")),
        "type": _FieldSpec(("type",)),
    },
    "secrets": {**_META_FIELDS, "type": _FieldSpec(("type",))},
    # pkg/apis/resource: ResourceSlices select by node, driver and pool (cluster-scoped, no namespace).
    "resourceslices.resource.k8s.io": {
        "metadata.name": _META_FIELDS["metadata.name"],
        "spec.nodeName": _FieldSpec(("spec", "nodeName")),
        "spec.driver": _FieldSpec(("spec", "driver")),
        "spec.pool.name": _FieldSpec(("spec", "pool", "name")),
    },
    "replicationcontrollers": {**_META_FIELDS, "status.replicas": _FieldSpec(("status", "replicas"), "0")},
    "replicasets.apps": {**_META_FIELDS, "status.replicas": _FieldSpec(("status", "replicas"), "0")},
    "jobs.batch": {**_META_FIELDS, "status.successful": _FieldSpec(("status", "succeeded"), "0")},
    "certificatesigningrequests.certificates.k8s.io": {
        "metadata.name": _META_FIELDS["metadata.name"],
        "spec.signerName": _FieldSpec(("spec", "signerName")),
    },
}


def _field_specs(resource: str) -> dict[str, _FieldSpec]:
    base = resource.split("/", 1)[0]
    return _RESOURCE_FIELDS.get(base, _META_FIELDS)


def supported_field_selectors(resource: str) -> frozenset[str]:
    """The field labels the API server accepts in a ``fieldSelector`` for ``resource``."""
    return frozenset(_field_specs(resource))


@dataclass(frozen=True)
class FieldRequirement:
    """One ``field=value`` or ``field!=value`` term."""

    field: str
    operator: Operator
    value: str


@dataclass(frozen=True)
class FieldSelector:
    """A conjunction of field requirements bound to the resource whose fields they read."""

    requirements: tuple[FieldRequirement, ...] = ()
    resource: str | None = None

    def matches(self, obj: KubeObject) -> bool:
        """Whether ``obj`` satisfies every term (a missing field reads as the server renders it)."""
        specs = _field_specs(self.resource) if self.resource else {}
        for requirement in self.requirements:
            spec = specs.get(requirement.field) or _FieldSpec(tuple(requirement.field.split(".")))
            actual = _render(_dig(obj, spec.path), spec.default)
            equal = actual == requirement.value
            if equal != (requirement.operator is Operator.EQUALS):
                return False
        return True

    @property
    def empty(self) -> bool:
        """True for the selector that matches everything."""
        return not self.requirements

    def for_resource(self, resource: str) -> FieldSelector:
        """This selector bound to ``resource``; raises SelectorError for a field it does not support."""
        supported = supported_field_selectors(resource)
        for requirement in self.requirements:
            if requirement.field not in supported:
                raise SelectorError(f"field label not supported: {requirement.field}")
        return FieldSelector(self.requirements, resource)

    def value_for(self, field: str) -> str | None:
        """The value an ``=`` term demands of ``field`` (for index look-ups), else None."""
        for requirement in self.requirements:
            if requirement.field == field and requirement.operator is Operator.EQUALS:
                return requirement.value
        return None


def _dig(obj: Mapping[str, Any], path: Iterable[str]) -> Any:
    current: Any = obj
    for part in path:
        if not isinstance(current, Mapping):
            return None
        current = current.get(part)
    return current


def _render(value: Any, default: str) -> str:
    if value is None:
        return default
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _split_unescaped(text: str, separator: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    escaped = False
    for char in text:
        if escaped:
            current.append("\\" + char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == separator:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    if escaped:
        current.append("\\")
    parts.append("".join(current))
    return parts


def _unescape(value: str) -> str:
    out: list[str] = []
    chars = iter(value)
    for char in chars:
        if char != "\\":
            out.append(char)
            continue
        following = next(chars, "")
        if following not in ("\\", ",", "="):
            raise SelectorError(f"invalid field selector: invalid escape sequence in {value!r}")
        out.append(following)
    return "".join(out)


_FIELD_OPERATORS = (("!=", Operator.NOT_EQUALS), ("==", Operator.EQUALS), ("=", Operator.EQUALS))


def _parse_field_term(term: str) -> FieldRequirement:
    # The first unescaped operator splits the term, as apimachinery's splitTerm does.
    index = 0
    while index < len(term):
        if term[index] == "\\":
            index += 2
            continue
        for lexeme, operator in _FIELD_OPERATORS:
            if term.startswith(lexeme, index):
                field = term[:index].strip()
                return FieldRequirement(field, operator, _unescape(term[index + len(lexeme) :]))
        index += 1
    raise SelectorError(f"invalid selector: '{term}'; can't understand '{term}'")


def parse_field_selector(text: str, resource: str | None = None) -> FieldSelector:
    """Parse a ``fieldSelector`` query parameter; the empty string selects everything.

    With ``resource`` given, a field that resource does not support raises
    ``SelectorError("field label not supported: <field>")`` as the API server answers.
    """
    if not text.strip():
        return FieldSelector(resource=resource)
    requirements = tuple(_parse_field_term(term.strip()) for term in _split_unescaped(text, ","))
    selector = FieldSelector(requirements)
    return selector.for_resource(resource) if resource is not None else selector
