"""Label and field selectors behave as the Kubernetes documentation specifies.

Label selectors: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors
Field selectors: https://kubernetes.io/docs/concepts/overview/working-with-objects/field-selectors/
"""

from __future__ import annotations

import pytest

from sim.kube.selectors import (
    SelectorError,
    label_selector_from_spec,
    parse_field_selector,
    parse_label_selector,
    supported_field_selectors,
)

GPU = {"tier": "gpu", "zone": "a", "nvidia.com/gpu.count": "8"}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", True),
        ("tier=gpu", True),
        ("tier==gpu", True),
        ("tier!=gpu", False),
        ("tier=cpu", False),
        ("tier=gpu,zone=a", True),
        ("tier=gpu,zone=b", False),
        ("tier in (gpu, cpu)", True),
        ("tier notin (gpu,cpu)", False),
        ("zone in (b,c)", False),
        ("tier", True),
        ("!tier", False),
        ("missing", False),
        ("!missing", True),
        ("nvidia.com/gpu.count>4", True),
        ("nvidia.com/gpu.count<4", False),
        ("  tier = gpu , zone in (a) ", True),
    ],
)
def test_label_selector_operators_follow_equality_and_set_based_semantics(text: str, expected: bool) -> None:
    """Docs 'Label selectors': comma is AND; =,==,!= equality; in, notin, key, !key set-based."""
    assert parse_label_selector(text).matches(GPU) is expected


def test_not_equals_and_notin_select_objects_without_the_key() -> None:
    """Docs: 'environment!=production' also selects resources without the key, so does notin."""
    assert parse_label_selector("role!=db").matches(GPU)
    assert parse_label_selector("role notin (db)").matches(GPU)
    assert not parse_label_selector("role in (db)").matches(GPU)


def test_empty_value_after_equals_means_the_empty_string() -> None:
    """'key=' requires the label to be present with the empty value."""
    selector = parse_label_selector("flag=")
    assert selector.matches({"flag": ""})
    assert not selector.matches({})
    assert not selector.matches({"flag": "x"})


@pytest.mark.parametrize(
    "text",
    [
        "tier in ()",
        "tier in (a",
        "tier=gpu,",
        "tier gpu",
        "!",
        "tier=(a)",
        "bad key=1",
        "-bad=1",
        "tier=a b",
        "x=" + "v" * 64,
        "n>abc",
        "tier in a",
        "tier ~ a",
    ],
)
def test_invalid_label_selector_raises_selector_error(text: str) -> None:
    """The API server answers 400 BadRequest for an unparsable or invalid label selector."""
    with pytest.raises(SelectorError):
        parse_label_selector(text)


def test_label_selector_renders_back_to_parseable_text() -> None:
    selector = parse_label_selector("a=1,b!=2,c in (x,y),!d,e")
    assert parse_label_selector(str(selector)) == selector


def test_spec_selector_null_matches_nothing_and_empty_matches_everything() -> None:
    """policy/v1 PodDisruptionBudgetSpec: 'A null selector will match no pods, while an empty ({})
    selector will select all pods within its namespace' (metav1.LabelSelectorAsSelector)."""
    assert not label_selector_from_spec(None).matches(GPU)
    assert not label_selector_from_spec(None).matches({})
    assert label_selector_from_spec({}).matches(GPU)
    assert label_selector_from_spec({}).empty


def test_spec_selector_combines_match_labels_and_match_expressions() -> None:
    """metav1.LabelSelector: matchLabels and every matchExpressions entry are ANDed."""
    spec = {
        "matchLabels": {"tier": "gpu"},
        "matchExpressions": [
            {"key": "zone", "operator": "In", "values": ["a", "b"]},
            {"key": "role", "operator": "DoesNotExist"},
            {"key": "tier", "operator": "Exists"},
            {"key": "zone", "operator": "NotIn", "values": ["c"]},
        ],
    }
    selector = label_selector_from_spec(spec)
    assert selector.matches(GPU)
    assert not selector.matches({**GPU, "role": "x"})
    assert not selector.matches({**GPU, "zone": "c"})


