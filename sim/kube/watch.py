"""Watch streams as the API server sends them: one JSON event per line over a chunked response.

Follows "API Concepts" → "Efficient detection of changes"
(https://kubernetes.io/docs/reference/using-api/api-concepts/#efficient-detection-of-changes),
"Watch bookmarks" (https://kubernetes.io/docs/reference/using-api/api-concepts/#watch-bookmarks),
"Semantics for watch" (https://kubernetes.io/docs/reference/using-api/api-concepts/#semantics-for-watch)
and "410 Gone responses" (https://kubernetes.io/docs/reference/using-api/api-concepts/#410-gone-responses):

- ``resourceVersion`` unset or ``"0"``: synthetic ``ADDED`` events for the current objects, then changes;
  a specific version: every change after it, or one ``ERROR`` event holding a 410 ``Expired`` Status when
  that version has fallen out of the history;
- with selectors, an object that stops matching is sent as ``DELETED`` and one that starts matching as
  ``ADDED``, as the watch cache does;
- ``allowWatchBookmarks``: ``BOOKMARK`` events (only ``metadata.resourceVersion`` set) periodically and
  when the stream ends; ``sendInitialEvents`` ends the initial burst with a bookmark annotated
  ``k8s.io/initial-events-end: "true"``;
- ``timeoutSeconds`` ends the stream cleanly.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass

from sim.kube.conversion import from_stored
from sim.kube.errors import expired
from sim.kube.protocols import KubeObject
from sim.kube.resources import ResourceType, group_version
from sim.kube.selectors import FieldSelector, LabelSelector
from sim.kube.store import (
    ADDED,
    DELETED,
    MODIFIED,
    HistoryExpiredError,
    MemoryStore,
    StoredObject,
    StoreEvent,
    WatchStart,
    dumps,
)

# The API server's default when a client gives no timeoutSeconds is 30-60 minutes; one hour is the cap.
DEFAULT_WATCH_TIMEOUT_S = 1800.0


@dataclass(frozen=True)
class WatchRequest:
    """What one ``?watch=true`` request asked for."""

    resource_type: ResourceType
    version: str
    namespace: str | None
    label_selector: LabelSelector
    field_selector: FieldSelector
    since_rv: int | None
    timeout_s: float = DEFAULT_WATCH_TIMEOUT_S
    bookmarks: bool = False
    send_initial_events: bool = False


class WatchHub:
    """Tracks open watch streams so that stopping the server ends them promptly."""

    def __init__(self, bookmark_interval_s: float = 1.0) -> None:
        self.bookmark_interval_s = bookmark_interval_s
        self._lock = threading.Lock()
        self._open: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()
        self.closing = False

    def register(self, loop: asyncio.AbstractEventLoop, wake: asyncio.Event) -> None:
        """Remember an open stream's wake-up event."""
        with self._lock:
            self._open.add((loop, wake))

    def unregister(self, loop: asyncio.AbstractEventLoop, wake: asyncio.Event) -> None:
        """Forget a stream that ended."""
        with self._lock:
            self._open.discard((loop, wake))

    def close_all(self) -> None:
        """End every open stream (their clients see the response end, as at a server restart)."""
        with self._lock:
            self.closing = True
            streams = list(self._open)
        for loop, wake in streams:
            _wake_threadsafe(loop, wake)


def _wake_threadsafe(loop: asyncio.AbstractEventLoop, wake: asyncio.Event) -> None:
    # A RuntimeError means the loop already closed: the stream is gone with it.
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(wake.set)


def event_line(event_type: str, object_json: bytes) -> bytes:
    """One watch event as a line of JSON."""
    return b'{"type":"' + event_type.encode() + b'","object":' + object_json + b"}\n"


def view_of(entry: StoredObject, resource_type: ResourceType, version: str) -> KubeObject:
    """The object as ``resource_type`` serves it at ``version`` (the stored dict itself when identical)."""
    if version == resource_type.version and not resource_type.stored_as:
        return entry.obj
    return from_stored(resource_type, entry.obj, version)


def render_object(entry: StoredObject, resource_type: ResourceType, version: str) -> bytes:
    """The object's JSON as served at ``version`` (the cached bytes when no conversion is needed)."""
    if version == resource_type.version and not resource_type.stored_as:
        return entry.json()
    return dumps(view_of(entry, resource_type, version))


def _bookmark(request: WatchRequest, rv: int, *, initial_end: bool = False) -> bytes:
    metadata: KubeObject = {"resourceVersion": str(rv)}
    if initial_end:
        metadata["annotations"] = {"k8s.io/initial-events-end": "true"}
    obj = {
        "kind": request.resource_type.kind,
        "apiVersion": group_version(request.resource_type.group, request.version),
        "metadata": metadata,
    }
    return event_line("BOOKMARK", dumps(obj))


