"""``gpuhealth check``: judge this node (or a saved snapshot) and print the verdict.

Exit codes follow the Nagios / NHC convention: 0 ok, 1 warn, 2 fail, 3 unknown. An unreadable or invalid
input file is one line on stderr, nothing on stdout, exit 3.
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from core.dcgm import DcgmReadings
from core.findings import Finding, Verdict, with_unknown_ages
from core.settings import default_node_name
from core.snapshot import FabricReadings, NodeSnapshot
from gpuhealth.cli.common import load_yaml_mapping
from gpuhealth.cli.errors import CliError
from gpuhealth.cli.render import print_verdict

if TYPE_CHECKING:
    from checks.config import ChecksConfig

EXIT_UNKNOWN = 3
LIVE_READ_TIMEOUT_S = 30.0  # reading 8 GPUs takes well under a second; NVML hung on a lost GPU never ends


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "check",
        help="run every check on this node (or a snapshot file) and print the verdict",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--snapshot", metavar="FILE", help="judge a saved v1 snapshot instead of this node")
    parser.add_argument(
        "--kernel-log",
        metavar="FILE",
        help="also judge the XID lines of a saved kernel log (dmesg, journald, syslog)",
    )
    parser.add_argument(
        "--dcgm-metrics",
        metavar="FILE|URL",
        help="also judge a dcgm-exporter /metrics page (saved text or live URL); alone, its GPUs are judged",
    )
    parser.add_argument("--dcgmi-diag", metavar="FILE", help="also judge a saved 'dcgmi diag -j' output")
    parser.add_argument("--config", metavar="FILE", help="YAML configuration (its 'checks' section is used)")
    parser.add_argument("--node", help="node name for a live check (default: $NODE_NAME or the hostname)")
    parser.add_argument(
        "--expected-gpus", type=int, metavar="N", help="GPUs this node should have (live check)"
    )
    parser.add_argument("--json", action="store_true", help="print the verdict as one JSON object")
    parser.set_defaults(handler=run_check, internal_error_exit=EXIT_UNKNOWN)


def run_check(args: argparse.Namespace) -> int:
    from checks.runner import CHECKS, PAGE_SNAPSHOT_CHECKS, merge_findings, run_checks

    config = _load_checks_config(args.config)
    page = _read_dcgm_page(args.dcgm_metrics) if args.dcgm_metrics else None
    from_page = page is not None and not args.snapshot
    snapshot = _page_snapshot(args, page) if page is not None and from_page else _read_snapshot(args)
    if args.kernel_log:
        snapshot = _with_kernel_log(snapshot, args.kernel_log)
    if page is not None:
        snapshot = _with_dcgm_page(snapshot, page)
    verdict = run_checks(snapshot, config, checks=PAGE_SNAPSHOT_CHECKS if from_page else CHECKS)
    if args.kernel_log and snapshot.fabric is not None:  # a post-mortem: flaps over the log's own times
        from checks.fabric import judge_logged_flaps

        logged = judge_logged_flaps(snapshot.fabric.link_events, config)
        if logged:
            verdict = Verdict.from_findings(snapshot.node, merge_findings(verdict.findings, logged))
    if args.dcgmi_diag:
        extra = _diag_file_findings(args.dcgmi_diag, snapshot)
        verdict = Verdict.from_findings(snapshot.node, merge_findings(verdict.findings, extra))
    if snapshot.taken_at is not None:  # unknown since the reading at the latest: a stale file shows its age
        stamped, _ = with_unknown_ages(verdict.findings, {}, snapshot.taken_at)
        verdict = Verdict.from_findings(snapshot.node, stamped)
    _print(verdict, snapshot, as_json=args.json)
    return verdict.exit_code


def _load_checks_config(path: str | None) -> ChecksConfig:
    from checks.config import ChecksConfig, ConfigError

    if path is None:
        return ChecksConfig()
    data = load_yaml_mapping(path, exit_code=EXIT_UNKNOWN)
    try:
        return ChecksConfig.from_mapping(data.get("checks") or {})
    except ConfigError as exc:
        raise CliError(f"{path}: {exc}", EXIT_UNKNOWN) from exc


def _read_snapshot(args: argparse.Namespace) -> NodeSnapshot:
    if args.snapshot:
        from agent.backends.replay import SnapshotError, load_snapshot

        try:
            return load_snapshot(args.snapshot)
        except SnapshotError as exc:
            raise CliError(str(exc), EXIT_UNKNOWN) from exc
    from agent.backends.infiniband import DEFAULT_SYSFS_ROOT
    from agent.backends.nvml.backend import NvmlBackend
    from agent.sources.fabric import FabricSource
    from agent.sources.watchdog import Deadline, Stall

    node = args.node or default_node_name()

    def read() -> NodeSnapshot:
        with NvmlBackend(node_name=node, expected_gpu_count=args.expected_gpus) as backend:
            return FabricSource(backend, sysfs_root=DEFAULT_SYSFS_ROOT).snapshot()

    # A GPU falling off the bus can hang NVML: the check answers unknown instead of hanging with it.
    outcome = Deadline("nvml", LIVE_READ_TIMEOUT_S).run(read)
    if isinstance(outcome, Stall):
        began = datetime.now(UTC) - timedelta(seconds=outcome.waited_s)  # unknown since the call began
        return NodeSnapshot(node=node, taken_at=began, nvml_error=outcome.describe(), gpus=[])
    return outcome


def _read_dcgm_page(location: str) -> str | DcgmReadings:
    """The page's text; an unreachable or erroring URL is an exporter error (judged unknown), a bad file
    is exit 3."""
    from agent.backends.dcgm.exporter import ExporterError, parse_metrics, read_page

    is_url = location.startswith(("http://", "https://"))
    try:
        text = read_page(location)
    except ExporterError as exc:
        return DcgmReadings(exporter_error=str(exc))
    except OSError as exc:
        raise CliError(f"{location}: {exc.strerror or exc}", EXIT_UNKNOWN) from exc
    if not is_url:
        try:
            parse_metrics(text)
        except ExporterError as exc:
            raise CliError(f"{location}: {exc}", EXIT_UNKNOWN) from exc
    return text


def _page_snapshot(args: argparse.Namespace, page: str | DcgmReadings) -> NodeSnapshot:
    """With no --snapshot, the GPUs are the ones the page names (by UUID); the node is its host label."""
    from agent.backends.dcgm.exporter import ExporterError, host_of, parse_metrics
    from checks.dcgm_exporter import exporter_snapshot

    gpus = []
    if isinstance(page, str):
        try:
            gpus = parse_metrics(page)
        except ExporterError:
            gpus = []  # a garbled live page: judged as one unknown finding
    node = args.node or host_of(gpus) or default_node_name()
    return exporter_snapshot(node, gpus)


def _with_dcgm_page(snapshot: NodeSnapshot, page: str | DcgmReadings) -> NodeSnapshot:
    """The page's readings join the snapshot's DCGM readings, to be judged by the checks."""
    from agent.backends.dcgm.exporter import readings_for_page

    readings = page if isinstance(page, DcgmReadings) else readings_for_page(page, snapshot)
    held = snapshot.dcgm if snapshot.dcgm is not None else DcgmReadings()
    return snapshot.model_copy(update={"dcgm": held.joined(readings)})


def _diag_file_findings(path: str, snapshot: NodeSnapshot) -> list[Finding]:
    from agent.backends.dcgm.dcgmi_output import DcgmiOutputError, parse_diag
    from checks.dcgmi import diag_findings

    try:
        result = parse_diag(Path(path).read_text(encoding="utf-8", errors="replace"))
    except OSError as exc:
        raise CliError(f"{path}: {exc.strerror or exc}", EXIT_UNKNOWN) from exc
    except DcgmiOutputError as exc:
        raise CliError(f"{path}: {exc}", EXIT_UNKNOWN) from exc
    return diag_findings(result, {gpu.index: gpu.uuid for gpu in snapshot.gpus})


def _with_kernel_log(snapshot: NodeSnapshot, path: str) -> NodeSnapshot:
    from agent.backends.kernel_log import (
        KernelLogError,
        attach_kernel_xids,
        read_fabric_lines,
        read_kernel_log,
    )
    from gpuhealth.cli.log_lines import recognised_lines

    try:
        if recognised_lines(path) == 0:
            # No XID in a file that is no kernel log at all is not an all-clear.
            raise CliError(
                f"{path}: 0 lines recognised as a kernel log (dmesg, journalctl, syslog, /dev/kmsg or "
                "journald JSON): nothing judged",
                EXIT_UNKNOWN,
            )
        events = read_kernel_log(path)
        sxids, links = read_fabric_lines(path)
    except KernelLogError as exc:
        raise CliError(str(exc), EXIT_UNKNOWN) from exc
    with_xids = attach_kernel_xids(snapshot, events)
    if not sxids and not links:
        return with_xids
    # The log's NVSwitch SXids and NIC link lines join the snapshot's fabric readings (docs/fabric.md).
    fabric = with_xids.fabric or FabricReadings()
    merged = fabric.model_copy(
        update={
            "sxid_events": [*fabric.sxid_events, *sxids],
            "link_events": [*fabric.link_events, *links],
        }
    )
    return with_xids.model_copy(update={"fabric": merged})


def _print(verdict: Verdict, snapshot: NodeSnapshot, *, as_json: bool) -> None:
    if as_json:
        sys.stdout.write(verdict.model_dump_json(indent=2) + "\n")
        return
    print_verdict(verdict, Console(highlight=False), {gpu.uuid: gpu.index for gpu in snapshot.gpus})
