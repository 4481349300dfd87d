"""A real HTTP exporter on 127.0.0.1 serving a recorded page; down or erroring -> one unknown finding (once judged)."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

import pytest
from dcgm_judge import judge
from repo_paths import FIXTURES

from agent.backends.dcgm.exporter import ExporterSource
from checks.dcgm_exporter import UNAVAILABLE_CODE
from core.findings import Status
from core.snapshot import NodeSnapshot

PAGE = (FIXTURES / "dcgm" / "exporter-3.3.5-3.4.1-faults-pods.prom").read_bytes()


class _Exporter(http.server.BaseHTTPRequestHandler):
    hits = 0
    status = 200

    def do_GET(self) -> None:
        type(self).hits += 1
        body = PAGE if self.path == "/metrics" else b"not found"
        self.send_response(type(self).status if self.path == "/metrics" else 404)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:  # keep test output quiet
        return


@pytest.fixture
def exporter() -> Iterator[str]:
    _Exporter.hits, _Exporter.status = 0, 200
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Exporter)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    server.shutdown()
    server.server_close()


EMPTY = NodeSnapshot(node="gpu-node-03", gpus=[])


def test_live_exporter_is_scraped_and_judged(exporter: str) -> None:
    source = ExporterSource(exporter, timeout_s=5.0, every_s=30.0)
    try:
        found = judge(source.read(EMPTY))
    finally:
        source.close()
    assert {f.code for f in found} >= {"XID_79", "ECC_DBE_VOLATILE"}


def test_scrapes_are_cached_for_every_s(exporter: str) -> None:
    """A loop faster than the exporter reuses the last page: one scrape per every_s."""
    now = [100.0]
    source = ExporterSource(exporter, every_s=30.0, monotonic=lambda: now[0])
    try:
        source.read(EMPTY)
        now[0] += 10.0
        source.read(EMPTY)
        assert _Exporter.hits == 1
        now[0] += 25.0
        source.read(EMPTY)
        assert _Exporter.hits == 2
    finally:
        source.close()


def test_exporter_answering_an_error_is_one_unknown(exporter: str) -> None:
    _Exporter.status = 503
    source = ExporterSource(exporter)
    try:
        found = judge(source.read(EMPTY))
    finally:
        source.close()
    assert [(f.code, f.status) for f in found] == [(UNAVAILABLE_CODE, Status.UNKNOWN)]
    assert "HTTP 503" in found[0].message


def test_exporter_down_is_one_unknown_never_a_fault() -> None:
    source = ExporterSource("http://user:secret@127.0.0.1:9/metrics", timeout_s=2.0)
    try:
        found = judge(source.read(EMPTY))
    finally:
        source.close()
    assert [(f.code, f.status) for f in found] == [(UNAVAILABLE_CODE, Status.UNKNOWN)]
    assert "secret" not in found[0].message
