"""The fleet page's fleet view in a real browser: the GPU that stands out from its peers is listed with its
evidence and its node's page shows the peer finding; the reliability view draws its plots in the page."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from live_aggregator import LiveAggregator
from waiting import wait_until

from core.clock import ManualClock, utc_now
from sim.fakes.fleet import LoadedFleet
from tests.aggregator.builders import report
from tests.browser.test_fleet_page import TOKEN, browser, page, signed_in, text_of  # noqa: F401 -- fixture

NODES = 16


@pytest.fixture
def slow_gpu_fleet(tmp_path: Path) -> Iterator[LiveAggregator]:
    """Sixteen nodes under load, one GPU trained down to PCIe Gen3, and one node with a closed incident."""
    aggregator = LiveAggregator(
        tmp_path / "aggregator.db", ManualClock(start=utc_now()), TOKEN, peers={"interval_s": 0.2}
    ).start()
    fleet = LoadedFleet(NODES, seed="page", idle_share=0.0)
    fleet.nvml["gpu-0007"].train_down_link(3, gen=3)
    fleet.step(0)
    try:
        with httpx.Client(base_url=aggregator.url, headers={"Authorization": f"Bearer {TOKEN}"}) as client:
            for name, gpus in fleet.stored():
                body = report(
                    name,
                    1,
                    "unhealthy" if name == "gpu-0003" else "healthy",
                    incident=("gpu-0003-1" if name == "gpu-0003" else None),
                    gpus=len(gpus),
                )
                body["gpus"], body["sent_at"] = gpus, utc_now().isoformat()
                assert client.post("/v1/reports", json=body).status_code == 200
        yield aggregator
    finally:
        fleet.close()
        aggregator.stop()


@pytest.mark.slow
def test_the_slow_gpu_is_listed_and_the_reliability_plots_are_drawn(
    browser: object,  # noqa: F811 -- the fixture imported above
    slow_gpu_fleet: LiveAggregator,
) -> None:
    signed_in(browser, slow_gpu_fleet.url)
    assert wait_until(lambda: "gpu-0007" in text_of(browser, "peers"), message="the slow GPU listed")
    assert "GPU 3 runs at PCIe Gen3 x16 while 127 of 127 peers run Gen5 x16" in text_of(browser, "peers")
    assert page(browser, "return document.querySelectorAll('#peers tr[data-node]').length") == 1
    assert wait_until(lambda: "fleet health" in text_of(browser, "reliability"), message="reliability shown")
    assert page(browser, "return document.querySelectorAll('#reliability svg').length") == 2
    assert page(browser, "return document.querySelectorAll('#reliability svg path').length") == 1
    page(browser, "location.hash = '#/node/gpu-0007';")
    assert wait_until(lambda: "PEER_PCIE_LINK (against its peers)" in text_of(browser, "node-findings"))
