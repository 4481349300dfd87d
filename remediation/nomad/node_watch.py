"""A blocking-query watch of one Nomad node on a daemon thread: the executor's facts without an API call per
pass.

``GET /v1/node/:id?index=N&wait=60s`` returns as soon as the node changes (its modify index passes N) or
after the wait; an unchanged healthy node therefore costs one long-poll a minute and no write. Errors are
followed by a reconnect with backoff. ``changed`` is set when the node's facts change for a reason other
than the executor's own writes (the executor tells the watch what it expects to see after writing).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Protocol

import structlog

from core.steps import NodeFacts
from remediation.executor.node_cache import NodeCache
from remediation.nomad.errors import NomadError, NomadNotFound
from remediation.nomad.node_view import node_facts

log = structlog.get_logger(__name__)

JsonObject = dict[str, object]


class NodeQueries(Protocol):
    """What the watch needs from ``NomadApi``."""

    def watch_node(self, node_id: str, index: int, wait_s: float) -> tuple[dict[str, object], int]: ...


class NomadNodeWatch(NodeCache[dict[str, object]]):
    """Cache of one node kept current by blocking queries."""

    def __init__(
        self,
        api: NodeQueries,
        node_id: str,
        *,
        wait_s: float = 60.0,
        explain: Callable[[dict[str, object]], dict[str, object]] | None = None,
        backoff_initial_s: float = 0.5,
        backoff_max_s: float = 30.0,
    ) -> None:
        self._api = api
        self._node_id = node_id
        self._wait_s = wait_s
        self._explain = explain  # the node with the executor's writes it does not show yet
        self._backoff_initial_s = backoff_initial_s
        self._backoff_max_s = backoff_max_s
        self._expected: list[NodeFacts] = []  # facts our own writes lead to: not someone else's change
        super().__init__(f"nomad-node-watch-{node_id[:8]}")

    @contextlib.contextmanager
    def own_writes(self) -> Iterator[None]:
        """Bracket the executor's writes: the states the node passes through meanwhile are ours."""
        with self._lock:
            self._writing += 1
        try:
            yield
        finally:
            with self._lock:
                self._writing -= 1

    def expect(self, facts: NodeFacts) -> None:
        """The facts the executor's writes should produce: seeing them is not a change by someone else."""
        with self._lock:
            self._expected = [*self._expected[-7:], facts]

    def record(self, node: dict[str, object] | None) -> None:
        """A node from a direct read (before the watch's first answer, or after a 404)."""
        with self._lock:
            self._store(node)

    def close(self) -> None:
        """Stop the thread; a blocking query in flight is abandoned (the thread is a daemon)."""
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout=0.5)

    # --- the thread -----------------------------------------------------------------------------------------

    def _store(self, node: dict[str, object] | None) -> bool:
        """Cache ``node``; True when its facts differ from the previous ones and we did not expect them."""
        facts = node_facts(node)
        changed = self._synced.is_set() and facts != self._facts
        self._node, self._facts = node, facts
        self._synced.set()
        if changed and self._writing:
            return False  # a state between two of our writes (a human's change there waits for the next pass)
        if not changed or node is None:
            return changed
        # A node half-way through our writes (metadata shown, eligibility not yet) plus the writes it does
        # not show yet is what we expect: ours, not a change by someone else.
        explained = node_facts(self._explain(node)) if self._explain is not None else facts
        return explained not in self._expected

    def _run(self) -> None:
        backoff = self._backoff_initial_s
        index = 0
        while not self._stopping.is_set():
            try:
                node, next_index = self._api.watch_node(self._node_id, index, self._wait_s)
            except NomadNotFound:
                node, next_index = None, 0
            except NomadError as error:
                if self._stopping.is_set():
                    break  # close() cut the long poll
                log.warning(
                    "nomad node watch failed, reconnecting",
                    node_id=self._node_id,
                    error=error.describe(),
                    wait_s=backoff,
                )
                self._stopping.wait(backoff)
                backoff = min(backoff * 2, self._backoff_max_s)
                continue
            backoff = self._backoff_initial_s
            if self._stopping.is_set():
                break
            with self._lock:
                foreign = self._store(node)
            if foreign:
                self._changed.set()
            if node is None or next_index <= index:
                # No index to block on (node gone, a wait that ended unchanged, a server that does not
                # block): pause briefly rather than spin.
                self._stopping.wait(self._backoff_initial_s)
            index = max(next_index, 0) if node is not None else 0
        log.debug("nomad node watch stopped", node_id=self._node_id)
