"""``gpuhealth agent``: the per-node daemon (the DaemonSet runs it).

Loads the settings (a YAML file plus GPUHEALTH_* environment variables), reads the GPUs through NVML,
marks, taints and releases its own node through the Kubernetes or Nomad API, and serves /metrics,
/healthz and /readyz. Runs until SIGTERM or SIGINT, then stops the loop, the XID watcher, the kernel-log
follower, the node watch and the HTTP endpoint. Without a GPU driver the loop reports the node as unknown;
it does not crash.
"""

from __future__ import annotations

import argparse
import signal
import threading
from types import FrameType
from typing import TYPE_CHECKING

import structlog

from gpuhealth.cli.errors import CliError

if TYPE_CHECKING:
    from agent.settings import AgentSettings
    from core.logging import LogFormat

EXIT_BAD_SETTINGS = 2
EXIT_STARTUP_FAILED = 1
STOP_TIMEOUT_S = 5.0

log = structlog.get_logger(__name__)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``agent`` to the ``gpuhealth`` command tree."""
    parser = subparsers.add_parser(
        "agent",
        help="run the per-node health agent (detect, debounce, mark, taint, release)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", metavar="FILE", help="YAML settings file (see docs/agent.md)")
    parser.add_argument("--dry-run", action="store_true", help="plan and log every action, mutate nothing")
    parser.set_defaults(handler=run_agent)


def run_agent(args: argparse.Namespace) -> int:
    """Run the agent until a signal; 0 on a clean stop."""
    from agent.settings import load_settings
    from core.settings import SettingsError

    try:
        settings = load_settings(args.config)
    except SettingsError as exc:
        raise CliError(str(exc), EXIT_BAD_SETTINGS) from None
    if args.dry_run:
        settings = settings.model_copy(update={"dry_run": True})
    _configure_logging(args, settings.log_level, settings.log_format)
    return _serve(settings)


def _configure_logging(args: argparse.Namespace, level: str, fmt: LogFormat) -> None:
    """The settings' level and format, unless given on the command line (the global flags win)."""
    from core.logging import configure_logging

    given: LogFormat = getattr(args, "log_format", "auto")
    chosen_format: LogFormat = given if given != "auto" else fmt
    configure_logging(getattr(args, "log_level", None) or level, chosen_format)


def _serve(settings: AgentSettings) -> int:
    from agent.telemetry.http import AgentHttpServer
    from agent.wiring import build_agent
    from remediation.executor.contract import ExecutorSetupError

    try:
        agent = build_agent(settings)
    except ExecutorSetupError as exc:  # no kubeconfig / cluster; no Nomad client, token
        raise CliError(f"cannot start the agent: {exc}", EXIT_STARTUP_FAILED) from None
    except OSError as exc:  # an unusable file or device named by the settings
        raise CliError(f"cannot start the agent: {exc}", EXIT_STARTUP_FAILED) from None
    server: AgentHttpServer | None = None
    if settings.http.enabled:
        try:
            server = AgentHttpServer(
                agent.metrics.registry,
                alive=lambda: agent.alive,
                ready=lambda: agent.ready,
                host=settings.http.host,
                port=settings.http.port,
                request_timeout_s=settings.http.request_timeout_s,
                max_connections=settings.http.max_connections,
            ).start()
        except OSError as exc:
            agent.close()
            raise CliError(
                f"cannot listen on {settings.http.host}:{settings.http.port}: {exc.strerror or exc}",
                EXIT_STARTUP_FAILED,
            ) from None
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()
        agent.wake.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    log.info(
        "agent_started", node=settings.node_name, dry_run=settings.dry_run, interval_s=settings.interval_s
    )
    agent.start()
    try:
        while not stop.wait(0.5):  # short waits so the signal handler runs promptly
            pass
    finally:
        agent.stop(STOP_TIMEOUT_S)
        if server is not None:
            server.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    log.info("agent_stopped", node=settings.node_name, ticks=agent.ticks)
    return 0
