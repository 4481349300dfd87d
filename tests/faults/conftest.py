"""Fixtures of the fault suite: a fresh fleet per test (``fault_world``), closed at teardown whatever
happened, and the test's seeded trials (``fault_trials``)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import netns
import pytest
import tmpfs
from fault_trials import Trials, seeded
from fault_world import FaultWorld
from netns import Namespace
from pg_pair import PostgresPair
from tmpfs import TmpfsDisk

from tests.aggregator.postgres import PostgresServer, PostgresUnavailable

MakeWorld = Callable[..., FaultWorld]


@pytest.fixture
def trials_of(request: pytest.FixtureRequest) -> Callable[[str], Trials]:
    """``trials_of(fault)``: this test's seeded trials of ``fault``."""
    return lambda fault: seeded(request.node.name, fault)


@pytest.fixture
def make_world(tmp_path: Path) -> Iterator[MakeWorld]:
    """``make_world(**options)``: a fresh fleet under ``tmp_path``; every one is closed at teardown."""
    made: list[FaultWorld] = []

    def make(**options: object) -> FaultWorld:
        world = FaultWorld(tmp_path / f"world-{len(made)}", **options)  # type: ignore[arg-type]
        made.append(world)
        return world

    yield make
    for world in made:
        world.close()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One PostgreSQL 15 server for the suite's run; fails in CI (CI set) when the binaries are missing."""
    try:
        server = PostgresServer.start()
    except PostgresUnavailable as exc:
        if os.environ.get("CI"):
            pytest.fail(str(exc))
        pytest.skip(f"{exc} (outside CI the PostgreSQL faults are skipped)")
    yield server
    server.stop()


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    """An empty database on the suite's PostgreSQL server, dropped afterwards. Request it before
    ``make_world`` so that the world's aggregators end before their database goes (else they log a storm of
    errors at teardown and take seconds to stop)."""
    url = postgres_server.new_database()
    yield url
    postgres_server.drop_database(url)


@pytest.fixture
def netns_pair() -> Iterator[Namespace]:
    """A network namespace for one node with two links to the host: [0] the aggregator's path, [1] the API
    server's. Skipped, with the reason, where namespaces cannot be made (not root, no iproute2). Request it
    before ``make_world`` so that the world's processes end before the namespace goes."""
    why = netns.unavailable()
    if why is not None:
        pytest.skip(f"partition faults skipped: {why}")
    netns.sweep()
    namespace = Namespace()
    try:
        namespace.link()
        namespace.link()
        yield namespace
    finally:
        namespace.close()


MakeDisk = Callable[[Path, str], TmpfsDisk]


@pytest.fixture
def make_disk() -> Iterator[MakeDisk]:
    """``make_disk(path, size)``: a tmpfs mounted at ``path``, unmounted at teardown. Skipped, with the
    reason, where it cannot be mounted (not root). Request it before ``make_world``."""
    why = tmpfs.unavailable()
    if why is not None:
        pytest.skip(f"full-disk faults skipped: {why}")
    disks: list[TmpfsDisk] = []

    def make(path: Path, size: str) -> TmpfsDisk:
        disks.append(TmpfsDisk(path, size))
        return disks[-1]

    yield make
    for disk in disks:
        disk.close()


@pytest.fixture
def postgres_pair() -> Iterator[PostgresPair]:
    """A PostgreSQL primary and its synchronous streaming standby; fails in CI without the binaries.
    Request it before ``make_world``, as ``postgres_url``."""
    try:
        pair = PostgresPair()
    except PostgresUnavailable as exc:
        if os.environ.get("CI"):
            pytest.fail(str(exc))
        pytest.skip(f"{exc} (outside CI the PostgreSQL faults are skipped)")
    try:
        yield pair.start()
    finally:
        pair.close()
