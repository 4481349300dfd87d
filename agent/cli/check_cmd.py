"""``gpuhealth check``: judge this node (or a saved snapshot) and print the verdict.

Exit codes follow the Nagios / NHC convention: 0 ok, 1 warn, 2 fail, 3 unknown. An unreadable or invalid
input file is one line on stderr, nothing on stdout, exit 3.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from rich.console import Console

from agent.cli.common import default_node_name, load_yaml_mapping
from agent.cli.errors import CliError
from agent.cli.render import print_verdict
from agent.snapshot import NodeSnapshot
from checks.findings import Verdict

if TYPE_CHECKING:
    from checks.config import ChecksConfig

EXIT_UNKNOWN = 3


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
    parser.add_argument("--config", metavar="FILE", help="YAML configuration (its 'checks' section is used)")
    parser.add_argument("--node", help="node name for a live check (default: $NODE_NAME or the hostname)")
    parser.add_argument(
        "--expected-gpus", type=int, metavar="N", help="GPUs this node should have (live check)"
    )
    parser.add_argument("--json", action="store_true", help="print the verdict as one JSON object")
    parser.set_defaults(handler=run_check, internal_error_exit=EXIT_UNKNOWN)


def run_check(args: argparse.Namespace) -> int:
    from checks.runner import run_checks

    config = _load_checks_config(args.config)
    snapshot = _read_snapshot(args)
    if args.kernel_log:
        snapshot = _with_kernel_log(snapshot, args.kernel_log)
    verdict = run_checks(snapshot, config)
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
    from agent.backends.nvml_backend import NvmlBackend

    with NvmlBackend(
        node_name=args.node or default_node_name(), expected_gpu_count=args.expected_gpus
    ) as backend:
        return backend.snapshot()


def _with_kernel_log(snapshot: NodeSnapshot, path: str) -> NodeSnapshot:
    from agent.backends.kernel_log import KernelLogError, attach_kernel_xids, read_kernel_log

    try:
        events = read_kernel_log(path)
    except KernelLogError as exc:
        raise CliError(str(exc), EXIT_UNKNOWN) from exc
    return attach_kernel_xids(snapshot, events)


def _print(verdict: Verdict, snapshot: NodeSnapshot, *, as_json: bool) -> None:
    if as_json:
        sys.stdout.write(verdict.model_dump_json(indent=2) + "\n")
        return
    print_verdict(verdict, Console(highlight=False), {gpu.uuid: gpu.index for gpu in snapshot.gpus})
