"""The real aggregator as a process of its own (``python -m aggregator --config FILE``) on 127.0.0.1.

The demo and the fleet-scale benchmark run it so: a fleet of a thousand agents reports, asks for permits and
has its drains run by the central remediator, and that work must not share one interpreter (one GIL) with
the emulated orchestrator and the scenario player, as it never does in a real cluster. ``stop()`` then
``start()`` keeps the port and the database, so a scenario can take the aggregator away and bring it back.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from agent.uplink.client import AggregatorClient
from sim.aggregator_process import AggregatorStartError, free_port

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0
READY_POLL_S = 0.1


class AggregatorChild:
    """One aggregator process; its SQLite database, configuration and log live in ``workdir``."""

    def __init__(self, workdir: Path, token: str | None = None, **settings: Any) -> None:
        """``settings``: the aggregator's (``remediator={...}`` among them for central drains)."""
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.token = token
        self.log_file = workdir / "aggregator.log"
        self._settings: dict[str, Any] = {
            "database_url": f"sqlite:///{workdir / 'aggregator.db'}",
            "token": token,
            **settings,
        }
        self._popen: subprocess.Popen[bytes] | None = None

    @property
    def drains_centrally(self) -> bool:
        """Whether its remediator drains the nodes (the agents then use ``drain_by: aggregator``)."""
        remediator = self._settings.get("remediator") or {}
        return bool(remediator) and remediator.get("orchestrator", "off") != "off"

    @property
    def pid(self) -> int | None:
        return self._popen.pid if self._popen is not None else None

    def start(self) -> AggregatorChild:
        """Start the process; returns once it answers ``/readyz`` (its database is migrated)."""
        config = self.workdir / "aggregator.yaml"
        values = {"host": "127.0.0.1", "port": self.port, **self._settings}
        config.write_text(yaml.safe_dump({"aggregator": _plain(values)}))
        with self.log_file.open("ab") as log:
            self._popen = subprocess.Popen(
                [sys.executable, "-m", "aggregator", "--config", str(config), "--log-level", "warning"],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # a Ctrl-C meant for the demo reaches it through stop(), in order
            )
        self._wait_ready()
        return self

    def stop(self) -> None:
        """End the process (SIGTERM, then SIGKILL after a grace); the port closes, the database stays."""
        popen, self._popen = self._popen, None
        if popen is None or popen.poll() is not None:
            return
        popen.terminate()
        try:
            popen.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            popen.kill()
            popen.wait()

    def client(self, token: str | None = None) -> AggregatorClient:
        """A client of this aggregator with ``token`` (default: the shared one)."""
        return AggregatorClient(self.url, token or self.token, timeout_s=5.0, retries=1)

    def log_tail(self, chars: int = 2000) -> str:
        """The end of the process's log (empty when there is none yet)."""
        with contextlib.suppress(OSError):
            return self.log_file.read_text(errors="replace")[-chars:]
        return ""

    def _wait_ready(self) -> None:
        assert self._popen is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._popen.poll() is not None:
                last = self.log_tail().strip().splitlines()[-1:] or ["no output"]
                raise AggregatorStartError(f"the aggregator exited ({self._popen.returncode}): {last[0]}")
            if _answers(f"{self.url}/readyz"):
                return
            time.sleep(READY_POLL_S)
        self.stop()
        raise AggregatorStartError(
            f"the aggregator was not ready on port {self.port} after {START_TIMEOUT_S:g} s"
        )


def _answers(url: str) -> bool:
    """Whether ``url`` (always http://127.0.0.1) answers 200 now."""
    with (
        contextlib.suppress(urllib.error.URLError, OSError),
        urllib.request.urlopen(url, timeout=2) as answer,  # noqa: S310 - a loopback http URL built here
    ):
        return bool(answer.status == 200)
    return False


def _plain(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` as YAML can write them (paths as strings, models as their JSON form)."""
    return dict(json.loads(json.dumps(values, default=str)))
