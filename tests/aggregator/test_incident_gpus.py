"""Which GPU: an incident names the GPUs its failing findings were about (index, UUID, PCI address, serial,
model) and the findings that opened it, for as long as it is open and after; the node, the incident list
and the grid name the same GPUs, on both databases."""

from __future__ import annotations

from typing import Any

from aggregator.ingest import ingest_report
from aggregator.queries import fleet_grid, incident_list, node_detail
from aggregator.settings import load_settings
from aggregator.store.engine import Database, open_database
from core.aggregator_api import Report
from core.clock import ManualClock
from tests.aggregator.builders import TOKEN, report

NODE = "gpu-node-1"
SETTINGS = load_settings(environ={}, database_url="sqlite://", token=TOKEN)  # the rules only: its defaults


def _identified(body: dict[str, Any]) -> dict[str, Any]:
    """The GPUs as an agent reads them from NVML: PCI address and board serial besides the UUID."""
    for gpu in body["gpus"]:
        gpu["pci_bus_id"] = f"00000000:{0x18 + gpu['index']:02X}:00.0"
        gpu["serial"] = f"165012401424{gpu['index']}"
    return body


def _xid79_on_gpu(body: dict[str, Any], index: int) -> dict[str, Any]:
    body["gpus"][index]["status"] = "fail"
    finding = body["verdict"]["findings"][0]
    finding["gpu"] = body["gpus"][index]["uuid"]
    finding["message"] = "GPU has fallen off the bus"
    return body


def _ingest(database: Database, body: dict[str, Any], clock: ManualClock) -> None:
    with database.write() as conn:
        assert ingest_report(conn, Report.model_validate(body), SETTINGS, clock.now()).accepted


def test_every_view_names_the_incidents_gpu_while_open_and_after(
    database_url: str, clock: ManualClock
) -> None:
    settings = load_settings(environ={}, database_url=database_url, token=TOKEN)
    database = open_database(settings)
    try:
        _ingest(database, _identified(report(NODE, 1, gpus=4)), clock)
        _ingest(
            database,
            _xid79_on_gpu(_identified(report(NODE, 2, "unhealthy", gpus=4, incident="inc-1")), 2),
            clock,
        )
        clock.advance(30)
        # The XID left its window: the findings are clear, the incident and its taint stay.
        cleared = _identified(report(NODE, 3, "quarantined", gpus=4, incident="inc-1"))
        cleared["verdict"]["findings"] = []
        cleared["verdict"]["status"] = "ok"
        cleared["verdict"]["action"] = "none"
        _ingest(database, cleared, clock)

        with database.read() as conn:
            detail = node_detail(conn, NODE, clock.now())
            [listed] = incident_list(conn, open_only=True)
            [tile] = fleet_grid(conn, clock.now())
        assert detail is not None and detail.incident is not None
        expected = [
            {
                "uuid": f"GPU-{NODE}-2",
                "index": 2,
                "pci_bus_id": "00000000:1A:00.0",
                "serial": "1650124014242",
                "name": "NVIDIA H200",
            }
        ]
        assert [gpu.model_dump() for gpu in detail.incident.gpus] == expected
        assert [gpu.model_dump() for gpu in listed.gpus] == expected
        assert tile.gpus == "oofo"  # the grid draws the same GPU
        [opening] = detail.incident.opened_by
        assert (opening.code, opening.gpu, opening.message) == (
            "XID_79",
            f"GPU-{NODE}-2",
            "GPU has fallen off the bus",
        )
        opened = next(event for event in detail.timeline if event.kind == "incident_opened")
        assert "on GPU 2 (SN 1650124014242)" in opened.message

        _ingest(database, _identified(report(NODE, 4, gpus=4)), clock)  # released: closed
        with database.read() as conn:
            [closed] = incident_list(conn)
        assert not closed.open
        assert [gpu.serial for gpu in closed.gpus] == ["1650124014242"]  # as recorded at its opening
    finally:
        database.dispose()


def test_an_incident_about_the_node_names_no_gpu(database_url: str, clock: ManualClock) -> None:
    settings = load_settings(environ={}, database_url=database_url, token=TOKEN)
    database = open_database(settings)
    try:
        body = report(NODE, 1, "unhealthy", gpus=2, incident="inc-n")
        body["verdict"]["findings"][0]["gpu"] = None
        _ingest(database, body, clock)
        with database.read() as conn:
            [listed] = incident_list(conn)
        assert listed.gpus == [] and [f.code for f in listed.opened_by] == ["XID_79"]
    finally:
        database.dispose()
