"""``gpuhealth diag NODE --level N [--force]``: ask a node's agent, through the aggregator, for a deep
diagnostic (``dcgmi diag -r N``).

The request is stored by the aggregator and handed to the agent with the answer to its next report. The
agent runs it when the node is idle (no pod holds its GPUs) or ``--force`` says so, with the node labelled
``testing`` and tainted meanwhile; the outcome — or why it was refused — lands in the node's timeline
(``gpuhealth node NODE``, ``gpuhealth events --node NODE``).
"""

from __future__ import annotations

import argparse

from gpuhealth.cli.fleet_cmd import _client, _common_options, _print_json
from gpuhealth.cli.guard import node_name

LEVELS = (1, 2, 3, 4)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``diag`` to the command tree."""
    diag = subparsers.add_parser(
        "diag", parents=[_common_options()], help="ask a node's agent to run dcgmi diag (deep diagnostics)"
    )
    diag.add_argument("name", metavar="NODE", type=node_name)
    diag.add_argument(
        "--level",
        type=int,
        choices=LEVELS,
        default=1,
        help="dcgmi diag level: 1 about a minute, 2 a few minutes, 3 about 15 minutes, 4 hours (default 1)",
    )
    diag.add_argument("--force", action="store_true", help="run even while pods on the node use its GPUs")
    diag.add_argument("--reason", default=None, help="why (recorded in the history)")
    diag.add_argument("--by", help=argparse.SUPPRESS)  # ignored: the aggregator records who you are
    diag.set_defaults(handler=run_diag)


def run_diag(args: argparse.Namespace) -> int:
    """``gpuhealth diag NODE --level N [--force]``."""
    reason = args.reason or f"deep diagnostic level {args.level}"
    with _client(args) as client:
        request = client.diag(args.name, level=args.level, force=args.force, reason=reason)
    if args.json:
        _print_json(request)
        return 0
    forced = ", forced" if request.force else ""
    print(
        f"diag level {request.level}{forced} of {request.node} requested (request {request.id}); its agent "
        f"runs it after its next report. Result: gpuhealth node {request.node}"
    )
    return 0
