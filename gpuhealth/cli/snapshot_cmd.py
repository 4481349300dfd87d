"""``gpuhealth snapshot``: read this node's GPUs through NVML and write a v1 snapshot.

The snapshot goes to stdout, or to FILE with ``-o`` (written atomically). When NVML cannot be initialised
(no NVIDIA driver) the snapshot is still written, with ``nvml_error`` set and no GPUs; the command then says
so on stderr and exits 3 (unknown), so that scripts notice.
"""

from __future__ import annotations

import argparse
import sys

from core.settings import default_node_name
from gpuhealth.cli.common import write_atomically

EXIT_UNKNOWN = 3


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "snapshot",
        help="read this node's GPUs and write a v1 snapshot",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    parser.add_argument("--node", help="node name to record (default: $NODE_NAME or the hostname)")
    parser.add_argument("--expected-gpus", type=int, metavar="N", help="GPUs this node should have")
    parser.set_defaults(handler=run_snapshot, internal_error_exit=EXIT_UNKNOWN)


def run_snapshot(args: argparse.Namespace) -> int:
    from agent.backends.infiniband import DEFAULT_SYSFS_ROOT
    from agent.backends.nvml.backend import NvmlBackend
    from agent.sources.fabric import FabricSource

    with NvmlBackend(
        node_name=args.node or default_node_name(), expected_gpu_count=args.expected_gpus
    ) as backend:
        snapshot = FabricSource(backend, sysfs_root=DEFAULT_SYSFS_ROOT).snapshot()
    text = snapshot.to_json() + "\n"
    if args.output:
        write_atomically(args.output, text)
    else:
        sys.stdout.write(text)
    if snapshot.nvml_error:
        print(f"gpuhealth: no GPU could be read: {snapshot.nvml_error}", file=sys.stderr)
        return EXIT_UNKNOWN
    return 0
