"""An alert receiver on 127.0.0.1: the aggregator's generic webhook sink posts here during a scenario."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any

from agent.telemetry.http import BoundedHttpServer

MAX_BODY = 1_048_576


@dataclass(frozen=True)
class ReceivedAlert:
    """The fields of one ``gpuhealth.alert/v1`` document a scenario looks at."""

    kind: str
    status: str
    node: str | None
    summary: str


class AlertReceiver:
    """Records every alert POSTed to it; ``url`` is what the webhook sink is configured with."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._alerts: list[ReceivedAlert] = []
        # The agent's bounded server: a webhook client that gives up mid-answer is a log line, not a
        # traceback across the demo's live view.
        self._server = BoundedHttpServer(("127.0.0.1", 0), self._handler(), max_connections=64)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/alerts"
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="gpuhealth-alert-receiver", daemon=True
        )

    def start(self) -> AlertReceiver:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    @property
    def alerts(self) -> list[ReceivedAlert]:
        with self._lock:
            return list(self._alerts)

    def count(self, kind: str, nodes: set[str] | None = None) -> int:
        """Firing alerts of ``kind`` received (for any of ``nodes`` when given)."""
        return sum(
            1 for alert in self.alerts if alert.kind == kind and (nodes is None or alert.node in nodes)
        )

    def _record(self, body: bytes) -> bool:
        try:
            document = json.loads(body)
        except ValueError:
            return False
        if not isinstance(document, dict) or not isinstance(document.get("kind"), str):
            return False
        alert = ReceivedAlert(
            kind=document["kind"],
            status=str(document.get("status") or ""),
            node=document.get("node") if isinstance(document.get("node"), str) else None,
            summary=str(document.get("summary") or ""),
        )
        with self._lock:
            self._alerts.append(alert)
        return True

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            timeout = 10.0  # a sender that stops mid-request does not hold its thread

            def do_POST(self) -> None:
                length = min(int(self.headers.get("Content-Length") or 0), MAX_BODY)
                accepted = receiver._record(self.rfile.read(length))
                self.send_response(200 if accepted else 400)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_args: Any) -> None:
                return  # the demo's view shows alerts; no access log on the terminal

        return Handler
