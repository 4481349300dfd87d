"""``gpuhealth demo``: the whole system on this machine, playing a fault scenario.

The emulated Kubernetes API (or the Nomad API with --orchestrator nomad; or, with --cluster real, a real
Kubernetes stack on this machine: kube-apiserver, kube-scheduler, KWOK GPU nodes, the JobSet manager) with
GPU nodes, the aggregator on a SQLite file in a temporary directory, one real agent per node on fake GPUs, a
training job and inference pods; then a scenario's timeline of faults, checked against its expectations.
With no --scenario it plays the shipped default story (XID 79 drained, rebooted, validated and released;
XID 13 left in service; a pending row remap drained, reset, validated and released; a flapping thermal
signal; a correlated burst that trips the breaker). Exits 0 only if every expectation held, 1 if one did
not, 2 if the scenario is invalid or cannot be played (on --cluster real: also when the stack is not built).
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

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
    parser.add_argument(
        "--scenario",
        metavar="NAME|FILE",
        help="a shipped scenario by name (default, breaker, api-outage, ...) or a scenario file "
        "(docs/scenarios.md); default: the shipped 'default'",
    )
    parser.add_argument("--nodes", type=_positive, metavar="N", help="override the scenario's fleet size")
    parser.add_argument("--quick", action="store_true", help="the scenario's quick fleet size (CI)")
    parser.add_argument(
        "--orchestrator",
        choices=("kubernetes", "nomad"),
        help="play on this emulated orchestrator instead of the scenario's own",
    )
    parser.add_argument(
        "--cluster",
        choices=("emulated", "real"),
        default="emulated",
        help="real: play on a real Kubernetes stack on this machine (kube-apiserver, kube-scheduler, KWOK "
        "GPU nodes, the JobSet manager) built by tools/build-control-plane.sh; Kubernetes scenarios only",
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
        help="after the story, print its summary and keep the fleet, its fleet page and the aggregator for "
        "the on-call commands up this long (600 when given alone; Ctrl-C or SIGTERM ends it)",
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


def scenario_file(value: str | None) -> Path:
    """The scenario ``--scenario`` names: a file that exists, else a shipped scenario by name (an unknown
    name is a ScenarioError listing the shipped ones), else the file (whose absence load_scenario reports)."""
    from sim.scenario.loader import shipped_scenario, shipped_scenarios

    if value is None:
        return shipped_scenario()
    path = Path(value)
    if path.exists() or "/" in value or path.suffix in {".yaml", ".yml", ".json"}:
        return path
    if value in shipped_scenarios():
        return shipped_scenarios()[value]
    return shipped_scenario(value)  # raises: no shipped scenario named ... (shipped: ...)


class Terminated(KeyboardInterrupt):
    """SIGTERM, taken as Ctrl-C: the run stops the same way, its temporary directory removed."""


def _terminated(_signum: int, _frame: object) -> None:
    raise Terminated


def run_demo(args: argparse.Namespace) -> int:
    from rich.console import Console

    from sim.scenario.engine import ScenarioRunError, run_scenario
    from sim.scenario.loader import ScenarioError, load_scenario
    from sim.scenario.summary import RunSummary
    from sim.scenario.view import LiveView, ProgressLines, print_summary

    try:
        scenario = load_scenario(scenario_file(args.scenario))
    except ScenarioError as exc:
        raise CliError(str(exc), EXIT_INVALID) from None
    if args.quick and scenario.quick_nodes is not None:
        scenario = scenario.resized(scenario.quick_nodes)
    if args.nodes is not None:
        scenario = scenario.resized(args.nodes)
    if args.orchestrator is not None:
        scenario = scenario.on(args.orchestrator)
    live = not (args.headless or args.json) and sys.stdout.isatty()
    shown: list[RunSummary] = []

    def show(summary: RunSummary, console: Console) -> None:
        if args.json:
            print(summary.model_dump_json(), flush=True)
        else:
            print_summary(summary, console)
        shown.append(summary)

    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        if live:
            with LiveView(scenario.name) as view:
                summary = run_scenario(
                    scenario,
                    view,
                    keep_s=args.keep,
                    story_over=lambda done: show(done, view.console),
                    cluster=args.cluster,
                )
        else:
            summary = run_scenario(
                scenario,
                ProgressLines(),
                keep_s=args.keep,
                story_over=lambda done: show(done, Console()),
                cluster=args.cluster,
            )
    except ScenarioRunError as exc:
        raise CliError(f"scenario {scenario.name!r} cannot be played: {exc}", EXIT_INVALID) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
    if not shown:
        show(summary, Console())
    return 0 if summary.passed else EXIT_FAILED
