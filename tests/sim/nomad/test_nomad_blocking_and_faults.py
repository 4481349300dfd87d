"""Blocking queries, index headers and injected outages.

Pages cited: developer.hashicorp.com/nomad/api-docs ("Blocking Queries": ``index`` and ``wait``,
``X-Nomad-Index``; "Consistency Modes": ``X-Nomad-KnownLeader``, ``X-Nomad-LastContact``).
"""

from __future__ import annotations

import socket
import threading
import time

import httpx
import nomad
import pytest
from nomad.api.exceptions import BaseNomadException
from waiting import HANG_GUARD_S, wait_until

from core.clock import ManualClock
from sim.nomad.harness import NomadSim
from sim.nomad.http import parse_duration


def test_reads_carry_index_and_leader_headers(nomad_sim: NomadSim) -> None:
    """Consistency modes: every read answers with X-Nomad-Index, X-Nomad-KnownLeader, X-Nomad-LastContact."""
    reply = httpx.get(f"{nomad_sim.address}/v1/nodes")
    assert int(reply.headers["X-Nomad-Index"]) == nomad_sim.state.index("nodes")
    assert reply.headers["X-Nomad-KnownLeader"] == "true"
    assert reply.headers["X-Nomad-LastContact"] == "0"


def test_blocking_query_returns_when_the_index_moves(nomad_sim: NomadSim, api: nomad.Nomad) -> None:
    """Blocking queries: ``?index=N`` holds the answer until the data changes past N, then returns the new
    state and the new X-Nomad-Index."""
    node_id = nomad_sim.node_id("gpu-node-0")
    first = httpx.get(f"{nomad_sim.address}/v1/node/{node_id}")
    index = int(first.headers["X-Nomad-Index"])
    timer = threading.Timer(0.2, lambda: api.node.eligible_node(node_id, ineligible=True))
    timer.start()
    started = time.monotonic()
    reply = httpx.get(
        f"{nomad_sim.address}/v1/node/{node_id}", params={"index": index, "wait": "60s"}, timeout=90
    )
    elapsed = time.monotonic() - started
    timer.join()
    assert reply.json()["SchedulingEligibility"] == "ineligible"
    assert int(reply.headers["X-Nomad-Index"]) > index
    assert 0.1 < elapsed < 45  # returned on the change, long before the wait ran out (hang guard)


def test_blocking_query_returns_unchanged_when_the_wait_ends(nomad_sim: NomadSim) -> None:
    """Blocking queries: with no change the answer comes after ``wait`` with the same index."""
    first = httpx.get(f"{nomad_sim.address}/v1/nodes")
    index = first.headers["X-Nomad-Index"]
    started = time.monotonic()
    reply = httpx.get(f"{nomad_sim.address}/v1/nodes", params={"index": index, "wait": "300ms"}, timeout=10)
    elapsed = time.monotonic() - started
    assert reply.status_code == 200
    assert reply.headers["X-Nomad-Index"] == index
    assert 0.25 < elapsed < 30  # waited, and did not hang


def test_blocking_query_with_an_old_index_answers_at_once(nomad_sim: NomadSim) -> None:
    """An index already passed answers immediately; a malformed wait is 400."""
    started = time.monotonic()
    reply = httpx.get(f"{nomad_sim.address}/v1/allocations", params={"index": "0", "wait": "30s"}, timeout=10)
    assert reply.status_code == 200
    assert time.monotonic() - started < 20  # far less than the 30 s wait
    bad = httpx.get(f"{nomad_sim.address}/v1/nodes", params={"index": "1", "wait": "soon"})
    assert bad.status_code == 400


def test_go_durations_parse() -> None:
    """``wait`` takes Go durations (``5s``, ``100ms``, ``1m30s``) and bare seconds."""
    assert parse_duration("5s") == 5
    assert parse_duration("100ms") == pytest.approx(0.1)
    assert parse_duration("1m30s") == 90
    assert parse_duration("2") == 2


def test_outage_answers_503_then_recovers(nomad_sim: NomadSim, api: nomad.Nomad, clock: ManualClock) -> None:
    """An injected outage: every request is 503 for its span on the emulator's clock, then served again."""
    nomad_sim.outage(30)
    reply = httpx.get(f"{nomad_sim.address}/v1/nodes")
    assert reply.status_code == 503
    with pytest.raises(BaseNomadException):
        api.nodes.get_nodes()
    clock.advance(31)
    assert len(api.nodes.get_nodes()) == 4


