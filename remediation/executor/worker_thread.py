"""The one background thread a drain or a validation runs on: started on request, waited for at shutdown.

The agent's loop must never block on a long job (a drain, a diagnostic), so each runs on a daemon thread:
a stopping agent must not be kept alive by it, and a restart picks the job up again from persisted state.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


def start_worker(target: Callable[..., None], args: tuple[object, ...], name: str) -> threading.Thread:
    """Run ``target(*args)`` on a new daemon thread called ``name``; returns the started thread."""
    thread = threading.Thread(target=target, args=args, name=name, daemon=True)
    thread.start()
    return thread


def wait_for_worker(thread: threading.Thread | None, timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` for ``thread`` to end; True when it ended or none was ever started."""
    if thread is None:
        return True
    thread.join(timeout_s)
    return not thread.is_alive()
