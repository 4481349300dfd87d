"""The members of ``NodeExecutor`` that a unit test's fake node has no use for.

A fake subclasses :class:`ExecutorDefaults` and writes only what its test is about (``facts``, ``apply``,
``wait_for_change``, ``close``); the rest answer as an executor without a drain whose node has been read:
synced, no drain, no refusal held, nothing sent.
"""

from __future__ import annotations

from collections.abc import Sequence

from remediation.executor import DrainNews, DrainProgress


class ExecutorDefaults:
    @property
    def synced(self) -> bool:
        return True

    @property
    def can_drain(self) -> bool:
        return False

    @property
    def drain_state(self) -> DrainProgress | None:
        return None

    def drain_updates(self) -> Sequence[DrainNews]:
        return []

    def wait_for_drain(self, timeout_s: float) -> bool:
        return True

    @property
    def problem(self) -> str | None:
        return None

    @property
    def writes_total(self) -> int:
        return 0

    @property
    def requests_total(self) -> int:
        return 0
