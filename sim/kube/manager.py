"""The controller manager: runs each enabled simulated controller's ``reconcile(store)`` from one thread.

Like kube-controller-manager's controllers, ours are level-triggered: a pass runs soon after any write
(writes that arrive together share one pass) and on a periodic tick, so time-based work (grace periods,
``tolerationSeconds``) happens even when nothing is written. A controller that raises is logged and
retried on the next pass; it never stops the others.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence

import structlog

from sim.kube.protocols import Controller, KubeObject, ObjectStore

log = structlog.get_logger(__name__)


class UnknownControllerError(KeyError):
    """A controller name that is not among the manager's controllers."""


class ControllerManager:
    """Calls the enabled controllers after writes (coalesced) and every ``interval_s`` seconds."""

    def __init__(
        self,
        store: ObjectStore,
        controllers: Sequence[Controller],
        *,
        interval_s: float = 0.1,
        enabled: Iterable[str] | None = None,
    ) -> None:
        self.store = store
        self.controllers = list(controllers)
        self.interval_s = interval_s
        names = [c.name for c in self.controllers]
        self._enabled = set(names if enabled is None else enabled)
        for name in self._enabled:
            self._check_name(name)
        self._dirty = threading.Event()
        self._stopping = threading.Event()
        self._pass_lock = threading.Lock()
        self._idle = threading.Condition()
        self._write_seq = 0
        self._quiet_seq = -1
        self._passes_started = 0
        self._quiet_pass = 0
        self._thread: threading.Thread | None = None
        if self.controllers:
            # Each listener call copies the object; a manager with nothing to run need not pay for it.
            store.add_listener(self._on_write)

    # --- switches ----------------------------------------------------------------------------------

    def _check_name(self, name: str) -> None:
        if name not in {c.name for c in self.controllers}:
            known = ", ".join(sorted(c.name for c in self.controllers)) or "none"
            raise UnknownControllerError(f"unknown controller {name!r}; known: {known}")

    @property
    def enabled(self) -> frozenset[str]:
        """Names of the controllers that run."""
        return frozenset(self._enabled)

    def is_enabled(self, name: str) -> bool:
        """Whether the named controller runs (False for a name the manager does not have)."""
        return name in self._enabled

    def enable(self, name: str) -> None:
        """Start running a controller on the next pass."""
        self._check_name(name)
        self._enabled.add(name)
        self._dirty.set()

    def disable(self, name: str) -> None:
        """Stop running a controller (from the next pass on)."""
        self._check_name(name)
        self._enabled.discard(name)

    # --- passes ------------------------------------------------------------------------------------

    def _on_write(self, event_type: str, resource: str, obj: KubeObject) -> None:
        with self._idle:
            self._write_seq += 1
        self._dirty.set()

    def run_once(self) -> bool:
        """Run every enabled controller once; True when the pass wrote nothing (the cluster is settled)."""
        with self._pass_lock:
            with self._idle:
                seq_before = self._write_seq
                self._passes_started += 1
                pass_number = self._passes_started
            for controller in self.controllers:
                if controller.name not in self._enabled:
                    continue
                try:
                    controller.reconcile(self.store)
                except Exception:  # one broken controller must not stop the simulated cluster
                    log.exception("controller failed", controller=controller.name)
            with self._idle:
                quiet = self._write_seq == seq_before
                if quiet:
                    self._quiet_seq = seq_before
                    self._quiet_pass = pass_number
                    self._idle.notify_all()
        return quiet

    def wait_idle(self, timeout_s: float = 5.0) -> bool:
        """Block until a full pass after the latest write changed nothing; False on timeout."""
        if self._thread is None:
            return any(self.run_once() for _ in range(1000))
        with self._idle:
            # Only a pass that starts after this call counts: time may have moved (a manual clock) without
            # any write, and a pass that ran before that move proves nothing about the cluster now.
            first_fresh_pass = self._passes_started + 1
            self._dirty.set()
            return self._idle.wait_for(
                lambda: self._quiet_pass >= first_fresh_pass and self._quiet_seq == self._write_seq, timeout_s
            )

    def _loop(self) -> None:
        while not self._stopping.is_set():
            self._dirty.wait(self.interval_s)
            if self._stopping.is_set():
                break
            self._dirty.clear()
            self.run_once()

    def start(self) -> None:
        """Run passes on a background thread until :meth:`stop`."""
        if self._thread is not None:
            return
        self._stopping.clear()
        self._thread = threading.Thread(target=self._loop, name="kube-sim-controllers", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the thread after its current pass."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self._stopping.set()
        self._dirty.set()
        thread.join(timeout_s)
