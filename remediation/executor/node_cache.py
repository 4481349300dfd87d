"""The cache half of a one-node watch, shared by the Kubernetes and the Nomad executors.

Each orchestrator keeps its node current its own way (a list/watch stream, blocking queries) on a daemon
thread; what the executor reads from the cache, and how it waits on it, is the same for both.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from typing import Generic, TypeVar

from core.steps import NodeFacts

NodeT = TypeVar("NodeT")


class NodeCache(ABC, Generic[NodeT]):
    """The last node seen and its facts; a subclass's ``_run`` fills it from its own thread."""

    def __init__(self, thread_name: str) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Event()  # the node's facts changed for a reason other than our writes
        self._synced = threading.Event()
        self._stopping = threading.Event()
        self._node: NodeT | None = None
        self._facts = NodeFacts()
        self._writing = 0  # how many of the executor's write brackets are open
        self._thread = threading.Thread(target=self._run, name=thread_name, daemon=True)

    def start(self) -> None:
        """Start the watch thread (returns at once; ``wait_synced`` waits for the first answer)."""
        self._thread.start()

    @property
    def synced(self) -> bool:
        """True once the node has been read at least once."""
        return self._synced.is_set()

    def wait_synced(self, timeout_s: float) -> bool:
        """Wait until the first read has completed; False on timeout."""
        return self._synced.wait(timeout_s)

    def node(self) -> NodeT | None:
        """The last node object seen (None before the first read or after the node was deleted)."""
        with self._lock:
            return self._node

    def facts(self) -> NodeFacts:
        """The facts of the last node seen."""
        with self._lock:
            return self._facts

    def wait_for_change(self, timeout_s: float) -> bool:
        """True when the node's facts changed since the previous call (waiting up to ``timeout_s``)."""
        changed = self._changed.wait(max(timeout_s, 0.0))
        self._changed.clear()
        return changed

    @abstractmethod
    def _run(self) -> None:
        """The watch loop, on its own thread: read the node, then follow its changes until stopped."""
