"""An agent process for the fault suite: ``python fault_agent_host.py SPEC.json``.

It runs the real agent (``build_agent``, the loop on its own thread, the aggregator link's sender) of each
node named in the spec, on a fake NVML, against the orchestrator the spec's kubeconfig names, exactly as
``gpuhealth agent`` does on a node; only the GPUs are fake. A test can SIGKILL it, put it in a network
namespace, or give it a full disk, because it is a process of its own.

Two seams the fault suite reads and writes, both files in the spec's ``control`` directory:

- ``lost-<node>``: the test's order that GPU 0 of the node falls off the bus (XID 79, then GPU_IS_LOST on
  every read). The fault is hardware, so it outlives the agent: a restarted process finds the file and
  starts with the GPU already lost, as a real node's NVML would answer.
- ``clock-<node>``: the node's wall clock step in seconds (``stepped_clock``); absent: the real clock.
- ``acks-<node>.jsonl``: one line per report the aggregator acknowledged (node, epoch, seq, accepted, the
  incident it carried), written the moment the answer came; the invariant checker compares it with the
  aggregator's store. A kill between the answer and the line loses the line, never adds one.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from agent.loop import Agent
from agent.settings import AgentSettings
from agent.wiring import build_agent
from core.aggregator_api import Report, ReportAck
from sim.fakes.nvml import FakeNvml

sys.path.insert(0, str(Path(__file__).parent))
from stepped_clock import SteppedClock

POLL_S = 0.05


def _journal(agent: Agent, path: Path) -> None:
    """Every acknowledged report of ``agent`` is a line of ``path``."""
    link = agent.parts.link
    assert link is not None, "the fault suite's agents always report to an aggregator"
    send = link.client.report
    lock = threading.Lock()

    def report(body: Report) -> ReportAck:
        ack = send(body)
        line = {
            "node": body.node,
            "epoch": body.epoch,
            "seq": body.seq,
            "accepted": ack.accepted,
            "incident": body.incident.id if body.incident is not None else None,
            "at": time.time(),
        }
        with lock, path.open("a", encoding="utf-8") as sink:
            sink.write(json.dumps(line) + "\n")
        return ack

    link.client.report = report  # type: ignore[method-assign,assignment]  # the suite's seam on the wire


def _end_with_parent() -> None:
    """The test run died without stopping this process (its finalizers never ran): end at once, whatever
    the agents are doing, rather than stay behind as an orphan."""
    parent = os.getppid()
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(1)


def main(spec_path: str) -> int:
    threading.Thread(target=_end_with_parent, daemon=True).start()
    spec: dict[str, Any] = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    control = Path(spec["control"])
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    agents: dict[str, Agent] = {}
    nvml: dict[str, FakeNvml] = {}
    for node in spec["nodes"]:
        nvml[node] = FakeNvml("h100_sxm", 8, seed=7, node_name=node)
        if (control / f"lost-{node}").exists():
            nvml[node].lose_gpu(0, emit_xid=False)
        settings = AgentSettings.model_validate(
            spec["settings"] | {"node_name": node, "state_dir": str(Path(spec["state_root"]) / node)}
        )
        agent = build_agent(settings, library=nvml[node], clock=SteppedClock(control / f"clock-{node}"))
        _journal(agent, control / f"acks-{node}.jsonl")
        agents[node] = agent.start()
    (control / f"ready-{'-'.join(spec['nodes'])}").write_text(str(time.time()), encoding="utf-8")
    while not stop.wait(POLL_S):
        for node, library in nvml.items():
            order = control / f"lost-{node}"
            if order.exists() and not library.gpu(0).lost:
                library.lose_gpu(0)
    for agent in agents.values():
        agent.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
