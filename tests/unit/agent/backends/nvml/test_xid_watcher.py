"""XidWatcher: NVML XID events to a callback or queue, prompt stop, survives lost GPUs and errors."""

from __future__ import annotations

import io
import json
import queue
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import pytest
import structlog
from structlog.testing import capture_logs
from waiting import HANG_GUARD_S, wait_until

from agent.backends.nvml import seam as nvml
from agent.backends.nvml.backend import NvmlBackend
from agent.backends.nvml.seam import NvmlBackendError, NvmlSettingError, NvmlUnavailableError
from agent.backends.nvml.tool import main
from agent.backends.nvml.xid_watcher import XidBuffer, XidWatcher
from core.snapshot import XidEvent
from sim.fakes.nvml import FakeNvml

pytestmark = pytest.mark.timeout(30)  # hang guard only; each test takes well under a second

EVENT_TIME = datetime(2026, 12, 2, 7, 39, 58, tzinfo=UTC)


def _clock() -> datetime:
    return EVENT_TIME


class _Collector:
    """A callback sink that lets a test wait for the n-th event."""

    def __init__(self) -> None:
        self.events: list[XidEvent] = []
        self._arrived = threading.Condition()

    def __call__(self, event: XidEvent) -> None:
        with self._arrived:
            self.events.append(event)
            self._arrived.notify_all()

    def wait_for(self, count: int) -> list[XidEvent]:
        with self._arrived:
            assert self._arrived.wait_for(lambda: len(self.events) >= count, HANG_GUARD_S), self.events
            return list(self.events)


@pytest.fixture
def fake() -> FakeNvml:
    return FakeNvml("h100_sxm", seed=21, node_name="node-w")


@pytest.fixture
def watch(fake: FakeNvml) -> Iterator[Callable[..., XidWatcher]]:
    """Start watchers on the fake; every one is stopped at the end of the test."""
    started: list[XidWatcher] = []

    def start(sink: object, library: FakeNvml = fake, **kwargs: object) -> XidWatcher:
        watcher = XidWatcher(library, sink=sink, clock=_clock, timeout_ms=20, **kwargs)  # type: ignore[arg-type]
        watcher.start()
        started.append(watcher)
        return watcher

    yield start
    for watcher in started:
        watcher.stop()


def test_injected_xids_reach_a_callback_with_gpu_and_time(
    fake: FakeNvml, watch: Callable[..., XidWatcher]
) -> None:
    """Each XID becomes XidEvent(source=nvml, xid, gpu_uuid, pci_bus_id, at=clock()), in order."""
    collector = _Collector()
    watch(collector)
    fake.inject_xid(2, 48)
    fake.inject_xid(7, 94)
    first, second = collector.wait_for(2)
    assert first == XidEvent(
        xid=48, at=EVENT_TIME, source="nvml", gpu_uuid=fake.gpu_uuids[2], pci_bus_id="00000000:3A:00.0"
    )
    assert (second.xid, second.gpu_uuid) == (94, fake.gpu_uuids[7])


def test_injected_xids_reach_a_queue(fake: FakeNvml, watch: Callable[..., XidWatcher]) -> None:
    """A queue.Queue sink receives the same events."""
    events: queue.Queue[XidEvent] = queue.Queue()
    watch(events)
    fake.inject_xid(0, 79)
    event = events.get(timeout=HANG_GUARD_S)
    assert (event.xid, event.gpu_uuid, event.source) == (79, fake.gpu_uuids[0], "nvml")


def test_stop_returns_within_a_second_and_frees_everything(fake: FakeNvml) -> None:
    """stop(): thread ends well within 1 s, event set freed, NVML init reference given back."""
    watcher = XidWatcher(fake, sink=_Collector(), timeout_ms=200)
    watcher.start()
    assert watcher.running
    assert fake.initialised
    began = time.monotonic()
    assert watcher.stop(timeout=1.0)
    assert time.monotonic() - began < 1.0
    assert not watcher.running
    assert fake.calls["nvmlEventSetFree"] == 1
    assert not fake.initialised


def test_context_manager_starts_and_stops(fake: FakeNvml) -> None:
    """with XidWatcher(...) as w: watching inside, stopped and freed after."""
    collector = _Collector()
    with XidWatcher(fake, sink=collector, timeout_ms=20) as watcher:
        assert len(watcher.watched_uuids) == 8
        fake.inject_xid(1, 13)
        collector.wait_for(1)
    assert not watcher.running
    assert fake.calls["nvmlEventSetFree"] == 1


