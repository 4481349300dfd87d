"""A throw-away PostgreSQL 15 server for the aggregator tests (initdb + pg_ctl as the postgres user)."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

import psycopg

PG_BIN = Path(os.environ.get("GPUHEALTH_PG_BIN", "/usr/lib/postgresql/15/bin"))


class PostgresUnavailable(RuntimeError):
    """The PostgreSQL server binaries are not installed."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class PostgresServer:
    """One running server; :meth:`new_database` gives each test its own empty database."""

    root: Path
    port: int
    as_postgres: list[str]

    @classmethod
    def start(cls) -> PostgresServer:
        if not (PG_BIN / "initdb").exists():
            raise PostgresUnavailable(
                f"PostgreSQL 15 server binaries not found in {PG_BIN} (apt-get install postgresql-15)"
            )
        # PostgreSQL refuses to run as root: run it as the postgres user in a directory that user owns.
        as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        root = Path(tempfile.mkdtemp(prefix="gpuhealth-pg-"))
        if as_postgres:
            owner = pwd.getpwnam("postgres")
            os.chown(root, owner.pw_uid, owner.pw_gid)
        server = cls(root=root, port=free_port(), as_postgres=as_postgres)
        server._run(
            "initdb", "-D", str(root / "data"), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"
        )
        options = (
            f"-p {server.port} -k {root} -c listen_addresses=127.0.0.1 -c max_connections=300 "
            "-c fsync=off -c full_page_writes=off"
        )
        server._run(
            "pg_ctl",
            "-D",
            str(root / "data"),
            "-l",
            str(root / "log"),
            "-o",
            options,
            "-w",
            "-t",
            "60",
            "start",
        )
        return server

    def _run(self, tool: str, *args: str) -> None:
        result = subprocess.run(
            [*self.as_postgres, str(PG_BIN / tool), *args],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(f"{tool} failed: {result.stderr.strip() or result.stdout.strip()}")

    def stop(self) -> None:
        try:
            self._run("pg_ctl", "-D", str(self.root / "data"), "-m", "immediate", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def _admin(self) -> psycopg.Connection[tuple[object, ...]]:
        return psycopg.connect(
            host="127.0.0.1", port=self.port, user="postgres", dbname="postgres", autocommit=True
        )

    def new_database(self) -> str:
        """Create an empty database; returns its SQLAlchemy URL."""
        name = f"t_{uuid.uuid4().hex[:12]}"
        with self._admin() as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{name}"

    def drop_database(self, url: str) -> None:
        name = url.rsplit("/", 1)[1]
        with self._admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
