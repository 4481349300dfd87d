"""The fleet page in a real browser (headless Chromium driven by Selenium) against a live aggregator fed by
real agents on fake GPUs in an emulated cluster: the grid shows a faulted node red within seconds, the
incident's timeline grows as the drain proceeds, and an operator's quarantine and release reach the node.

Chromium and its driver come from Debian (`chromium`, `chromium-driver`; .ci/run installs them). Without them
these tests skip with one line saying so, except in CI, where a missing browser fails the run.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from fleet_rig import FleetRig, agent_settings
from live_aggregator import LiveAggregator
from repo_paths import DOCS
from waiting import HANG_GUARD_S, wait_until

from core.clock import ManualClock, RealClock, utc_now
from remediation.kubernetes.central import CentralDrains
from remediation.kubernetes.drain.policy import DrainPolicy
from remediation.kubernetes.requeue.decisions import RequeuePolicy
from remediation.plan.planner import RemediationPolicy
from sim.kube.harness import KubeSim, running_kube_sim
from tests.aggregator.builders import report
from tests.aggregator.identities import Identity

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.chrome.service import Service  # noqa: E402 - after the skip above
from selenium.webdriver.common.by import By  # noqa: E402

TOKEN = "fleet-page-token-0123456789abcdef0123456789"
NODES = ("gpu-node-0", "gpu-node-1", "gpu-node-2", "gpu-node-3")
FAULTED = "gpu-node-2"
SCREENSHOT = DOCS / "images" / "fleet-page.png"
NODE_SCREENSHOT = DOCS / "images" / "node-page.png"
VIEWER = Identity("vera", "viewer")
OPERATOR = Identity("olga", "operator")


def browser_paths() -> tuple[str, str]:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if chromium is None or driver is None:
        if os.environ.get("CI"):
            pytest.fail(
                "chromium and chromedriver are missing: .ci/run installs them (Debian chromium-driver)"
            )
        pytest.skip("no headless browser: apt-get install chromium chromium-driver")
    return chromium, driver


@pytest.fixture
def browser() -> Iterator[object]:
    chromium, driver = browser_paths()
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
    ):
        options.add_argument(flag)
    session = webdriver.Chrome(service=Service(executable_path=driver), options=options)
    session.set_page_load_timeout(HANG_GUARD_S)
    try:
        yield session
    finally:
        session.quit()


DRAIN = DrainPolicy(poll_interval_s=0.05, retry_initial_s=0.05, retry_max_s=0.2)


class Fleet(FleetRig):
    """Four GPU nodes with real agents (drain on) reporting to a live aggregator."""

    def __init__(self, kube: KubeSim, aggregator: LiveAggregator, state_root: Path) -> None:
        super().__init__(
            aggregator,
            state_root,
            settings=lambda node, state_dir: agent_settings(
                node,
                state_dir,
                aggregator,
                policy=RemediationPolicy(drain=True, drain_deadline_s=HANG_GUARD_S),
                drain=DRAIN,
                link={"heartbeat_s": 0.2},
                detector_timeout_s=1.0,
            ),
            connect=lambda _node: {"api_client": kube.api_client()},
        )
        self.start(*NODES)

    def shows(self, node: str, expected: str, browser: object) -> bool:
        """One pass of the node's agent (report delivered), then whether the node's page shows ``expected``."""
        self.tick(node)
        return node_title_state(browser) == expected


@pytest.fixture
def fleet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Fleet]:
    monkeypatch.setenv("GPUHEALTH_AGGREGATOR_TOKEN", TOKEN)
    with running_kube_sim(clock=RealClock(), nodes=len(NODES), bookmark_interval_s=0.2) as kube:
        token_file = tmp_path / "tokens.yaml"
        token_file.write_text(
            yaml.safe_dump({"tokens": [VIEWER.entry(), OPERATOR.entry()]}), encoding="utf-8"
        )
        clock = ManualClock(start=utc_now())
        # The chart's default: the aggregator's remediator drains, the agents order it.
        central = CentralDrains(kube.api_client(), DRAIN, RequeuePolicy(), owns_client=True)
        aggregator = LiveAggregator(
            tmp_path / "aggregator.db",
            clock,
            TOKEN,
            token_file=token_file,
            drain_for=central.drain_for,
            remediator={"poll_s": 0.05},
        ).start()
        built = Fleet(kube, aggregator, tmp_path / "state")
        try:
            yield built
        finally:
            built.close()
            aggregator.stop()
            central.close()


def signed_in(browser: object, url: str, token: str = TOKEN) -> None:
    """Open the page at a one-second poll and sign in with ``token``."""
    browser.get(f"{url}/ui/?interval=1")  # type: ignore[attr-defined]
    field = browser.find_element(By.ID, "token")  # type: ignore[attr-defined]
    field.send_keys(token)
    browser.find_element(By.CSS_SELECTOR, "#login-form button").click()  # type: ignore[attr-defined]


# The page re-renders what changed on every poll, so the tests read it with one script call each (an element
# reference held across a poll may be replaced under it).


def page(browser: object, script: str, *args: object) -> object:
    return browser.execute_script(script, *args)  # type: ignore[attr-defined]


def tile_state(browser: object, node: str) -> object:
    return page(browser, "const t = document.querySelector(`#grid [data-node='${arguments[0]}']`);"
                         " return t ? t.dataset.state : null;", node)  # fmt: skip


def failing_gpus(browser: object, node: str) -> object:
    return page(
        browser, "return document.querySelectorAll(`#grid [data-node='${arguments[0]}'] i.g.f`).length;", node
    )


def timeline_lines(browser: object, node: str) -> list[str]:
    lines = page(browser, "return Array.from(document.querySelectorAll(`#incidents [data-node='${arguments[0]}'] li`))"
                          ".map((li) => li.textContent);", node)  # fmt: skip
    assert isinstance(lines, list)
    return [str(line) for line in lines]


def timeline_kinds(browser: object, node: str) -> list[str]:
    kinds = page(browser, "return Array.from(document.querySelectorAll(`#incidents [data-node='${arguments[0]}'] li`))"
                          ".map((li) => li.dataset.kind);", node)  # fmt: skip
    assert isinstance(kinds, list)
    return [str(kind) for kind in kinds]


def text_of(browser: object, element_id: str) -> str:
    return str(
        page(
            browser,
            "const e = document.getElementById(arguments[0]); return e ? e.textContent : '';",
            element_id,
        )
    )


def node_title_state(browser: object) -> object:
    return page(browser, "return document.getElementById('node-title').dataset.state || null;")


def node_timeline_kinds(browser: object) -> list[str]:
    kinds = page(
        browser,
        "return Array.from(document.querySelectorAll('#node-timeline li')).map((li) => li.dataset.kind);",
    )
    assert isinstance(kinds, list)
    return [str(kind) for kind in kinds]


def node_timeline(browser: object) -> list[str]:
    lines = page(
        browser,
        "return Array.from(document.querySelectorAll('#node-timeline li')).map((li) => li.textContent);",
    )
    assert isinstance(lines, list)
    return [str(line) for line in lines]


def click(browser: object, element_id: str) -> bool:
    return bool(page(browser, "const b = document.getElementById(arguments[0]); if (!b) return false; b.click(); return true;",
                     element_id))  # fmt: skip


@pytest.mark.slow
def test_a_fault_turns_the_node_red_and_its_timeline_grows_as_the_drain_proceeds(
    browser: object, fleet: Fleet
) -> None:
    signed_in(browser, fleet.aggregator.url)
    assert wait_until(lambda: all(tile_state(browser, node) == "healthy" for node in NODES)), (
        "grid never filled"
    )

    fleet.xid(FAULTED)
    fleet.tick(FAULTED)  # the XID's pass: marked, tainted, reported
    assert wait_until(lambda: tile_state(browser, FAULTED) == "unhealthy", timeout=10.0), (
        "not red within seconds"
    )
    assert failing_gpus(browser, FAULTED) == 1, "the faulted GPU is not drawn failing"
    assert wait_until(lambda: len(timeline_kinds(browser, FAULTED)) > 0), "the open incident is not listed"
    first = len(timeline_kinds(browser, FAULTED))

    executor = fleet.agents[FAULTED].parts.executor
    for _ in range(6):  # the permit, the drain on its thread, its outcome: each pass reports what happened
        fleet.tick(FAULTED)
        executor.wait_for_drain(HANG_GUARD_S)
    fleet.tick(FAULTED)
    assert wait_until(lambda: len(timeline_kinds(browser, FAULTED)) > first), "the timeline did not grow"
    lines = timeline_lines(browser, FAULTED)
    assert any("action: drain ok: drain complete" in line for line in lines), "\n".join(lines)
    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    if os.environ.get("GPUHEALTH_SCREENSHOTS"):  # refresh the docs' picture on purpose only
        browser.save_screenshot(str(SCREENSHOT))  # type: ignore[attr-defined]

    # The node's page names the GPU of the open incident, as the grid and the CLI do, and reads in cause order.
    serial = fleet.nvml[FAULTED].gpu(0).serial
    browser.get(f"{fleet.aggregator.url}/ui/?interval=1#/node/{FAULTED}")  # type: ignore[attr-defined]
    assert wait_until(lambda: f"SN {serial}" in text_of(browser, "node-incident")), text_of(
        browser, "node-incident"
    )
    named = text_of(browser, "node-incident")
    assert (
        "GPU 0 NVIDIA H100 80GB HBM3" in named and "00000000:18:00.0" in named and "opened by XID_79" in named
    )
    assert "action reboot" in text_of(browser, "node-title")
    assert page(browser, "return document.querySelector('#node-gpus tr.in-incident td').textContent") == "0"
    kinds = node_timeline_kinds(browser)
    assert kinds.index("findings") < kinds.index("incident_opened") < kinds.index("node_writes"), kinds
    [marked] = [line for line in node_timeline(browser) if "node_writes: marked: " in line]
    assert all(write in marked for write in ("taint", "condition", "label", "event")), marked
    if os.environ.get("GPUHEALTH_SCREENSHOTS"):
        browser.save_screenshot(str(NODE_SCREENSHOT))  # type: ignore[attr-defined]


@pytest.mark.slow
def test_an_operator_quarantines_and_releases_a_node_from_its_page(browser: object, fleet: Fleet) -> None:
    node = "gpu-node-1"
    signed_in(browser, fleet.aggregator.url, OPERATOR.token)
    assert wait_until(lambda: tile_state(browser, node) == "healthy")
    assert wait_until(lambda: text_of(browser, "who") == "olga (operator)"), text_of(browser, "who")
    browser.get(f"{fleet.aggregator.url}/ui/?interval=1#/node/{node}")  # type: ignore[attr-defined]
    page(browser, "window.prompt = () => 'bad fan, checking';")
    assert wait_until(lambda: click(browser, "action-quarantine")), "no quarantine button for an operator"
    assert wait_until(lambda: "quarantine requested" in text_of(browser, "action-result")), text_of(
        browser, "action-result"
    )
    # The agent learns of the request from its next heartbeat's answer and applies it on the pass after.
    assert wait_until(lambda: fleet.shows(node, "quarantined", browser), interval=0.3), text_of(
        browser, "node-title"
    )

    page(browser, "window.prompt = () => 'fan replaced';")
    assert click(browser, "action-release")
    assert wait_until(lambda: "release requested" in text_of(browser, "action-result")), text_of(
        browser, "action-result"
    )
    assert wait_until(lambda: fleet.shows(node, "healthy", browser), interval=0.3), text_of(
        browser, "node-title"
    )


@pytest.mark.slow
def test_a_viewer_sees_the_fleet_but_no_operator_button_and_the_api_refuses_them(
    browser: object, fleet: Fleet
) -> None:
    node = "gpu-node-3"
    signed_in(browser, fleet.aggregator.url, VIEWER.token)
    assert wait_until(lambda: tile_state(browser, node) == "healthy")
    assert wait_until(lambda: text_of(browser, "who") == "vera (viewer)"), text_of(browser, "who")
    browser.get(f"{fleet.aggregator.url}/ui/?interval=1#/node/{node}")  # type: ignore[attr-defined]
    assert wait_until(lambda: "Viewers cannot" in text_of(browser, "node-actions")), text_of(
        browser, "node-actions"
    )
    assert not click(browser, "action-quarantine")
    # Not only hidden: the API refuses the viewer's token whatever the page does.
    status = browser.execute_async_script(  # type: ignore[attr-defined]
        "const done = arguments[arguments.length - 1];"
        "fetch(`/v1/nodes/${arguments[0]}/quarantine`, {method: 'POST', headers: {"
        "'Authorization': `Bearer ${sessionStorage.getItem('gpuhealth-token')}`,"
        "'Content-Type': 'application/json'}, body: JSON.stringify({reason: 'no'})})"
        ".then((answer) => done(answer.status));",
        node,
    )
    assert status == 403


def test_an_unknown_reading_shows_its_age_on_the_node_page(browser: object, fleet: Fleet) -> None:
    """NVML hangs on one node: its page says "unknown for ..." (a stale verdict never reads as fresh)."""
    node = "gpu-node-0"
    signed_in(browser, fleet.aggregator.url)
    assert wait_until(lambda: tile_state(browser, node) == "healthy")
    release = threading.Event()
    fleet.nvml[node].hang = release  # every NVML call blocks, as on a GPU falling off the bus
    try:
        fleet.tick(node)  # the watchdog answers for NVML after detector_timeout_s
        browser.get(f"{fleet.aggregator.url}/ui/?interval=1#/node/{node}")  # type: ignore[attr-defined]
        # The finding's row: where (the node), then its status with its age.
        assert wait_until(lambda: text_of(browser, "node-findings").startswith("nodeunknown for ")), text_of(
            browser, "node-findings"
        )
        assert "NVML_UNAVAILABLE" in text_of(browser, "node-findings")
    finally:
        release.set()


LONG_NAMES = 1000
SUFFIX = ".us-west-2.compute.internal"


@pytest.fixture
def large_fleet(tmp_path: Path) -> Iterator[LiveAggregator]:
    """A thousand nodes with real cloud names (alike but for a few digits) in four pools, one unhealthy."""
    aggregator = LiveAggregator(tmp_path / "aggregator.db", ManualClock(start=utc_now()), TOKEN).start()
    try:
        with httpx.Client(base_url=aggregator.url, headers={"Authorization": f"Bearer {TOKEN}"}) as client:
            for number in range(LONG_NAMES):
                name = f"ip-10-0-{number // 250}-{number % 250}{SUFFIX}"
                body = report(name, 1, "unhealthy" if number == 742 else "healthy", incident=None)
                body["labels"] = {
                    "node.kubernetes.io/instance-type": "p5.48xlarge",
                    "gpuhealth.io/pool": f"pool-{number % 4}",
                }
                body["sent_at"] = utc_now().isoformat()
                assert client.post("/v1/reports", json=body).status_code == 200
        yield aggregator
    finally:
        aggregator.stop()


@pytest.mark.slow
def test_a_thousand_long_names_stay_whole_and_the_grid_is_grouped(
    browser: object, large_fleet: LiveAggregator
) -> None:
    """Each tile shows its name whole (the shared domain said once), no two alike, never cut; the grid is
    grouped so that only the group holding the unhealthy node is open."""
    signed_in(browser, large_fleet.url)
    assert wait_until(
        lambda: page(browser, "return document.querySelectorAll('#grid .node').length") == LONG_NAMES
    )
    shown = page(
        browser,
        "return Array.from(document.querySelectorAll('#grid .node')).map((t) => [t.dataset.node, t.querySelector('.n').textContent]);",
    )
    assert isinstance(shown, list)
    assert all(name == f"{text}{SUFFIX}" for name, text in shown)
    assert len({text for _name, text in shown}) == LONG_NAMES
    assert SUFFIX in text_of(browser, "grid-suffix")
    groups = page(
        browser,
        "return Array.from(document.querySelectorAll('#grid details.group')).map((g) => [g.dataset.group, g.open]);",
    )
    assert isinstance(groups, list) and len(groups) == 4, groups
    assert [label for label, is_open in groups if is_open] == [
        page(
            browser,
            "return document.querySelector(`#grid [data-node='ip-10-0-2-242${arguments[0]}']`).closest('details').dataset.group;",
            SUFFIX,
        )
    ]
    page(browser, "document.querySelectorAll('#grid details.group').forEach((g) => { g.open = true; });")
    cut = page(
        browser,
        "return Array.from(document.querySelectorAll('#grid .node .n')).filter((n) => n.scrollWidth > n.clientWidth + 1).length;",
    )
    assert cut == 0
    assert float(str(page(browser, "return window.gpuhealth.lastRefreshMs") or 0)) < 10_000


# --- behaviour profiles and shadow decisions ---------------------------------------------------------------

WOULD = "would have drained node-a at 12:03:00: XID_79"


@pytest.fixture
def profiled(tmp_path: Path) -> Iterator[LiveAggregator]:
    aggregator = LiveAggregator(tmp_path / "aggregator.db", ManualClock(start=utc_now()), TOKEN).start()
    now = utc_now().isoformat()
    try:
        with httpx.Client(base_url=aggregator.url, headers={"Authorization": f"Bearer {TOKEN}"}) as client:
            shadow = {"at": now, "action": "drain", "result": "shadow", "message": WOULD}
            for name, profile, state in (("node-a", "canary", "unhealthy"), ("node-b", "main", "healthy")):
                body = report(name, 1, state, incident="inc-a" if state == "unhealthy" else None)
                body |= {"labels": {"gpuhealth.io/profile": profile}, "sent_at": now}
                body["actions"] = [shadow] if name == "node-a" else []
                assert client.post("/v1/reports", json=body).status_code == 200
        yield aggregator
    finally:
        aggregator.stop()


def test_the_page_shows_profiles_and_shadow_decisions(browser: object, profiled: LiveAggregator) -> None:
    signed_in(browser, profiled.url)
    assert wait_until(lambda: "profiles: canary 1, main 1" in text_of(browser, "summary"))
    assert wait_until(lambda: WOULD in text_of(browser, "shadow"))
    assert text_of(browser, "shadow-count") == "(1)"
    page(browser, "window.location.hash = '#/node/node-a';")
    assert wait_until(lambda: text_of(browser, "node-title").startswith("node-a (profile canary): "))