def test_watch_survives_a_gpu_lost_mid_watch(fake: FakeNvml, watch: Callable[..., XidWatcher]) -> None:
    """GPU 5 falls off the bus: its XID 79 arrives, the GPU_IS_LOST is logged, other GPUs still watched."""
    collector = _Collector()
    with capture_logs() as logs:
        watcher = watch(collector)
        fake.lose_gpu(5)
        fake.inject_xid(1, 31)
        events = collector.wait_for(2)
    assert [(event.xid, event.gpu_uuid) for event in events] == [
        (79, fake.gpu_uuids[5]),
        (31, fake.gpu_uuids[1]),
    ]
    assert watcher.running
    assert any(entry["event"] == "xid_watch_gpu_lost" for entry in logs)
    fake.inject_xid(6, 13)
    assert collector.wait_for(3)[2].xid == 13


def test_gpu_refusing_registration_is_skipped_and_logged(
    fake: FakeNvml, watch: Callable[..., XidWatcher]
) -> None:
    """A GPU that answers NOT_SUPPORTED to registration is skipped; the other seven are watched."""
    fake.fail_call(3, "nvmlDeviceRegisterEvents", nvml.NVML_ERROR_NOT_SUPPORTED)
    collector = _Collector()
    with capture_logs() as logs:
        watcher = watch(collector)
    assert fake.gpu_uuids[3] not in watcher.watched_uuids
    assert len(watcher.watched_uuids) == 7
    assert {"event": "xid_watch_skipped", "gpu": 3, "code": "NOT_SUPPORTED", "log_level": "warning"} in logs
    fake.inject_xid(3, 48)
    fake.inject_xid(4, 48)
    assert [event.gpu_uuid for event in collector.wait_for(1)] == [fake.gpu_uuids[4]]


def test_gpu_already_lost_at_start_is_skipped(fake: FakeNvml, watch: Callable[..., XidWatcher]) -> None:
    """A GPU whose handle answers GPU_IS_LOST cannot be registered; the watcher starts with the rest."""
    fake.lose_gpu(0, emit_xid=False)
    assert len(watch(_Collector()).watched_uuids) == 7


def test_many_watchers_in_one_process_each_see_their_own_node() -> None:
    """Three fake nodes, three watchers: no shared state, each gets only its node's XIDs."""
    nodes = [FakeNvml(seed=1, node_name=f"node-{n}") for n in range(3)]
    collectors = [_Collector() for _ in nodes]
    watchers = [
        XidWatcher(node, sink=collector, timeout_ms=20)
        for node, collector in zip(nodes, collectors, strict=True)
    ]
    for watcher in watchers:
        watcher.start()
    try:
        for number, node in enumerate(nodes):
            node.inject_xid(number, 100 + number)
        for number, (node, collector) in enumerate(zip(nodes, collectors, strict=True)):
            (event,) = collector.wait_for(1)
            assert (event.xid, event.gpu_uuid) == (100 + number, node.gpu_uuids[number])
    finally:
        assert all(watcher.stop() for watcher in watchers)
    assert [len(collector.events) for collector in collectors] == [1, 1, 1]


def test_two_watchers_on_one_node_both_receive(fake: FakeNvml, watch: Callable[..., XidWatcher]) -> None:
    """Each watcher owns its event set; NVML delivers an XID to every set the GPU is registered with."""
    first, second = _Collector(), _Collector()
    watch(first)
    watch(second)
    fake.inject_xid(6, 62)
    assert first.wait_for(1)[0].xid == second.wait_for(1)[0].xid == 62


def test_a_failing_callback_does_not_end_the_watch(fake: FakeNvml, watch: Callable[..., XidWatcher]) -> None:
    """The consumer raising is logged; later XIDs are still delivered."""
    collector = _Collector()

    def flaky(event: XidEvent) -> None:
        if event.xid == 13:
            raise RuntimeError("consumer broke")
        collector(event)

    with capture_logs() as logs:
        watcher = watch(flaky)
        fake.inject_xid(0, 13)
        fake.inject_xid(0, 31)
        assert collector.wait_for(1)[0].xid == 31
    assert watcher.running
    assert watcher.delivered == 1
    assert any(entry["event"] == "xid_sink_failed" for entry in logs)


