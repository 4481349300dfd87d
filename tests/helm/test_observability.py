"""The dashboard and the alert rules a team uses on day one (docs/helm.md, "Observability"): every metric they
name is one the agent or the aggregator really exports, the rules pass `promtool check rules` and fire in
`promtool test rules` on the series that should make them fire, and the chart ships the same files as deploy/.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry
from repo_paths import REPO_ROOT

from agent.telemetry.metrics import AgentMetrics
from aggregator.metrics import AggregatorMetrics
from aggregator.settings import load_settings
from aggregator.store.engine import open_database
from core.clock import utc_now
from tests.helm.conftest import CHART_DIR, Render, one

DASHBOARD = REPO_ROOT / "deploy" / "grafana" / "gpuhealth-fleet.json"
RULES = REPO_ROOT / "deploy" / "prometheus" / "gpuhealth.rules.yaml"
CHART_RULES = CHART_DIR / "files" / "gpuhealth.rules.yaml"
CHART_DASHBOARD = CHART_DIR / "files" / "gpuhealth-fleet.json"
DEFAULT_NAMESPACE = "gpuhealth-system"
# Series Prometheus makes itself for every target: allowed in expressions though no code of ours exports them.
PROMETHEUS_OWN = {"up"}
# PromQL's functions, aggregations and keywords: words in an expression that are not metric names.
PROMQL_WORDS = {
    "sum", "min", "max", "avg", "count", "stddev", "stdvar", "topk", "bottomk", "quantile", "count_values",
    "group", "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless",
    "offset", "rate", "irate", "increase", "delta", "idelta", "deriv", "histogram_quantile", "absent",
    "absent_over_time", "vector", "scalar", "time", "clamp_min", "clamp_max", "abs", "ceil", "floor", "round",
    "label_replace", "label_join", "sort", "sort_desc", "changes", "resets", "max_over_time",
    "min_over_time", "avg_over_time", "sum_over_time", "count_over_time", "last_over_time", "timestamp",
}  # fmt: skip
IN_BRACES = re.compile(r"\{[^}]*\}")
IN_BRACKETS = re.compile(r"\[[^\]]*\]")
GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
STRINGS = re.compile(r'"[^"]*"')
WORD = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def metric_names(expression: str) -> set[str]:
    """The metric names an expression reads (label matchers, ranges, grouping labels and functions dropped)."""
    text = STRINGS.sub("", expression)
    text = IN_BRACES.sub("", text)
    text = IN_BRACKETS.sub("", text)
    text = GROUPING.sub(r"\1", text)
    text = re.sub(r"\$__\w+", "", text)
    return {word for word in WORD.findall(text) if word not in PROMQL_WORDS}


def exposed_names(registry: CollectorRegistry) -> set[str]:
    """Every series name a registry can expose, with the suffixes its metric types add."""
    suffixes = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_count", "_sum", "_created")}
    names: set[str] = set()
    for family in registry.collect():
        names.add(family.name)
        names.update(family.name + suffix for suffix in suffixes.get(family.type, ()))
    return names


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Iterator[set[str]]:
    """The names the agent's and the aggregator's registries expose (the aggregator on a real database)."""
    database_file = tmp_path_factory.mktemp("aggregator") / "aggregator.db"
    settings = load_settings(environ={}, database_url=f"sqlite:///{database_file}", allow_anonymous=True)
    database = open_database(settings)
    try:
        aggregator = AggregatorMetrics(database, utc_now)
        yield exposed_names(AgentMetrics("gpu-node-0").registry) | exposed_names(aggregator.registry)
    finally:
        database.dispose()


def dashboard_expressions() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]


def rule_expressions() -> list[str]:
    rules = yaml.safe_load(RULES.read_text())
    return [rule["expr"] for group in rules["groups"] for rule in group["rules"]]


@pytest.mark.parametrize("expression", [*dashboard_expressions(), *rule_expressions()])
def test_every_expression_names_only_metrics_the_code_exports(expression: str, exported: set[str]) -> None:
    names = metric_names(expression)
    assert names, f"no metric found in {expression!r}"
    assert names <= exported | PROMETHEUS_OWN, (
        f"unknown metric(s) {sorted(names - exported - PROMETHEUS_OWN)}"
    )


def test_the_name_extraction_finds_metrics_and_skips_labels_and_functions() -> None:
    """The check above is only as good as this: metric names found, everything else left out."""
    expression = 'sum by (node) (increase(gpuhealth_agent_drains_total{outcome=~"a|b"}[30m])) > 0 or up == 1'
    assert metric_names(expression) == {"gpuhealth_agent_drains_total", "up"}


def test_the_dashboard_shows_what_on_call_needs() -> None:
    """Fleet health by state, GPUs unhealthy, fault-to-taint latency, drains and outcomes, permits refused,
    breaker, stale nodes and alert delivery failures: each has a panel reading its metric."""
    expressions = " ".join(dashboard_expressions())
    for needed in (
        "gpuhealth_aggregator_nodes",
        "gpuhealth_agent_gpu_health",
        "gpuhealth_agent_fault_to_taint_seconds_bucket",
        "gpuhealth_agent_drains_total",
        "gpuhealth_aggregator_permit_decisions_total",
        "gpuhealth_aggregator_breaker_tripped",
        'state="stale"',
        "gpuhealth_aggregator_alert_deliveries",
    ):
        assert needed in expressions
    assert json.loads(DASHBOARD.read_text())["uid"] == "gpuhealth-fleet"


def test_the_chart_ships_the_same_dashboard_for_the_grafana_sidecar(render: Render) -> None:
    objects = render({"metrics": {"grafanaDashboard": {"enabled": True}}})
    dashboard = [obj for obj in objects if obj["metadata"]["name"].endswith("-dashboard")]
    assert len(dashboard) == 1
    assert dashboard[0]["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(dashboard[0]["data"]["gpuhealth-fleet.json"]) == json.loads(DASHBOARD.read_text())
    assert CHART_DASHBOARD.read_text() == DASHBOARD.read_text()


def test_the_prometheus_rule_is_the_deploy_rule_file_for_the_releases_namespace(render: Render) -> None:
    rule = one(render({"metrics": {"prometheusRule": {"enabled": True}}}), "PrometheusRule")
    assert rule["spec"] == {"groups": yaml.safe_load(RULES.read_text())["groups"]}
    chart_rules = yaml.safe_load(CHART_RULES.read_text().replace("NAMESPACE", DEFAULT_NAMESPACE))
    assert chart_rules == yaml.safe_load(RULES.read_text())


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("promtool is missing: .ci/run installs it (Debian package prometheus)")
        pytest.skip("promtool not installed (apt-get install prometheus provides it)")
    return found


def test_the_rule_file_passes_promtool_check_rules() -> None:
    result = subprocess.run(
        [promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def rule_test(
    alert: str, series: list[dict[str, str]], eval_time: str, fires: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "interval": "1m",
        "input_series": series,
        "alert_rule_test": [{"eval_time": eval_time, "alertname": alert, "exp_alerts": fires}],
    }


def test_each_alert_fires_on_the_series_that_should_fire_it(tmp_path: Path) -> None:
    """`promtool test rules`: each alert fires when its condition has held its `for`, and not before."""
    namespace = {"namespace": DEFAULT_NAMESPACE}
    agent_target = f'up{{namespace="{DEFAULT_NAMESPACE}",container="agent",node="gpu-node-1"}}'
    aggregator_target = f'up{{namespace="{DEFAULT_NAMESPACE}",container="aggregator"}}'
    tests = [
        rule_test("GPUHealthBreakerTripped", [{"series": "gpuhealth_aggregator_breaker_tripped", "values": "0 1 1 1"}],
                  "3m", [{"exp_labels": {"severity": "critical"}}]),
        rule_test("GPUHealthBreakerTripped", [{"series": "gpuhealth_aggregator_breaker_tripped", "values": "0 0 0 0"}],
                  "3m", []),
        rule_test("GPUHealthNodesStale",
                  [{"series": 'gpuhealth_aggregator_nodes{state="stale"}', "values": "2x15"}], "12m",
                  [{"exp_labels": {"severity": "warning"}}]),
        rule_test("GPUHealthAlertsDeadLettered",
                  [{"series": 'gpuhealth_aggregator_alert_deliveries{status="dead",sink="pager"}', "values": "1x10"}],
                  "7m", [{"exp_labels": {"severity": "warning", "sink": "pager"}}]),
        rule_test("GPUHealthDrainBlocked",
                  [{"series": 'gpuhealth_agent_drains_total{node="gpu-node-3",outcome="incomplete"}',
                    "values": "0 0 1 1 1"}],
                  "4m", [{"exp_labels": {"severity": "warning", "node": "gpu-node-3"}}]),
        rule_test("GPUHealthAgentDown",
                  [{"series": agent_target,
                    "values": "0x15"}],
                  "12m", [{"exp_labels": {"severity": "warning", "node": "gpu-node-1", "container": "agent",
                                          **namespace}}]),
        rule_test("GPUHealthAggregatorDown",
                  [{"series": aggregator_target, "values": "1 1 0x10"}],
                  "9m", [{"exp_labels": {"severity": "critical"}}]),
        rule_test("GPUHealthAggregatorDown",
                  [{"series": aggregator_target, "values": "1x10"}],
                  "9m", []),
    ]  # fmt: skip
    # The expressions, their `for` and labels are under test; the annotations' templates are left out (a
    # unit test would have to spell each rendered text) and checked by `promtool check rules` above.
    rules = yaml.safe_load(RULES.read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    rule_file = tmp_path / "gpuhealth.rules.yaml"
    rule_file.write_text(yaml.safe_dump(rules), encoding="utf-8")
    test_file = tmp_path / "gpuhealth.rules.test.yaml"
    test_file.write_text(yaml.safe_dump({"rule_files": [str(rule_file)], "tests": tests}), encoding="utf-8")
    result = subprocess.run(
        [promtool(), "test", "rules", str(test_file)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
