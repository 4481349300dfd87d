"""Each sink's request matches the receiver's documented shape; the documented signature recipe verifies
our signature and rejects a stale timestamp or a changed body."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

import pytest
from repo_paths import DOCS

from aggregator.alert_settings import SinkSettings
from aggregator.alerts.payloads import build
from aggregator.alerts.signing import SignatureError, sign, verify
from core.alerts_api import Alert

NOW = datetime(2026, 12, 2, 7, 40, tzinfo=UTC)
DOCS = DOCS / "alerts.md"
BASE = "https://gpuhealth.example.com"


def _alert(kind: str = "incident_opened", status: str = "firing", incident: str | None = "inc-7") -> Alert:
    return Alert.model_validate(
        {
            "id": 1,
            "key": f"{kind}:{incident}",
            "kind": kind,
            "status": status,
            "severity": "critical",
            "group_key": f"incident:{incident}",
            "node": "gpu-node-07",
            "incident_id": incident,
            "summary": "gpu-node-07: GPU incident XID_79; action reboot",
            "details": {"action": "reboot", "reasons": ["XID_79"], "gpus": ["GPU-5c1f"]},
            "labels": {"topology.kubernetes.io/zone": "zone-a"},
            "created_at": NOW,
            "silence_id": None,
        }
    )


def _sink(**values: Any) -> SinkSettings:
    return SinkSettings.model_validate({"name": "s", "url": "https://receiver.example/hook", **values})


def documented_verifier() -> Any:
    """The ```python block of docs/alerts.md, executed as a receiver would paste it."""
    block = re.search(r"```python\n(.*?)```", DOCS.read_text(encoding="utf-8"), re.S)
    assert block is not None
    namespace: dict[str, Any] = {}
    exec(compile(block.group(1), str(DOCS), "exec"), namespace)
    return namespace["verify_gpuhealth_signature"]


def test_documented_recipe_verifies_our_signature_and_rejects_stale_or_tampered() -> None:
    """Signed with the sink's secret over timestamp + body; stale timestamps and edited bodies fail."""
    request = build(_sink(type="webhook", secret="s3cret"), _alert(), base_url=BASE, now=NOW)
    check = documented_verifier()
    moment = NOW.timestamp()
    assert check(b"s3cret", request.headers, request.body, now=moment)
    assert not check(b"s3cret", request.headers, request.body, now=moment + 301)
    assert not check(b"other", request.headers, request.body, now=moment)
    assert not check(b"s3cret", request.headers, request.body + b" ", now=moment)
    verify(
        b"s3cret",
        request.headers["X-Gpuhealth-Timestamp"],
        request.headers["X-Gpuhealth-Signature"],
        request.body,
        now=moment,
    )
    with pytest.raises(SignatureError, match="stale"):
        verify(
            b"s3cret",
            request.headers["X-Gpuhealth-Timestamp"],
            sign(b"s3cret", 0, request.body),
            request.body,
            now=moment + 3600,
        )


def test_webhook_body_is_the_alert_document_with_idempotency_key() -> None:
    request = build(_sink(type="webhook"), _alert(), base_url=BASE, now=NOW)
    body = json.loads(request.body)
    assert body["schema"] == "gpuhealth.alert/v1"
    assert body["id"] == request.headers["Idempotency-Key"] == "incident_opened:inc-7"
    assert body["link"] == f"{BASE}/v1/incidents/inc-7"
    assert "X-Gpuhealth-Signature" not in request.headers  # no secret: unsigned


def test_cloudevents_option_wraps_the_document_in_a_structured_mode_event() -> None:
    request = build(_sink(type="webhook", cloudevents=True, secret="k"), _alert(), base_url=None, now=NOW)
    event = json.loads(request.body)
    assert request.headers["Content-Type"] == "application/cloudevents+json"
    assert {k: event[k] for k in ("specversion", "id", "type", "subject")} == {
        "specversion": "1.0",
        "id": "incident_opened:inc-7",
        "type": "io.gpuhealth.alert.incident_opened",
        "subject": "gpu-node-07",
    }
    assert event["source"] and event["time"] == "2026-12-02T07:40:00Z"
    assert event["data"]["kind"] == "incident_opened"


def test_slack_message_has_text_fallback_and_blocks_naming_node_gpu_finding_action_and_link() -> None:
    """Slack incoming webhook: ``text`` plus Block Kit ``blocks`` (section / context, mrkdwn)."""
    request = build(_sink(type="slack"), _alert(), base_url=BASE, now=NOW)
    message = json.loads(request.body)
    assert isinstance(message["text"], str) and "gpu-node-07" in message["text"]
    assert [block["type"] for block in message["blocks"]] == ["section", "section", "context"]
    shown = json.dumps(message["blocks"])
    for fact in ("gpu-node-07", "GPU-5c1f", "XID_79", "reboot", f"<{BASE}/v1/incidents/inc-7|"):
        assert fact in shown, fact
    for block in message["blocks"]:
        texts = [block.get("text"), *block.get("fields", []), *block.get("elements", [])]
        assert all(t["type"] == "mrkdwn" for t in texts if t)


def test_pagerduty_trigger_and_resolve_share_the_incident_as_dedup_key() -> None:
    """Events API v2: routing_key, event_action, dedup_key; payload{summary, source, severity} on trigger."""
    sink = _sink(type="pagerduty", routing_key="R0UT1NG")
    trigger = json.loads(build(sink, _alert(), base_url=BASE, now=NOW).body)
    resolve = json.loads(build(sink, _alert("incident_resolved", "resolved"), base_url=BASE, now=NOW).body)
    assert trigger["routing_key"] == resolve["routing_key"] == "R0UT1NG"
    assert (trigger["event_action"], resolve["event_action"]) == ("trigger", "resolve")
    assert trigger["dedup_key"] == resolve["dedup_key"] == "inc-7"
    payload = trigger["payload"]
    assert payload["summary"] and payload["source"] == "gpu-node-07"
    assert payload["severity"] in {"critical", "error", "warning", "info"}
    assert datetime.fromisoformat(payload["timestamp"])
    assert trigger["links"][0]["href"] == f"{BASE}/v1/incidents/inc-7"


def test_alertmanager_gets_a_list_at_api_v2_alerts_and_a_resolve_with_the_same_labels() -> None:
    sink = _sink(type="alertmanager", url="http://am:9093/")
    firing = build(sink, _alert(), base_url=BASE, now=NOW)
    resolved = build(sink, _alert("incident_resolved", "resolved"), base_url=BASE, now=NOW)
    assert firing.url == "http://am:9093/api/v2/alerts"
    [item] = json.loads(firing.body)
    [done] = json.loads(resolved.body)
    assert set(item) == {"labels", "annotations", "startsAt", "generatorURL"}
    assert item["labels"]["alertname"] == "GPUHealthIncident" and item["labels"]["node"] == "gpu-node-07"
    assert item["annotations"]["summary"]
    assert done["labels"] == item["labels"] and done["endsAt"] == "2026-12-02T07:40:00Z"


def test_secrets_do_not_appear_in_settings_repr() -> None:
    sink = _sink(type="pagerduty", routing_key="R0UT1NG", secret="s3cret")
    assert "R0UT1NG" not in repr(sink) and "s3cret" not in repr(sink) and "receiver.example" not in repr(sink)
