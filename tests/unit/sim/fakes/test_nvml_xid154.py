"""XID 154 on the fake NVML moves the recovery-action field as a driver does, read the same way the XID
check reads a kernel-log line: one reading of the message for both."""

from __future__ import annotations

import pytest

from agent.backends.kernel_log import attach_kernel_xids, parse_kernel_log
from agent.backends.nvml import seam as nvml
from agent.backends.nvml.backend import NvmlBackend
from checks.runner import run_checks
from core.findings import Action
from sim.fakes.nvml import FakeNvml

DRIVER_TEXT = "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)"


@pytest.fixture
def fake() -> FakeNvml:
    library = FakeNvml("h100_sxm", seed=3, node_name="node-a")
    library.nvmlInit()
    return library


def field(library: FakeNvml, gpu: int) -> int:
    handle = library.nvmlDeviceGetHandleByIndex(gpu)
    (value,) = library.nvmlDeviceGetFieldValues(handle, [nvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION])
    assert value.nvmlReturn == nvml.NVML_SUCCESS
    return int(value.value.uiVal)


@pytest.mark.parametrize(
    ("message", "value"),
    [
        (DRIVER_TEXT, 1),
        ("GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)", 2),
        ("GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)", 4),
        ("GPU recovery action changed from 0x0 (None) to 0x7 (System Reboot)", 7),
        ("GPU Reset Required", 1),
        ("Node Reboot Required", 2),
        ("Drain P2P", 3),
    ],
)
def test_xid154_with_a_message_moves_the_recovery_action_field_to_the_state_it_names(
    fake: FakeNvml, message: str, value: int
) -> None:
    assert fake.inject_xid(2, 154, message)
    assert field(fake, 2) == value
    assert field(fake, 0) == 0  # only the GPU that raised it


def test_xid154_without_a_message_leaves_the_field_as_it_was(fake: FakeNvml) -> None:
    fake.set_recovery_action(0, 2)
    assert fake.inject_xid(0, 154)
    assert fake.inject_xid(0, 154, "garbled")
    assert field(fake, 0) == 2


def test_another_xid_with_such_a_message_does_not_touch_the_field(fake: FakeNvml) -> None:
    assert fake.inject_xid(0, 79, DRIVER_TEXT)
    assert field(fake, 0) == 0


def test_an_nvml_reader_and_a_kernel_log_reader_judge_one_xid154_alike(fake: FakeNvml) -> None:
    """NVML's event carries no message, so the agent on NVML judges the field; the kernel-log path judges
    the driver's line. Both say reset_gpu for "GPU Reset Required"."""
    fake.inject_xid(0, 154, DRIVER_TEXT)
    with NvmlBackend(fake, node_name="node-a") as backend:
        snapshot = backend.snapshot()
    from_nvml = run_checks(snapshot)

    with NvmlBackend(FakeNvml("h100_sxm", seed=3, node_name="node-a"), node_name="node-a") as backend:
        clean = backend.snapshot()
    bus_id = clean.gpus[0].pci_bus_id
    assert bus_id is not None
    line = f"NVRM: Xid (PCI:{bus_id[4:-2]}): 154, {DRIVER_TEXT}"
    from_kernel_log = run_checks(attach_kernel_xids(clean, parse_kernel_log(line)))

    assert from_kernel_log.action is Action.RESET_GPU, from_kernel_log.findings
    assert from_nvml.action is Action.RESET_GPU, from_nvml.findings


def test_a_bare_state_name_is_read_as_the_action_it_names_by_the_xid_check_too() -> None:
    """The message reader is shared: a kernel-log or DCGM XID 154 whose message is only the state's name
    ("GPU Reset Required") is judged by that name, as the fake sets its field by it."""
    from checks.config import ChecksConfig
    from checks.xid import recovery_action_from_message

    stated = recovery_action_from_message("GPU Reset Required", ChecksConfig())
    assert stated is not None and stated[0] is Action.RESET_GPU
    assert recovery_action_from_message("changed to something", ChecksConfig()) is None
