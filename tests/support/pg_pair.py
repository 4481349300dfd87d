"""A PostgreSQL 15 primary with a streaming standby on loopback, for the failover fault (initdb, pg_basebackup
and pg_ctl as the postgres user, as ``tests/aggregator/postgres.py`` runs its single server).

Replication is synchronous (``synchronous_standby_names = '*'``, ``synchronous_commit = on``): a commit
returns once the standby has it, which is what the aggregator's promise needs (an acknowledged report is
stored); with asynchronous replication a failover loses the last commits the primary acknowledged, and
docs/reliability.md says so. The aggregators reach the pair through one libpq multi-host URL with
``target_session_attrs=read-write``, so after the failover they find the promoted standby themselves.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import psycopg

from tests.aggregator.postgres import PG_BIN, PostgresUnavailable, free_port

DATABASE = "gpuhealth"


class PostgresPair:
    def __init__(self) -> None:
        if not (PG_BIN / "initdb").exists():
            raise PostgresUnavailable(f"PostgreSQL 15 server binaries not found in {PG_BIN}")
        self.as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        self.root = Path(tempfile.mkdtemp(prefix="gpuhealth-pgpair-"))
        if self.as_postgres:
            owner = pwd.getpwnam("postgres")
            os.chown(self.root, owner.pw_uid, owner.pw_gid)
        self.primary_port, self.standby_port = free_port(), free_port()
        self.running: set[str] = set()

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

    def _start(self, name: str, port: int) -> None:
        options = (
            f"-p {port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off"
        )
        self._run(
            "pg_ctl",
            "-D",
            str(self.root / name),
            "-l",
            str(self.root / f"{name}.log"),
            "-o",
            options,
            "-w",
            "-t",
            "60",
            "start",
        )
        self.running.add(name)

    def start(self) -> PostgresPair:
        primary = self.root / "primary"
        self._run("initdb", "-D", str(primary), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
        with (primary / "postgresql.conf").open("a", encoding="utf-8") as conf:
            conf.write(
                "wal_level = replica\nmax_wal_senders = 5\nsynchronous_commit = on\nmax_connections = 200\n"
            )
        self._start("primary", self.primary_port)
        with psycopg.connect(
            host="127.0.0.1", port=self.primary_port, user="postgres", dbname="postgres", autocommit=True
        ) as conn:
            conn.execute(f'CREATE DATABASE "{DATABASE}"')  # before the standby: it is copied with the rest
        self._run(
            "pg_basebackup",
            "-h",
            "127.0.0.1",
            "-p",
            str(self.primary_port),
            "-U",
            "postgres",
            "-D",
            str(self.root / "standby"),
            "-R",
            "--checkpoint=fast",
            "-X",
            "stream",
        )
        self._start("standby", self.standby_port)
        # Synchronous from here on (set once the standby streams: a commit before would wait for it forever).
        with psycopg.connect(
            host="127.0.0.1", port=self.primary_port, user="postgres", dbname="postgres", autocommit=True
        ) as conn:
            conn.execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
            conn.execute("SELECT pg_reload_conf()")
        return self

    @property
    def url(self) -> str:
        """SQLAlchemy URL over both servers; libpq picks the one that takes writes."""
        return (
            f"postgresql+psycopg://postgres@/{DATABASE}?host=127.0.0.1:{self.primary_port}"
            f"&host=127.0.0.1:{self.standby_port}&target_session_attrs=read-write"
        )

    def fail_over(self) -> None:
        """The primary dies (immediate shutdown: no checkpoint, connections cut) and the standby is promoted."""
        self._run("pg_ctl", "-D", str(self.root / "primary"), "-m", "immediate", "stop")
        self.running.discard("primary")
        self._run("pg_ctl", "-D", str(self.root / "standby"), "-w", "promote")

    def close(self) -> None:
        for name in list(self.running):
            with contextlib.suppress(RuntimeError):  # already down: nothing to stop
                self._run("pg_ctl", "-D", str(self.root / name), "-m", "immediate", "stop")
        shutil.rmtree(self.root, ignore_errors=True)
