"""Checks the on-call commands make before they send anything: a node name the aggregator can take, and a
yes from the person (or ``--yes``) before an action that cannot be undone."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TextIO

from core.aggregator_api import NODE_NAME_RULE, is_accepted_node_name
from gpuhealth.cli.errors import CliError

EXIT_USAGE = 2
EXIT_DECLINED = 1


def node_name(value: str) -> str:
    """``value`` if it can name a node, else a one-line usage error (an argparse ``type=``).

    The aggregator takes only these names, so nothing else needs to reach it; a name such as
    ``../silences/1`` would otherwise travel as a path and address something that is not a node.
    """
    if not is_accepted_node_name(value):
        shown = repr(value) if value else "an empty name"
        raise argparse.ArgumentTypeError(f"{shown} is not a node name: {NODE_NAME_RULE}")
    return value


def confirm(
    what: str,
    *,
    yes: bool,
    stdin: TextIO | None = None,
    stderr: TextIO | None = None,
    is_tty: Callable[[], bool] | None = None,
) -> None:
    """Say ``what`` will happen and ask; return when the answer is yes (or ``yes`` was given), else raise.

    Without a terminal to ask on (a script, a pipe), the command is refused with one line that names
    ``--yes``: a script that means it says so.
    """
    if yes:
        return
    stdin = stdin or sys.stdin
    stderr = stderr or sys.stderr
    interactive = is_tty() if is_tty is not None else stdin.isatty()
    if not interactive:
        raise CliError(f"{what}; not done without --yes (no terminal to ask on)", EXIT_USAGE)
    stderr.write(f"{what}.\nGo ahead? [y/N] ")
    stderr.flush()
    answer = stdin.readline().strip().lower()
    if answer not in {"y", "yes"}:
        raise CliError("nothing done", EXIT_DECLINED)
