"""The fleet page at fleet scale, in a real browser: ``python -m bench.fleet_page [--nodes N] [--json]``.

An aggregator (SQLite) holds N nodes x 8 GPUs (10,000 by default, a few of them unhealthy), stored through
the same ingest path as agents' reports; headless Chromium (Debian's chromium and chromium-driver, through
Selenium) opens ``/ui/`` signed in, and the page's own timer (``window.gpuhealth``) gives:

- load: from navigation until the first full render of the grid, incidents and alerts;
- refresh: one poll (fleet summary, grid, incidents, alerts fetched and re-rendered), median and max;
- change: a node turns unhealthy in the store -> its tile is red on the page (includes up to one poll).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import structlog

from aggregator.ingest import ingest_report
from aggregator.settings import AggregatorSettings
from aggregator.store.engine import open_database
from core.aggregator_api import Report
from core.clock import ManualClock, utc_now
from sim.aggregator_process import AggregatorServer

GPUS = 8
TOKEN = "bench-fleet-page-token-0123456789abcdef0123"  # noqa: S105 - a throw-away token of a local run
POLL_S = 2
log = structlog.get_logger(__name__)


def _report(node: int, seq: int, state: str = "healthy") -> Report:
    name = f"gpu-node-{node:05d}"
    bad = state != "healthy"
    return Report.model_validate(
        {
            "schema": "gpuhealth.report/v1",
            "node": name,
            "seq": seq,
            "sent_at": utc_now().isoformat(),
            "interval_s": 30,
            "orchestrator": "kubernetes",
            "state": state,
            "verdict": {
                "node": name,
                "status": "fail" if bad else "ok",
                "action": "reboot" if bad else "none",
                "findings": [],
            },
            "gpus": [
                {
                    "uuid": f"GPU-{name}-{i}",
                    "index": i,
                    "name": "NVIDIA H200",
                    "status": "fail" if bad and i == 0 else "ok",
                }
                for i in range(GPUS)
            ],
            "labels": {
                "topology.kubernetes.io/zone": f"zone-{node % 3}",
                "gpuhealth.io/pool": f"pool-{node % 4}",
            },
        }
    )


def _seed(settings: AggregatorSettings, nodes: int) -> None:
    database = open_database(settings)
    try:
        for node in range(nodes):
            state = "unhealthy" if node % 997 == 0 else "healthy"
            with database.write() as conn:
                ingest_report(conn, _report(node, 1, state), settings, utc_now())
            if node and node % 2000 == 0:
                log.info("seeded", nodes=node)
    finally:
        database.dispose()


def _browser() -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver is None:
        raise SystemExit("bench.fleet_page: needs Debian's chromium and chromium-driver")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1600,1200",
    ):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(executable_path=driver), options=options)


def _wait(browser: Any, script: str, timeout_s: float = 120.0) -> float:
    started = time.perf_counter()
    while time.perf_counter() - started < timeout_s:
        if browser.execute_script(script):
            return time.perf_counter() - started
        time.sleep(0.02)
    raise TimeoutError(script)


def run(nodes: int, refreshes: int) -> dict[str, Any]:
    """Seed, serve, open the page, measure; every figure in milliseconds."""
    with tempfile.TemporaryDirectory(prefix="bench-fleet-page-") as workdir:
        database = Path(workdir) / "aggregator.db"
        settings = AggregatorSettings(token=TOKEN, database_url=f"sqlite:///{database}")
        log.info("seeding", nodes=nodes)
        _seed(settings, nodes)
        server = AggregatorServer(database, TOKEN, now=ManualClock(start=utc_now()).now).start()
        browser = _browser()
        try:
            started = time.perf_counter()
            browser.get(f"{server.url}/ui/?interval={POLL_S}#token={TOKEN}")
            _wait(browser, "return window.gpuhealth.refreshes >= 1")
            load_ms = (time.perf_counter() - started) * 1000
            tiles = browser.execute_script("return document.querySelectorAll('#grid [data-node]').length")
            log.info("loaded", tiles=tiles, load_ms=round(load_ms))
            samples = []
            for _ in range(refreshes):
                seen = browser.execute_script("return window.gpuhealth.refreshes")
                _wait(browser, f"return window.gpuhealth.refreshes > {seen}")
                samples.append(browser.execute_script("return window.gpuhealth.lastRefreshMs"))
            target = 1234
            with open_database(settings).write() as conn:
                ingest_report(conn, _report(target, 2, "unhealthy"), settings, utc_now())
            change_s = _wait(
                browser,
                f"const t = document.querySelector(`#grid [data-node='gpu-node-{target:05d}']`);"
                " return t && t.dataset.state === 'unhealthy';",
            )
        finally:
            browser.quit()
            server.stop()
    return {
        "nodes": nodes,
        "gpus": nodes * GPUS,
        "tiles": tiles,
        "load_ms": round(load_ms),
        "refresh_ms_median": round(statistics.median(samples)),
        "refresh_ms_max": round(max(samples)),
        "change_visible_ms": round(change_s * 1000),
        "poll_s": POLL_S,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fleet_page", description=__doc__)
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--refreshes", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="1,000 nodes")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = run(1000 if args.quick else args.nodes, args.refreshes)
    print(json.dumps(result) if args.json else json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
