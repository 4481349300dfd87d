"""A watch of one Node: list it, then stream its changes into a cache, on a daemon thread.

This is the executor's only periodic traffic: one long-lived watch request per ``watch_timeout_s`` to twice
that, drawn at random for each request as client-go's reflector does (agents started together would
otherwise renew their watches together, every ``watch_timeout_s``, a wave across the fleet; resumed from
the last resourceVersion, which bookmarks keep fresh), a re-list only when the server
answers 410 Expired, and reconnects with backoff after errors. ``close()`` shuts the socket, so the thread
ends within a second.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections import deque
from collections.abc import Iterator
from typing import Any

import structlog

from core.steps import NodeFacts
from remediation.executor.node_cache import NodeCache
from remediation.kubernetes.api import NodeApi, NodeStream
from remediation.kubernetes.errors import KubeGone
from remediation.kubernetes.node_view import JsonObject, node_facts, resource_version_of
from remediation.kubernetes.retry import classify

log = structlog.get_logger(__name__)


class NodeWatch(NodeCache[JsonObject]):
    """Cache of one node kept current by a watch; ``changed`` is set when the node's facts change."""

    def __init__(
        self,
        api: NodeApi,
        *,
        watch_timeout_s: int = 300,
        backoff_initial_s: float = 0.5,
        backoff_max_s: float = 30.0,
    ) -> None:
        self._api = api
        self._node_name = api.node_name
        self._watch_timeout_s = watch_timeout_s
        self._backoff_initial_s = backoff_initial_s
        self._backoff_max_s = backoff_max_s
        self._stream_facts: NodeFacts | None = None  # facts of the last node the list/watch delivered
        self._own_versions: deque[str] = deque(maxlen=64)  # resourceVersions our writes produced
        self._pending: list[str | None] = []
        self._stream_now: NodeStream | None = None
        super().__init__(f"node-watch-{self._node_name}")

    # --- what the executor reads ------------------------------------------------------------------------

    def record(self, node: JsonObject | None, *, ours: bool = False) -> None:
        """Put a node in the cache from a fresh read or, with ``ours``, from the answer to our own write.

        Neither wakes the loop: only the watch stream decides what counts as someone else's change.
        """
        with self._lock:
            if ours and node is not None:
                version = resource_version_of(node)
                if version is not None:
                    self._own_versions.append(version)
            self._store(node)

    def _store(self, node: JsonObject | None) -> None:
        if node is not None and self._node is not None and _older(node, self._node):
            return  # a read that raced with a newer watch event must not roll the cache back
        self._node = node
        self._facts = node_facts(node)
        self._synced.set()

    def _observe(self, node: JsonObject | None) -> None:
        """A node from the list or the watch stream (in resourceVersion order): cache it, and flag a change
        to its facts unless the change is one of our own writes."""
        facts = node_facts(node)
        version = resource_version_of(node) if node is not None else None
        with self._lock:
            changed = self._stream_facts is not None and self._stream_facts != facts
            self._stream_facts = facts
            self._store(node)
            if not changed:
                return
            if self._writing:
                # Our write's event can arrive before our own request returns with its resourceVersion:
                # decide when the writes are done.
                self._pending.append(version)
                return
            foreign = version not in self._own_versions
        if foreign:
            self._changed.set()

    @contextlib.contextmanager
    def own_writes(self) -> Iterator[None]:
        """Bracket the executor's writes, so their watch events are told apart from other people's."""
        with self._lock:
            self._writing += 1
        try:
            yield
        finally:
            with self._lock:
                self._writing -= 1
                pending, self._pending = (self._pending, []) if not self._writing else ([], self._pending)
                foreign = any(version not in self._own_versions for version in pending)
            if foreign:
                self._changed.set()

    def close(self) -> None:
        """Stop the watch and wait (briefly) for its thread."""
        self._stopping.set()
        current = self._stream_now
        if current is not None:
            current.stop()  # shuts the socket, so a blocked read returns now
        if self._thread.is_alive():
            self._thread.join(timeout=2.0)

    # --- the thread ---------------------------------------------------------------------------------------

    def _run(self) -> None:
        backoff = self._backoff_initial_s
        version: str | None = None
        while not self._stopping.is_set():
            try:
                if version is None:
                    version = self._list()
                opened = time.monotonic()
                version = self._stream(version)
                backoff = self._backoff_initial_s
                if time.monotonic() - opened < 1.0:
                    # A server (or proxy) that ends every watch at once must not get a tight reconnect loop.
                    self._stopping.wait(self._backoff_initial_s)
            except KubeGone:
                log.info("node watch expired, listing again", node=self._node_name)
                version = None
            except Exception as error:  # noqa: BLE001 - the watch thread must survive any transport failure
                if self._stopping.is_set():
                    break
                backoff = self._pause(error, backoff)
        log.debug("node watch stopped", node=self._node_name)

    def _pause(self, error: BaseException, backoff: float) -> float:
        failure = classify(error)
        log.warning(
            "node watch failed, reconnecting",
            node=self._node_name,
            error=failure.describe() if failure else f"{type(error).__name__}: {error}",
            wait_s=backoff,
        )
        self._stopping.wait(backoff)
        return min(backoff * 2, self._backoff_max_s)

    def _list(self) -> str | None:
        node, version = self._api.list()
        self._observe(node)
        return version

    def _stream(self, version: str | None) -> str | None:
        if self._stopping.is_set():
            return version
        stream = self._api.watch(version, self._next_timeout_s())
        self._stream_now = stream
        try:
            for event in stream:
                self._handle(event)
                if self._stopping.is_set():
                    break
        finally:
            self._stream_now = None
        return stream.resource_version

    def _next_timeout_s(self) -> int:
        """How long the server keeps the next watch open: ``watch_timeout_s`` to twice that, at random."""
        return self._watch_timeout_s + random.randrange(self._watch_timeout_s + 1)  # noqa: S311 - spread, not secrecy

    def _handle(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        raw = event.get("raw_object")
        if kind in ("ADDED", "MODIFIED") and isinstance(raw, dict):
            self._observe(raw)
        elif kind == "DELETED":
            self._observe(None)


def _older(candidate: JsonObject, current: JsonObject) -> bool:
    """True when ``candidate`` carries an older resourceVersion than ``current`` (both numeric here)."""
    try:
        return int(candidate["metadata"]["resourceVersion"]) < int(current["metadata"]["resourceVersion"])
    except (KeyError, TypeError, ValueError):
        return False  # resourceVersions are opaque in general; without numbers, trust arrival order
