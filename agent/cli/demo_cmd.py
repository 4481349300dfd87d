"""``gpuhealth demo``: simulated GPU nodes with injected faults, judged as real hardware would be.

Runs on this machine with no GPU and no cluster: fake NVML nodes (H100 SXM with NVLink, A100 PCIe without),
the real NVML backend, XID event watcher and checks. Each scene injects a fault, takes a snapshot, and
compares the verdict with what NVIDIA's XID catalogue and NVML semantics call for. Exits 0 only if every
expectation held.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass

from rich.console import Console

from checks.findings import Action, Status, Verdict

XID_DELIVERY_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Scene:
    """One step of the demo: what to do to the fake node, and what the verdict must then be."""

    name: str
    inject: Callable[[FakeNode], None]
    status: Status
    action: Action
    codes: frozenset[str] = frozenset()
    absent_codes: frozenset[str] = frozenset()
    xids_to_wait_for: int = 0


@dataclass(frozen=True)
class SceneResult:
    name: str
    expected: str
    observed: str
    passed: bool
    seconds: float


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="simulated GPU nodes with injected faults, judged end to end",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    # The demo provokes lost GPUs and a missing driver on purpose; their warnings would drown the story.
    parser.set_defaults(handler=run_demo, default_log_level="error")


class FakeNode:
    """A fake NVML node with the real backend and XID watcher attached to it."""

    def __init__(self, name: str, profile: str, gpu_count: int | None = None) -> None:
        from agent.backends.fake_nvml import FakeNvml
        from agent.backends.nvml_backend import NvmlBackend
        from agent.backends.xid_watcher import XidBuffer, XidWatcher

        self.name = name
        self.nvml = FakeNvml(profile, gpu_count, seed=name, node_name=name)
        self.buffer = XidBuffer()
        self.backend = NvmlBackend(
            self.nvml, node_name=name, expected_gpu_count=gpu_count, xid_buffer=self.buffer
        )
        self.watcher = XidWatcher(self.nvml, sink=self.buffer)

    @contextmanager
    def running(self) -> Iterator[FakeNode]:
        with self.backend, self.watcher:
            yield self

    def wait_for_xids(self, count: int) -> None:
        """XIDs travel through the watcher thread; wait until they reached the buffer."""
        deadline = time.monotonic() + XID_DELIVERY_TIMEOUT_S
        while len(self.buffer) < count and time.monotonic() < deadline:
            time.sleep(0.01)


def h100_scenes() -> list[Scene]:
    return [
        Scene("healthy 8 x H100 SXM node", lambda node: None, Status.OK, Action.NONE),
        Scene(
            "XID 13 on GPU 2: an application fault, the node stays in service",
            lambda node: _inject_xid(node, 2, 13),
            Status.WARN,
            Action.RESTART_APP,
            codes=frozenset({"XID_13"}),
            xids_to_wait_for=1,
        ),
        Scene(
            "pending row remap on GPU 5: the GPU needs a reset",
            lambda node: node.nvml.set_row_remap(5, pending=True, uncorrectable=1),
            Status.FAIL,
            Action.RESET_GPU,
            codes=frozenset({"ROW_REMAP_PENDING"}),
        ),
        Scene(
            "GPU 5 reset: the remap is applied, the node is healthy again",
            lambda node: node.nvml.reset_gpu(5),
            Status.OK,
            Action.NONE,
            absent_codes=frozenset({"ROW_REMAP_PENDING"}),
        ),
        Scene(
            "XID 79 on GPU 3: fallen off the bus, the node needs a reboot",
            lambda node: node.nvml.lose_gpu(3),
            Status.FAIL,
            Action.REBOOT,
            codes=frozenset({"XID_79", "GPU_LOST"}),
            xids_to_wait_for=1,
        ),
    ]


def a100_scenes() -> list[Scene]:
    return [
        Scene(
            "healthy 4 x A100 PCIe node: no NVLink is not 'NVLink down'",
            lambda node: None,
            Status.OK,
            Action.NONE,
            absent_codes=frozenset({"NVLINK_DOWN"}),
        ),
        Scene(
            "PCIe link of GPU 1 trained at x8 instead of x16",
            lambda node: node.nvml.degrade_pcie(1, width=8),
            Status.WARN,
            Action.NONE,
            codes=frozenset({"PCIE_LINK_DEGRADED"}),
        ),
    ]


def _inject_xid(node: FakeNode, gpu: int, xid: int) -> None:
    node.nvml.inject_xid(gpu, xid)


def run_demo(args: argparse.Namespace) -> int:
    console = Console(stderr=args.json, highlight=False, soft_wrap=True)
    results: list[SceneResult] = []
    for node_name, profile, gpus, scenes in (
        ("demo-h100-01", "h100_sxm", 8, h100_scenes()),
        ("demo-a100-01", "a100_pcie", 4, a100_scenes()),
    ):
        console.print(f"[bold]node {node_name}[/bold] ({profile}, {gpus} GPUs on fake NVML)")
        with FakeNode(node_name, profile, gpus).running() as node:
            results.extend(_play(node, scene, console) for scene in scenes)
    results.append(_play_no_driver(console))
    passed = sum(result.passed for result in results)
    console.print(f"\n[bold]{passed}/{len(results)} expectations held[/bold]")
    if args.json:
        summary = {"passed": passed == len(results), "expectations": [asdict(result) for result in results]}
        sys.stdout.write(json.dumps(summary, indent=2) + "\n")
    return 0 if passed == len(results) else 1


def _play(node: FakeNode, scene: Scene, console: Console) -> SceneResult:
    from checks.runner import run_checks

    started = time.perf_counter()
    scene.inject(node)
    node.wait_for_xids(scene.xids_to_wait_for)
    verdict = run_checks(node.backend.snapshot())
    return _judge(scene, verdict, time.perf_counter() - started, console)


def _play_no_driver(console: Console) -> SceneResult:
    from agent.backends.fake_nvml import FakeNvml
    from agent.backends.nvml_backend import NvmlBackend
    from checks.runner import run_checks

    console.print("[bold]node demo-nodriver-01[/bold] (NVIDIA driver not installed)")
    scene = Scene(
        "no NVIDIA driver: unknown, never a fault",
        lambda node: None,
        Status.UNKNOWN,
        Action.NONE,
        codes=frozenset({"NVML_UNAVAILABLE"}),
    )
    started = time.perf_counter()
    with NvmlBackend(FakeNvml(driver_missing=True), node_name="demo-nodriver-01") as backend:
        verdict = run_checks(backend.snapshot())
    return _judge(scene, verdict, time.perf_counter() - started, console)


def _judge(scene: Scene, verdict: Verdict, seconds: float, console: Console) -> SceneResult:
    codes = {finding.code for finding in verdict.findings}
    passed = (
        verdict.status == scene.status
        and verdict.action == scene.action
        and scene.codes <= codes
        and not (scene.absent_codes & codes)
    )
    expected = f"{scene.status.value}/{scene.action.value}" + (
        f" with {', '.join(sorted(scene.codes))}" if scene.codes else ""
    )
    observed = f"{verdict.status.value}/{verdict.action.value}" + (
        f" with {', '.join(sorted(codes))}" if codes else ""
    )
    mark = "[green]✔[/green]" if passed else "[red]✘[/red]"
    console.print(f"  {mark} {scene.name}\n      expected {expected}; observed {observed}")
    return SceneResult(scene.name, expected, observed, passed, round(seconds, 4))
