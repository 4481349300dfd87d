"""What each sink receives: URL, headers and body bytes for one alert.

Shapes follow each receiver's documented API: Slack incoming webhooks (``text`` fallback plus ``blocks``),
PagerDuty Events API v2 (``routing_key``, ``event_action`` trigger/resolve, ``dedup_key``, ``payload`` with
``summary``, ``source``, ``severity``), Alertmanager ``POST /api/v2/alerts`` (a list of alerts with
``labels``, ``annotations``, ``startsAt``, ``endsAt``, ``generatorURL``), and CloudEvents 1.0 structured
mode for the generic webhook when asked.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from aggregator.alert_settings import SinkSettings
from aggregator.alerts.signing import IDEMPOTENCY_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, sign
from core.alerts_api import Alert

SCHEMA = "gpuhealth.alert/v1"
CLOUDEVENTS_SOURCE = "/gpuhealth/aggregator"
_PAGERDUTY_SEVERITY = {"critical": "critical", "warning": "warning", "info": "info"}
_SLACK_ICON = {"critical": ":red_circle:", "warning": ":large_orange_circle:", "info": ":large_blue_circle:"}


@dataclass(frozen=True)
class Request:
    """One HTTP POST to a sink."""

    url: str
    headers: dict[str, str]
    body: bytes


def link(alert: Alert, base_url: str | None) -> str | None:
    """Where on-call can read more: the incident, else the node, else the breaker."""
    if not base_url:
        return None
    base = base_url.rstrip("/")
    if alert.incident_id:
        return f"{base}/v1/incidents/{alert.incident_id}"
    if alert.node:
        return f"{base}/v1/nodes/{alert.node}"
    return f"{base}/v1/breaker"


def alert_document(alert: Alert, base_url: str | None) -> dict[str, Any]:
    """The generic webhook body (``gpuhealth.alert/v1``)."""
    return {
        "schema": SCHEMA,
        "id": alert.key,
        "kind": alert.kind,
        "status": alert.status,
        "severity": alert.severity,
        "node": alert.node,
        "incident_id": alert.incident_id,
        "summary": alert.summary,
        "details": alert.details,
        "labels": alert.labels,
        "created_at": _iso(alert.created_at),
        "link": link(alert, base_url),
    }


def build(sink: SinkSettings, alert: Alert, *, base_url: str | None, now: datetime) -> Request:
    """The request that delivers ``alert`` to ``sink``."""
    builders = {
        "webhook": _webhook,
        "slack": _slack,
        "pagerduty": _pagerduty,
        "alertmanager": _alertmanager,
    }
    url, body, content_type = builders[sink.type](sink, alert, base_url, now)
    data = json.dumps(body, separators=(",", ":"), sort_keys=True).encode()
    headers = {"Content-Type": content_type, IDEMPOTENCY_HEADER: alert.key, "User-Agent": "gpuhealth"}
    if sink.type == "webhook" and sink.secret is not None:
        timestamp = int(now.timestamp())
        headers[TIMESTAMP_HEADER] = str(timestamp)
        headers[SIGNATURE_HEADER] = sign(sink.secret.get_secret_value().encode(), timestamp, data)
    return Request(url=url, headers=headers, body=data)


_Built = tuple[str, Any, str]


def _webhook(sink: SinkSettings, alert: Alert, base_url: str | None, _now: datetime) -> _Built:
    document = alert_document(alert, base_url)
    if not sink.cloudevents:
        return sink.url.get_secret_value(), document, "application/json"
    event = {
        "specversion": "1.0",
        "id": alert.key,
        "source": CLOUDEVENTS_SOURCE,
        "type": f"io.gpuhealth.alert.{alert.kind}",
        "subject": alert.node or "fleet",
        "time": _iso(alert.created_at),
        "datacontenttype": "application/json",
        "dataschema": SCHEMA,
        "data": document,
    }
    return sink.url.get_secret_value(), event, "application/cloudevents+json"


def _slack(sink: SinkSettings, alert: Alert, base_url: str | None, _now: datetime) -> _Built:
    icon = ":large_green_circle:" if alert.status == "resolved" else _SLACK_ICON[alert.severity]
    headline = f"{icon} *{alert.kind.replace('_', ' ')}*: {_slack_escape(alert.summary)}"
    facts = [
        f"*Node:* {_slack_escape(alert.node or 'fleet')}",
        f"*Severity:* {alert.severity}",
        f"*Action:* {alert.details.get('action', '-')}",
        f"*Finding:* {_slack_escape(', '.join(alert.details.get('reasons', [])) or '-')}",
    ]
    gpus = alert.details.get("gpus")
    if gpus:
        facts.append(f"*GPU:* {_slack_escape(', '.join(gpus))}")
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": headline}},
        {"type": "section", "fields": [{"type": "mrkdwn", "text": fact} for fact in facts]},
    ]
    target = link(alert, base_url)
    context = f"incident `{alert.incident_id}`" if alert.incident_id else alert.key
    if target:
        context += f" · <{target}|open in gpuhealth>"
    blocks.append(
        {"type": "context", "elements": [{"type": "mrkdwn", "text": _slack_escape(context, links=True)}]}
    )
    text = f"{alert.kind.replace('_', ' ')}: {alert.summary}"
    return sink.url.get_secret_value(), {"text": text, "blocks": blocks}, "application/json"


def _slack_escape(text: str, *, links: bool = False) -> str:
    # Slack reads &, < and > as markup (<!channel> pings everyone); our own link markup is kept.
    if links:
        return text.replace("&", "&amp;")
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _pagerduty(sink: SinkSettings, alert: Alert, base_url: str | None, now: datetime) -> _Built:
    routing_key = sink.routing_key.get_secret_value() if sink.routing_key else ""
    dedup_key = alert.incident_id or alert.group_key
    body: dict[str, Any] = {
        "routing_key": routing_key,
        "event_action": "resolve" if alert.status == "resolved" else "trigger",
        "dedup_key": dedup_key,
    }
    if alert.status != "resolved":
        body["payload"] = {
            "summary": alert.summary[:1024],
            "source": alert.node or "gpuhealth-aggregator",
            "severity": _PAGERDUTY_SEVERITY[alert.severity],
            "timestamp": _iso(alert.created_at),
            "component": "gpu",
            "group": alert.labels.get("topology.kubernetes.io/zone", "fleet"),
            "class": alert.kind,
            "custom_details": alert_document(alert, base_url),
        }
        body["client"] = "gpuhealth"
        target = link(alert, base_url)
        if target:
            body["client_url"] = target
            body["links"] = [{"href": target, "text": "gpuhealth"}]
    return sink.url.get_secret_value(), body, "application/json"


def _alertmanager(sink: SinkSettings, alert: Alert, base_url: str | None, now: datetime) -> _Built:
    # A resolve must carry the same labels as its firing alert, so the name follows the group, not the kind.
    labels = {"alertname": _alertname(alert), "severity": alert.severity, "source": "gpuhealth"}
    if alert.node:
        labels["node"] = alert.node
    if alert.incident_id:
        labels["incident"] = alert.incident_id
    item: dict[str, Any] = {
        "labels": labels,
        "annotations": {"summary": alert.summary, "description": json.dumps(alert.details, sort_keys=True)},
        "startsAt": _iso(alert.created_at),
        "generatorURL": link(alert, base_url) or "",
    }
    if alert.status == "resolved":
        item["endsAt"] = _iso(now)
    url = sink.url.get_secret_value().rstrip("/") + "/api/v2/alerts"
    return url, [item], "application/json"


def _alertname(alert: Alert) -> str:
    if alert.kind.startswith("incident_"):
        return "GPUHealthIncident"
    if alert.kind.startswith("breaker_"):
        return "GPUHealthBreakerTripped"
    return "GPUHealth" + "".join(part.capitalize() for part in alert.kind.split("_"))


def _iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")