class _Filter:
    def __init__(self, request: WatchRequest) -> None:
        self.request = request

    def matches(self, entry: StoredObject | None) -> bool:
        if entry is None:
            return False
        request = self.request
        if request.namespace and entry.namespace != request.namespace:
            return False
        obj = view_of(entry, request.resource_type, request.version)
        labels = obj.get("metadata", {}).get("labels") or {}
        return request.label_selector.matches(labels) and request.field_selector.matches(obj)

    def classify(self, event: StoreEvent) -> str | None:
        """The event type this watcher sees, or None when the change is outside its selection."""
        if event.type == ADDED:
            return ADDED if self.matches(event.entry) else None
        if event.type == DELETED:
            return DELETED if self.matches(event.entry) else None
        was, now = self.matches(event.previous), self.matches(event.entry)
        if was and now:
            return MODIFIED
        if now:
            return ADDED
        return DELETED if was else None


class _Session:
    """One open watch: the events queued for it and what it has sent so far."""

    def __init__(self, store: MemoryStore, request: WatchRequest) -> None:
        self.store = store
        self.request = request
        self.selection = _Filter(request)
        self.loop = asyncio.get_running_loop()
        self.pending: deque[StoreEvent] = deque()
        self.wake = asyncio.Event()
        self.last_rv = 0

    def sink(self, event: StoreEvent) -> None:
        """Called by the store under its lock, on the writer's thread: only enqueue and wake."""
        self.pending.append(event)
        _wake_threadsafe(self.loop, self.wake)

    def line_for(self, event: StoreEvent) -> bytes | None:
        """The event as this watcher sees it, or None when outside its selection."""
        self.last_rv = max(self.last_rv, event.rv)
        event_type = self.selection.classify(event)
        if event_type is None:
            return None
        return event_line(
            event_type, render_object(event.entry, self.request.resource_type, self.request.version)
        )

    def start_lines(self, start: WatchStart) -> list[bytes]:
        """Synthetic ADDED events (or the missed backlog) that precede the live changes."""
        request = self.request
        self.last_rv = start.rv if request.since_rv is None else request.since_rv
        lines = [
            event_line(ADDED, render_object(entry, request.resource_type, request.version))
            for entry in start.current
            if self.selection.matches(entry)
        ]
        if request.send_initial_events and request.bookmarks:
            lines.append(_bookmark(request, start.rv, initial_end=True))
        for event in start.backlog:
            line = self.line_for(event)
            if line is not None:
                lines.append(line)
        return lines

    def drain(self) -> list[bytes]:
        """Every queued event, as lines; afterwards ``last_rv`` covers everything committed so far."""
        self.wake.clear()
        # Every event up to this version has been queued already (the store records under its lock).
        horizon = self.store.resource_version
        lines = []
        while self.pending:
            line = self.line_for(self.pending.popleft())
            if line is not None:
                lines.append(line)
        self.last_rv = max(self.last_rv, horizon)
        return lines

    async def wait(self, seconds: float) -> None:
        """Sleep until an event is queued or ``seconds`` pass."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.wake.wait(), timeout=max(seconds, 0.0))


async def watch_stream(store: MemoryStore, request: WatchRequest, hub: WatchHub) -> AsyncIterator[bytes]:
    """The body of one watch response, line by line, until timeout, server stop or client disconnect."""
    session = _Session(store, request)
    try:
        start, cancel = store.subscribe(
            request.resource_type.store_key,
            session.sink,
            request.since_rv,
            name=request.field_selector.value_for("metadata.name"),
        )
    except HistoryExpiredError as error:
        yield event_line("ERROR", dumps(expired(str(error)).to_status()))
        return
    hub.register(session.loop, session.wake)
    try:
        for line in session.start_lines(start):
            yield line
        loop = session.loop
        deadline = loop.time() + request.timeout_s
        next_bookmark = loop.time() + hub.bookmark_interval_s
        while not hub.closing:
            for line in session.drain():
                yield line
            now = loop.time()
            if now >= deadline:
                break
            if request.bookmarks and now >= next_bookmark:
                yield _bookmark(request, session.last_rv)
                next_bookmark = now + hub.bookmark_interval_s
            wake_at = min(deadline, next_bookmark) if request.bookmarks else deadline
            await session.wait(wake_at - now)
        if request.bookmarks:
            yield _bookmark(request, session.last_rv)
    finally:
        cancel()
        hub.unregister(session.loop, session.wake)
