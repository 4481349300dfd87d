"""Entry point of the ``gpuhealth`` console script."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import NoReturn, cast

from gpuhealth.cli.errors import CliError

EXIT_USAGE = 2
EXIT_INTERNAL = 70  # EX_SOFTWARE: a bug, not an expected failure


class OneLineArgumentParser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line (plus a hint), not the whole usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")

    def _get_formatter(self) -> argparse.HelpFormatter:
        return HelpFormatter(prog=self.prog)  # every command's help the same way


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Help that marks required options and shows each default its text does not already state."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if action.help is argparse.SUPPRESS:
            return action.help
        if action.required and action.option_strings:
            text = f"{text} (required)".strip()
        default = action.default
        shown = default not in (None, False, argparse.SUPPRESS, [], "") and not isinstance(
            action, argparse._HelpAction | argparse._VersionAction
        )
        if shown and action.option_strings and "default" not in text:
            text = f"{text} (default: %(default)s)".strip()
        return text


GLOBAL_OPTIONS = ("--log-level", "--log-format", "--debug", "--local-time")


def _finish_commands(
    parser: argparse.ArgumentParser, subparsers: argparse._SubParsersAction[argparse.ArgumentParser]
) -> None:
    """Every command: its one-line summary as its description, and the global options, so
    ``gpuhealth status --debug`` works as well as ``gpuhealth --debug status``."""
    summaries = {action.dest: action.help for action in subparsers._choices_actions}
    globals_ = [action for action in parser._actions if set(action.option_strings) & set(GLOBAL_OPTIONS)]
    for name, command in subparsers.choices.items():
        if command.description is None and summaries.get(name):
            command.description = summaries[name]
        if "-" not in command.prefix_chars:
            continue  # a stand-in that takes every word as it is (plugins.py)
        taken = {option for action in command._actions for option in action.option_strings}
        group = command.add_argument_group("global options (also before the command)")
        for action in globals_:
            if set(action.option_strings) & taken:
                continue
            if isinstance(action, argparse._StoreTrueAction):
                group.add_argument(
                    *action.option_strings,
                    dest=action.dest,
                    action="store_true",
                    default=argparse.SUPPRESS,
                    help=action.help,
                )
            else:
                group.add_argument(
                    *action.option_strings,
                    dest=action.dest,
                    choices=action.choices,
                    default=argparse.SUPPRESS,
                    help=action.help,
                )


def _package_version() -> str:
    try:
        return version("gpuhealth")
    except PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    """The full command tree; each command module registers its own sub-commands."""
    from gpuhealth.cli import (
        agent_cmd,
        aggregator_cmd,
        audit_cmd,
        check_cmd,
        diag_cmd,
        evidence_cmd,
        fleet_cmd,
        incidents_cmd,
        plugins,
        replay_cmd,
        report_cmd,
        snapshot_cmd,
    )

    parser = OneLineArgumentParser(
        prog="gpuhealth",
        description="GPU node health and fault-tolerance agent for Kubernetes and Nomad fleets.",
    )
    parser.add_argument("--version", action="version", version=f"gpuhealth {_package_version()}")
    parser.add_argument(
        "--log-level",
        help="debug, info, warning or error (default: warning; error for the demo); logs go to stderr",
    )
    parser.add_argument(
        "--log-format", default="auto", choices=["auto", "json", "console"], help="log format (default: auto)"
    )
    parser.add_argument("--debug", action="store_true", help="show a traceback for internal errors")
    parser.add_argument(
        "--local-time", action="store_true", help="show times in this machine's zone (default: UTC)"
    )
    subparsers = cast(
        "argparse._SubParsersAction[argparse.ArgumentParser]",
        parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineArgumentParser),
    )
    commands = (
        check_cmd,
        snapshot_cmd,
        agent_cmd,
        fleet_cmd,
        incidents_cmd,
        diag_cmd,
        audit_cmd,
        aggregator_cmd,
        replay_cmd,
        report_cmd,
        evidence_cmd,
    )
    for module in commands:
        module.register(subparsers)
    plugins.register(subparsers)
    _finish_commands(parser, subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; return its exit code (the console script exits with it)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Callable[[argparse.Namespace], int] | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    from core.logging import configure_logging
    from gpuhealth.cli.incident_views import show_local_time

    show_local_time(args.local_time)
    try:
        configure_logging(args.log_level or getattr(args, "default_log_level", "warning"), args.log_format)
        return handler(args)
    except CliError as exc:
        print(f"gpuhealth: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except ValueError as exc:  # raised by configure_logging for a bad level
        print(f"gpuhealth: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("gpuhealth: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if args.debug:
            raise
        print(
            f"gpuhealth: internal error: {type(exc).__name__}: {exc} (run with --debug for the traceback)",
            file=sys.stderr,
        )
        return getattr(args, "internal_error_exit", EXIT_INTERNAL)


def run() -> NoReturn:
    sys.exit(main())


if __name__ == "__main__":
    run()
