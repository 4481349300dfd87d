"""How long listing a large GPU fleet takes through the official client against the emulator.

``python -m bench.kube_list [--quick] [--nodes N] [--runs R] --json`` prints one JSON object:

- ``list_typed_s``: median wall time of ``CoreV1Api.list_node()`` (HTTP + the client's model building);
- ``list_raw_s``: the same request with ``_preload_content=False`` (HTTP and the emulator only: our overhead);
- ``list_paged_s``: ``limit=500`` pages, as ``kubectl get`` and informers list;
- ``create_s``: time to create the nodes in the store.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client

from sim.kube.harness import KubeSim, add_gpu_nodes

FULL_NODES = 10_000
QUICK_NODES = 1_000
TARGET_S = 2.0


def _median_time(action: Callable[[], Any], runs: int) -> float:
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        action()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def _paged_list(core: client.CoreV1Api) -> int:
    count, token = 0, None
    while True:
        page = core.list_node(limit=500, _continue=token)
        count += len(page.items)
        token = page.metadata._continue if page.metadata is not None else None
        if not token:
            return count


def _raw_list(core: client.CoreV1Api) -> bytes:
    """The list body as bytes: the client skips building models with ``_preload_content=False``."""
    response: Any = core.list_node(_preload_content=False)
    data: bytes = response.data
    return data


def run(nodes: int, runs: int) -> dict[str, Any]:
    """Create ``nodes`` GPU nodes in an emulator and time the lists."""
    with KubeSim(controllers=False) as sim:
        started = time.perf_counter()
        add_gpu_nodes(sim.store, nodes)
        create_s = time.perf_counter() - started
        core = client.CoreV1Api(sim.api_client())
        listed = core.list_node()
        if len(listed.items) != nodes:
            raise RuntimeError(f"listed {len(listed.items)} nodes, expected {nodes}")
        body_bytes = len(_raw_list(core))

        def raw_list() -> None:
            _raw_list(core)

        typed_s = _median_time(core.list_node, runs)
        raw_s = _median_time(raw_list, runs)
        paged_s = _median_time(lambda: _paged_list(core), runs)
    return {
        "benchmark": "kube_list",
        "nodes": nodes,
        "runs": runs,
        "body_bytes": body_bytes,
        "create_s": round(create_s, 3),
        "list_typed_s": round(typed_s, 3),
        "list_raw_s": round(raw_s, 3),
        "list_paged_s": round(paged_s, 3),
        "target_s": TARGET_S,
        "meets_target": typed_s < TARGET_S,
    }


def main(argv: list[str] | None = None) -> int:
    """Entry point: parse flags, run, print one JSON object (or a short text summary)."""
    parser = argparse.ArgumentParser(prog="python -m bench.kube_list", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_NODES} nodes and one run (smoke test)")
    parser.add_argument("--nodes", type=int, help=f"nodes to create (default {FULL_NODES})")
    parser.add_argument("--runs", type=int, help="timed runs per measure; the median is reported (default 3)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    nodes = args.nodes or (QUICK_NODES if args.quick else FULL_NODES)
    runs = args.runs or (1 if args.quick else 3)
    result = run(nodes, runs)
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"{nodes} nodes: typed list {result['list_typed_s']} s, raw {result['list_raw_s']} s, "
            f"paged {result['list_paged_s']} s (target < {TARGET_S} s)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