@pytest.mark.parametrize(
    "expression",
    [
        {"key": "a", "operator": "In", "values": []},
        {"key": "a", "operator": "Exists", "values": ["x"]},
        {"key": "a", "operator": "Gt", "values": ["1"]},
        {"key": "a b", "operator": "Exists"},
    ],
)
def test_invalid_spec_selector_expression_is_refused(expression: dict[str, object]) -> None:
    """LabelSelectorRequirement: In/NotIn need values, Exists/DoesNotExist take none; only 4 operators."""
    with pytest.raises(SelectorError):
        label_selector_from_spec({"matchExpressions": [expression]})


POD = {
    "metadata": {"name": "train-0", "namespace": "ml"},
    "spec": {"nodeName": "gpu-node-1", "restartPolicy": "Never"},
    "status": {"phase": "Running", "podIP": "10.0.0.5"},
}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", True),
        ("spec.nodeName=gpu-node-1", True),
        ("spec.nodeName==gpu-node-1", True),
        ("spec.nodeName!=gpu-node-1", False),
        ("status.phase=Running,metadata.namespace=ml", True),
        ("status.phase!=Running,metadata.namespace=ml", False),
        ("metadata.name=train-1", False),
        ("spec.hostNetwork=false", True),
        ("status.nominatedNodeName=", True),
    ],
)
def test_pod_field_selectors_match_supported_fields(text: str, expected: bool) -> None:
    """Docs 'Field selectors': =, == and != on the supported fields; comma chains are ANDed."""
    assert parse_field_selector(text, "pods").matches(POD) is expected


def test_unbound_pod_matches_empty_node_name() -> None:
    """An unset spec.nodeName reads as '' so 'spec.nodeName=' finds unscheduled pods."""
    pending = {"metadata": {"name": "p", "namespace": "ml"}, "spec": {}}
    assert parse_field_selector("spec.nodeName=", "pods").matches(pending)
    assert not parse_field_selector("spec.nodeName=", "pods").matches(POD)


def test_node_unschedulable_field_defaults_to_false() -> None:
    """nodes support spec.unschedulable; a node without the field is schedulable ('false')."""
    node = {"metadata": {"name": "n1"}, "spec": {}}
    assert parse_field_selector("spec.unschedulable=false", "nodes").matches(node)
    cordoned = {"metadata": {"name": "n1"}, "spec": {"unschedulable": True}}
    assert parse_field_selector("spec.unschedulable=true", "nodes").matches(cordoned)


def test_unsupported_field_is_refused_with_the_servers_message() -> None:
    """Docs: 'kubectl get ingress --field-selector foo.bar=bar' fails with 'field label not supported'."""
    with pytest.raises(SelectorError, match=r"^field label not supported: foo\.bar$"):
        parse_field_selector("foo.bar=bar", "pods")
    with pytest.raises(SelectorError, match=r"field label not supported: metadata\.namespace"):
        parse_field_selector("metadata.namespace=x", "nodes")


def test_supported_fields_per_resource() -> None:
    """metadata.name/namespace everywhere for namespaced types; type-specific fields on top."""
    assert "spec.nodeName" in supported_field_selectors("pods")
    assert supported_field_selectors("nodes") == {"metadata.name", "spec.unschedulable"}
    assert {"involvedObject.name", "reason", "type", "source"} <= supported_field_selectors("events")
    assert supported_field_selectors("jobsets.jobset.x-k8s.io") == {"metadata.name", "metadata.namespace"}


def test_event_source_field_reads_source_component() -> None:
    event = {"metadata": {"name": "e", "namespace": "d"}, "source": {"component": "gpuhealth"}}
    assert parse_field_selector("source=gpuhealth", "events").matches(event)


def test_escaped_comma_and_equals_belong_to_the_value() -> None:
    """Field selector values escape ',' and '=' with a backslash."""
    selector = parse_field_selector(r"metadata.name=a\,b\=c")
    assert selector.value_for("metadata.name") == "a,b=c"
    assert selector.matches({"metadata": {"name": "a,b=c"}})


@pytest.mark.parametrize("text", ["spec.nodeName", "a=b,c", r"metadata.name=a\q"])
def test_invalid_field_selector_raises(text: str) -> None:
    with pytest.raises(SelectorError):
        parse_field_selector(text)


def test_field_selector_bound_later_validates_fields() -> None:
    selector = parse_field_selector("spec.unschedulable=true")
    with pytest.raises(SelectorError, match="field label not supported"):
        selector.for_resource("pods")
    assert selector.for_resource("nodes").resource == "nodes"
