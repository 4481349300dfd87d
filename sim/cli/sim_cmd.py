"""``gpuhealth sim kube`` / ``gpuhealth sim nomad``: run an emulated orchestrator API in the foreground.

``kube`` prints the server's URL, writes a kubeconfig that the official Python client and ``kubectl`` can
use (plain HTTP on 127.0.0.1, a dummy token). ``nomad`` prints the Nomad address (and, with ``--acl``, the
management token on a second line). Both stop cleanly on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType

from gpuhealth.cli.errors import CliError

EXIT_STARTUP_FAILED = 1


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``sim`` with its ``kube`` sub-command to the ``gpuhealth`` command tree."""
    sim_parser = subparsers.add_parser("sim", help="run an emulated orchestrator API on this machine")
    sim_sub = sim_parser.add_subparsers(
        dest="sim_command", metavar="SIMULATOR", parser_class=type(sim_parser)
    )
    kube = _add_simulator(
        sim_sub, "kube", "emulated Kubernetes API server (official client and kubectl compatible)"
    )
    kube.add_argument("--nodes", type=int, default=0, metavar="N", help="GPU nodes to create at start-up")
    kube.add_argument("--kubeconfig-out", metavar="FILE", help="write a kubeconfig for the server to FILE")
    kube.add_argument(
        "--no-controllers",
        action="store_true",
        help="run without the simulated controllers (bare API server)",
    )
    kube.set_defaults(handler=run_kube)
    _register_nomad(sim_sub)
    sim_parser.set_defaults(handler=_missing_simulator(sim_parser))


def _register_nomad(sim_sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    nomad = _add_simulator(
        sim_sub, "nomad", "emulated Nomad HTTP API with GPU client nodes (python-nomad compatible)"
    )
    nomad.add_argument("--nodes", type=int, default=16, metavar="N", help="GPU client nodes (default 16)")
    nomad.add_argument("--gpus-per-node", type=int, default=8, metavar="N", help="GPUs per node (default 8)")
    nomad.add_argument("--acl", action="store_true", help="enforce ACLs; prints the management token")
    nomad.set_defaults(handler=run_nomad)


def _add_simulator(
    sim_sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, summary: str
) -> argparse.ArgumentParser:
    """One ``gpuhealth sim NAME`` parser with the flag every emulator takes (its listening port)."""
    parser = sim_sub.add_parser(
        name,
        help=summary,
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--port", type=int, default=0, help="TCP port on 127.0.0.1 (default: a free port)")
    return parser


def _missing_simulator(parser: argparse.ArgumentParser) -> object:
    def handler(args: argparse.Namespace) -> int:
        parser.print_help(sys.stderr)
        return 2

    return handler


def _check_args(args: argparse.Namespace) -> None:
    if not 0 <= args.port <= 65535:
        raise CliError(f"--port must be between 0 and 65535, not {args.port}")
    if args.nodes < 0:
        raise CliError(f"--nodes must not be negative, not {args.nodes}")


def _serve_until_signal(stop_server: Callable[[], None]) -> None:
    """Block until SIGINT or SIGTERM, then stop the server and restore the previous handlers."""
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        while not stop.wait(0.5):
            pass
    finally:
        stop_server()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _start_listening(start: Callable[[], object], port: int) -> None:
    """Run an emulator's ``start``; a port that cannot be bound is one clear line, not a traceback."""
    try:
        start()
    except OSError as error:
        raise CliError(
            f"cannot listen on 127.0.0.1:{port}: {error.strerror or error}", EXIT_STARTUP_FAILED
        ) from None


def run_nomad(args: argparse.Namespace) -> int:
    """Serve the emulated Nomad API until interrupted; 0 on a clean stop."""
    _check_args(args)
    if args.gpus_per_node < 0:
        raise CliError(f"--gpus-per-node must not be negative, not {args.gpus_per_node}")
    from sim.nomad.harness import NomadSim

    sim = NomadSim(nodes=args.nodes, gpus_per_node=args.gpus_per_node, acl=args.acl, port=args.port)
    _start_listening(sim.start, args.port)
    print(sim.address, flush=True)
    if sim.management_token:
        # The operator asked for it: this throwaway token exists only in this process.
        print(f"management token: {sim.management_token}", flush=True)
    _serve_until_signal(sim.stop)
    return 0


def run_kube(args: argparse.Namespace) -> int:
    """Serve until interrupted; 0 on a clean stop."""
    _check_args(args)
    from sim.kube.harness import KubeSim

    sim = KubeSim(nodes=args.nodes, controllers=not args.no_controllers, port=args.port)
    _start_listening(sim.start, args.port)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        print(sim.url, flush=True)
        if args.kubeconfig_out:
            path = sim.write_kubeconfig(args.kubeconfig_out)
            print(f"kubeconfig written to {path}", file=sys.stderr, flush=True)
        while not stop.wait(0.5):
            pass
    finally:
        sim.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0
