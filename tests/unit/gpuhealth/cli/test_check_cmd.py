"""gpuhealth check on a live node whose NVML hangs: the verdict is unknown, with its age, within the deadline."""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import agent.backends.nvml.backend as nvml_backend
from checks.runner import run_checks
from core.findings import Status
from gpuhealth.cli import check_cmd
from sim.fakes.nvml import FakeNvml


@pytest.fixture
def hung_nvml(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """The command's NVML backend on a fake NVML whose every call blocks until released."""
    release = threading.Event()
    fake = FakeNvml("h100_sxm", 8, seed=1)
    fake.hang = release
    real = nvml_backend.NvmlBackend

    def backend(**kwargs: Any) -> nvml_backend.NvmlBackend:
        return real(fake, **kwargs)

    monkeypatch.setattr(nvml_backend, "NvmlBackend", backend)
    monkeypatch.setattr(check_cmd, "LIVE_READ_TIMEOUT_S", 0.3)
    yield release
    release.set()


def test_a_hung_nvml_gives_an_unknown_verdict_on_time(hung_nvml: threading.Event) -> None:
    args = argparse.Namespace(snapshot=None, node="gpu-node-07", expected_gpus=None)
    started = time.monotonic()
    snapshot = check_cmd._read_snapshot(args)
    assert time.monotonic() - started < 2.0
    assert snapshot.nvml_error is not None and "watchdog" in snapshot.nvml_error
    [finding] = run_checks(snapshot).findings
    assert finding.status is Status.UNKNOWN
