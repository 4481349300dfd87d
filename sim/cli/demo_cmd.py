"""``gpuhealth demo``: the whole system on this machine, playing a fault scenario.

The emulated Kubernetes API (or the Nomad API with --orchestrator nomad) with GPU nodes, the aggregator on
a SQLite file in a temporary directory, one real agent per node on fake GPUs, a training job and inference
pods; then a scenario's timeline of faults, checked against its expectations. With no --scenario it plays
the shipped default story (XID 79 drained, rebooted, validated and released; XID 13 left in service; a
pending row remap drained, reset, validated and released; a flapping thermal signal; a correlated burst
that trips the breaker). Exits 0 only if every expectation held, 1 if one did not, 2 if the scenario is
invalid or cannot be played.
"""

from __future__ import annotations

import argparse
import sys

from gpuhealth.cli.errors import CliError

EXIT_FAILED = 1
EXIT_INVALID = 2


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="a simulated fleet on this machine, playing a fault scenario end to end",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--scenario", metavar="FILE", help="a scenario file (docs/scenarios.md)")
    parser.add_argument("--nodes", type=_positive, metavar="N", help="override the scenario's fleet size")
    parser.add_argument("--quick", action="store_true", help="the scenario's quick fleet size (CI)")
    parser.add_argument(
        "--orchestrator",
        choices=("kubernetes", "nomad"),
        help="play on this emulated orchestrator instead of the scenario's own",
    )
    parser.add_argument("--headless", action="store_true", help="no live view: progress lines and summary")
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    parser.add_argument(
        "--keep",
        type=float,
        nargs="?",
        const=600.0,
        default=0.0,
        metavar="SECONDS",
        help="after the story, keep the fleet and its fleet page up this long (default 600; Ctrl-C ends)",
    )
    # Agents log at error level so that the view stays readable (they provoke faults on purpose).
    parser.set_defaults(handler=run_demo, default_log_level="error")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError("needs at least 1 node")
    return value


def run_demo(args: argparse.Namespace) -> int:
    from rich.console import Console

    from sim.scenario.engine import ScenarioRunError, run_scenario
    from sim.scenario.loader import ScenarioError, load_scenario, shipped_scenario
    from sim.scenario.view import LiveView, ProgressLines, print_summary

    try:
        scenario = load_scenario(args.scenario or shipped_scenario())
    except ScenarioError as exc:
        raise CliError(str(exc), EXIT_INVALID) from None
    if args.quick and scenario.quick_nodes is not None:
        scenario = scenario.resized(scenario.quick_nodes)
    if args.nodes is not None:
        scenario = scenario.resized(args.nodes)
    if args.orchestrator is not None:
        scenario = scenario.on(args.orchestrator)
    live = not (args.headless or args.json) and sys.stdout.isatty()
    try:
        if live:
            with LiveView(scenario.name) as view:
                summary = run_scenario(scenario, view, keep_s=args.keep)
        else:
            summary = run_scenario(scenario, ProgressLines(), keep_s=args.keep)
    except ScenarioRunError as exc:
        raise CliError(f"scenario {scenario.name!r} cannot be played: {exc}", EXIT_INVALID) from None
    if args.json:
        print(summary.model_dump_json())
    else:
        print_summary(summary, Console())
    return 0 if summary.passed else EXIT_FAILED
