"""Commands that other distributions add to ``gpuhealth``: the simulator's ``demo`` and ``sim``.

The product never imports the simulator. The simulator's distribution (``sim/pyproject.toml``) declares its
commands as entry points of the group ``gpuhealth.commands``, each a ``register(subparsers)`` function like
the product's own command modules. Without the simulator, ``gpuhealth demo`` and ``gpuhealth sim`` still
exist, and say in one line how to install it.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from importlib.metadata import entry_points

from gpuhealth.cli.errors import CliError

GROUP = "gpuhealth.commands"
SIMULATOR_COMMANDS = {
    "demo": "a simulated fleet on this machine, playing a fault scenario end to end",
    "sim": "run an emulated orchestrator API on this machine",
}
INSTALL_HINT = "pip install ./sim from the source tree, next to gpuhealth"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register every installed plugin's commands, then a stand-in for each simulator command missing."""
    why = "not installed"
    for entry in sorted(entry_points(group=GROUP), key=lambda e: e.name):
        try:
            register_commands = entry.load()
        except ImportError as exc:  # registered, but its code is not importable here (a broken install)
            why = f"cannot be loaded ({exc})"
            continue
        register_commands(subparsers)
    for name, summary in SIMULATOR_COMMANDS.items():
        if name not in subparsers.choices:
            # No option prefix: whatever follows (flags included) is taken, so the one line below is shown.
            parser = subparsers.add_parser(
                name, help=f"{summary} (needs the simulator)", add_help=False, prefix_chars="\0"
            )
            parser.add_argument("rest", nargs="*", help=argparse.SUPPRESS)
            parser.set_defaults(handler=_simulator_missing(name, why))


def _simulator_missing(name: str, why: str) -> Callable[[argparse.Namespace], int]:
    def handler(_args: argparse.Namespace) -> int:
        raise CliError(f"'gpuhealth {name}' comes with the simulator (gpuhealth-sim), {why}: {INSTALL_HINT}")

    return handler