def test_outage_with_refused_connections_comes_back_on_the_same_port(
    nomad_sim: NomadSim, clock: ManualClock
) -> None:
    """refuse_connections stops the listener (connection refused) and restarts it on the same port."""
    address = nomad_sim.address
    nomad_sim.outage(5, refuse_connections=True)
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{address}/v1/nodes")
    clock.advance(6)
    assert httpx.get(f"{address}/v1/nodes").status_code == 200


def test_mutating_requests_are_counted_by_route(nomad_sim: NomadSim, api: nomad.Nomad) -> None:
    """The request counters (for benchmarks) count writes per route template, not per node."""
    for name in ("gpu-node-0", "gpu-node-1"):
        api.node.eligible_node(nomad_sim.node_id(name), ineligible=True)
    assert nomad_sim.mutating_requests == {"POST /v1/node/:id/eligibility": 2}


def test_stopping_the_sim_answers_open_blocking_queries_at_once() -> None:
    """A long poll open when the emulator stops is answered right away instead of holding the shutdown."""
    from sim.nomad.harness import running_nomad_sim

    answers: list[int] = []
    with running_nomad_sim(nodes=1, controllers=False) as sim:
        url = f"{sim.address}/v1/nodes"
        index = httpx.get(url).headers["X-Nomad-Index"]

        def poll() -> None:
            answers.append(httpx.get(url, params={"index": index, "wait": "5m"}, timeout=60).status_code)

        poller = threading.Thread(target=poll)
        poller.start()
        time.sleep(0.3)
        started = time.monotonic()
    stop_took = time.monotonic() - started
    poller.join(30)
    assert answers == [200]
    assert stop_took < HANG_GUARD_S  # without the wake-up the poll would hold for minutes


def _open_long_poll(sim: NomadSim) -> socket.socket:
    """A raw connection holding ``GET /v1/nodes?index=<now>&wait=5m`` open (a client that may vanish)."""
    index = httpx.get(f"{sim.address}/v1/nodes").headers["X-Nomad-Index"]
    host, port = sim.address.removeprefix("http://").split(":")
    conn = socket.create_connection((host, int(port)), timeout=10)
    conn.sendall(f"GET /v1/nodes?index={index}&wait=5m HTTP/1.1\r\nHost: nomad\r\n\r\n".encode())
    return conn


def test_a_blocking_query_ends_when_its_client_goes_away(nomad_sim: NomadSim) -> None:
    """A long poll whose client closed the connection stops waiting at once, while the server keeps running
    and nothing has changed (it would otherwise wait out its five minutes)."""
    polls = [_open_long_poll(nomad_sim) for _ in range(3)]
    assert wait_until(lambda: nomad_sim.app.open_queries == 3), "the long polls never started waiting"

    polls[0].close()
    assert wait_until(lambda: nomad_sim.app.open_queries == 2), "a query outlived its client"
    for conn in polls[1:]:
        conn.close()
    assert wait_until(lambda: nomad_sim.app.open_queries == 0)
    assert httpx.get(f"{nomad_sim.address}/v1/nodes").status_code == 200  # the server is unharmed


def test_stop_returns_promptly_with_many_open_and_abandoned_blocking_queries() -> None:
    """stop() with eight open long polls and four whose clients vanished does not wait on any of them (a
    second per query would take twelve)."""
    from sim.nomad.harness import running_nomad_sim

    with running_nomad_sim(nodes=1, controllers=False) as sim:
        polls = [_open_long_poll(sim) for _ in range(12)]
        assert wait_until(lambda: sim.app.open_queries == 12), "the long polls never started waiting"
        for conn in polls[8:]:
            conn.close()
        started = time.monotonic()
    stop_took = time.monotonic() - started
    answered = [conn.recv(64) for conn in polls[:8]]
    for conn in polls[:8]:
        conn.close()
    assert all(first.startswith(b"HTTP/1.1 200") for first in answered), answered
    assert stop_took < 5.0  # hang guard; it takes a fraction of a second


def test_injected_fault_hits_only_the_matching_verb_and_resource(nomad_sim: NomadSim) -> None:
    """``sim.faults.inject(verb="create", resource="node", ...)`` fails writes under /v1/node/ only, N times."""
    node_id = nomad_sim.node_id("gpu-node-0")
    nomad_sim.faults.inject(verb="create", resource="node", status=500, times=1)
    url = f"{nomad_sim.address}/v1/node/{node_id}/eligibility"
    assert httpx.get(f"{nomad_sim.address}/v1/node/{node_id}").status_code == 200
    assert httpx.post(url, json={"Eligibility": "ineligible"}).status_code == 500
    assert httpx.post(url, json={"Eligibility": "ineligible"}).status_code == 200
