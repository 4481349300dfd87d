"""Which files are kernel logs at all: every saved kernel log the project holds has recognised lines; an
empty file, a README, a YAML file and random bytes have none."""

from __future__ import annotations

import gzip
import random
from pathlib import Path

import pytest
from repo_paths import FIXTURES, REPO_ROOT

from gpuhealth.cli.log_lines import is_kernel_log_line, recognised_lines

KERNEL_LOGS = sorted(
    [
        *(FIXTURES / "kernel_logs").glob("*.txt"),
        *(FIXTURES / "kernel_logs").glob("*.jsonl"),
        *(FIXTURES / "real").glob("kernel-*"),
        FIXTURES / "fabric" / "dmesg-mlx5-flap-sxid.txt",
    ]
)


@pytest.mark.parametrize("path", KERNEL_LOGS, ids=lambda path: path.name)
def test_every_saved_kernel_log_has_recognised_lines(path: Path) -> None:
    lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    assert recognised_lines(path) > 0
    assert recognised_lines(path) >= len(lines) / 2


def test_files_that_are_no_kernel_log_have_none(tmp_path: Path) -> None:
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    noise = tmp_path / "noise.bin"
    noise.write_bytes(random.Random(7).randbytes(64 * 1024))
    packed = tmp_path / "readme.gz"
    packed.write_bytes(gzip.compress((REPO_ROOT / "README.md").read_bytes()))
    for path in (empty, noise, REPO_ROOT / "README.md", REPO_ROOT / "pyproject.toml", packed):
        assert recognised_lines(path) == 0, path


@pytest.mark.parametrize(
    "line",
    [
        "[ 5120.112233] NVRM: Xid (PCI:0000:3b:00): 79, pid=2931, name=python3, GPU has fallen off the bus.",
        "Aug 10 15:35:58 gpu-node-a kernel: mlx5_core 0000:ab:00.0 mlx5_5: Port: 1 Link ACTIVE",
        "6,2031,5402113,-;NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.90.07",
        '  "MESSAGE" : "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.",',
        "1723210300.004400 gpu-07 kernel: nvidia 0000:01:00.0: enabling device",
    ],
)
def test_each_tools_form_is_a_kernel_log_line(line: str) -> None:
    assert is_kernel_log_line(line)


@pytest.mark.parametrize("line", ["", "# gpuhealth", "key: value", "Run `gpuhealth check` on the node."])
def test_prose_and_configuration_are_not(line: str) -> None:
    assert not is_kernel_log_line(line)
