"""Expected command-line failures: one line on stderr and a chosen exit code, never a traceback."""

from __future__ import annotations


class CliError(Exception):
    """An expected failure (bad file, bad flag, unreachable service) with the exit code to use."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code