def test_other_nvml_errors_are_logged_and_the_thread_keeps_going(
    fake: FakeNvml, watch: Callable[..., XidWatcher]
) -> None:
    """Driver reloaded under the watcher: waits fail with UNINITIALIZED, logged with backoff, still stoppable."""
    with capture_logs() as logs:
        watcher = watch(_Collector(), error_backoff_s=(0.01, 0.02))
        fake.reload_driver()
        wait_until(
            lambda: sum(entry["event"] == "xid_watch_wait_failed" for entry in logs) >= 3,
            message="the watcher to retry",
        )
    assert watcher.running
    assert {"UNINITIALIZED"} == {entry["code"] for entry in logs if entry["event"] == "xid_watch_wait_failed"}
    assert watcher.stop()


def test_start_without_driver_raises_nvml_unavailable() -> None:
    """No driver: start() raises NvmlUnavailableError with the reason; nothing is left running."""
    watcher = XidWatcher(FakeNvml(seed=0, driver_missing=True), sink=_Collector())
    with pytest.raises(NvmlUnavailableError, match=r"libnvidia-ml\.so\.1 not found"):
        watcher.start()
    assert not watcher.running


def test_stop_of_a_watcher_never_started_leaves_nvml_alone(fake: FakeNvml) -> None:
    """stop() without start() must not give back someone else's NVML init reference."""
    fake.nvmlInit()
    assert XidWatcher(fake, sink=_Collector()).stop()
    assert fake.initialised
    assert fake.calls["nvmlShutdown"] == 0


def test_watcher_cannot_be_started_twice(fake: FakeNvml, watch: Callable[..., XidWatcher]) -> None:
    """A second start() is a clear error, not a second thread."""
    watcher = watch(_Collector())
    with pytest.raises(NvmlBackendError, match="already started"):
        watcher.start()


@pytest.mark.parametrize(
    "settings", [{"timeout_ms": 0}, {"timeout_ms": 500}, {"error_backoff_s": (0.0, 1.0)}]
)
def test_bad_settings_are_rejected(settings: dict[str, object]) -> None:
    """timeout_ms must be 1..200 (so stop() is prompt); the backoff must be positive and ordered."""
    with pytest.raises(NvmlSettingError):
        XidWatcher(FakeNvml(seed=0), sink=_Collector(), **settings)  # type: ignore[arg-type]


def test_watcher_into_buffer_into_snapshot(fake: FakeNvml, watch: Callable[..., XidWatcher]) -> None:
    """End to end: watcher -> XidBuffer -> next snapshot's xid_events of that GPU, then drained."""
    buffer = XidBuffer()
    watch(buffer)
    fake.inject_xid(4, 119)
    assert wait_until(lambda: len(buffer) >= 1, interval=0.005)
    with NvmlBackend(fake, node_name="node-w", xid_buffer=buffer) as backend:
        snapshot = backend.snapshot()
        later = backend.snapshot()
    assert [event.xid for event in snapshot.gpus[4].xid_events] == [119]
    assert later.gpus[4].xid_events == []


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """main() configures structlog for the process, as an entry point should; undo it after the test."""
    saved = structlog.get_config()
    yield
    structlog.configure(**saved)


@pytest.mark.usefixtures("restore_logging")
def test_main_watch_runs_for_the_given_time_and_reports(fake: FakeNvml) -> None:
    """--watch SECONDS prints each XID as a JSON line and a summary; it stops cleanly."""
    timer = threading.Timer(0.05, fake.inject_xid, args=(2, 45))
    timer.start()
    out = io.StringIO()
    try:
        assert main(["--watch", "0.4"], library=fake, out=out) == 0
    finally:
        timer.join()
    *event_lines, summary_line = out.getvalue().splitlines()
    assert [json.loads(line)["xid"] for line in event_lines] == [45]
    summary = json.loads(summary_line)
    assert summary["registered_gpus"] == 8
    assert summary["events"] == 1
    assert summary["stopped_cleanly"] is True
    assert summary["stop_s"] < 1.0


@pytest.mark.usefixtures("restore_logging")
def test_main_watch_without_driver_exits_3(capsys: pytest.CaptureFixture[str]) -> None:
    """--watch with no driver: one line on stderr, exit 3."""
    assert main(["--watch", "0.1"], library=FakeNvml(seed=0, driver_missing=True), out=io.StringIO()) == 3
    assert "libnvidia-ml.so.1 not found" in capsys.readouterr().err
